"""Adapters that give trainers (TRL, verl, slime, OpenRLHF, verifiers) crucible's rewards and sandboxes."""
