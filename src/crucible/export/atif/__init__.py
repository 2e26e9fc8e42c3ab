"""ATIF v1.8 trajectories from crucible's terminal agent and from installed agents' native logs."""
