"""The engine: job planning, trial lifecycle, scheduling, error taxonomy."""
