"""Adapters that give trainers crucible's rewards and sandboxes through a running `crucible serve`."""
