"""Datasets by name: Harbor's dataset registry, and the git checkouts its tasks come from."""
