"""Where trials run: local (in this process) or ray (a node agent per node); the job's scheduler decides what runs."""
