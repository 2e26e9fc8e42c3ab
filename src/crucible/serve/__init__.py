"""The grading service (`crucible serve`): grades submissions for RL trainers, sessions, warm
pools (docs/serve.md)."""
