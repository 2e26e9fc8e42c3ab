"""Access tokens for crucible's HTTP servers (viewer, grading service): one gate, one rule."""
