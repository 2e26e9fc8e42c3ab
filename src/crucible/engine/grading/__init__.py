"""Grading an attempt: one Grader for a one-step trial and each step (see grader.py)."""
