"""The grading service (`crucible serve`): grades submissions for RL trainers (docs/serve.md)."""
