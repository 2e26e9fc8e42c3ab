"""Adapters that give trainers (TRL, verl, slime, OpenRLHF, verifiers) crucible's rewards
and sandboxes, through a running `crucible serve` (client.py)."""
