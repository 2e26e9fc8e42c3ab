"""Shared test helpers (real servers on 127.0.0.1, task builders)."""
