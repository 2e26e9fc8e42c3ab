"""The grading service (`crucible serve`): grades, sessions and warm pools for RL trainers."""
