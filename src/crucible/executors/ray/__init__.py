"""The ray executor: a node agent per node of a Ray cluster runs the trials the job's scheduler places there."""
