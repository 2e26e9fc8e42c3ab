"""The store: per-trial folders plus one SQLite index."""
