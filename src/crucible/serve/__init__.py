"""The grading service (`crucible serve`): grades, sessions, warm pools."""
