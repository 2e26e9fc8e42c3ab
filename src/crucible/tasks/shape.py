"""Limits on the shape of what a task file parses into: a task folder is untrusted input.

A few bytes of YAML anchors expand to millions of values (each anchor a list of ten of
the one before), an anchor can hold itself, and YAML or TOML can nest past Python's
stack. crucible walks what it parsed (interpolation, validation, storing): so each parse
is checked here first, without recursion, counting a value once per place it appears
(as a walk would meet it), and refused past the caps, before anything else reads it.
"""

from __future__ import annotations

from typing import Any

MAX_DEPTH = 64  # tables, lists and mappings inside each other
MAX_VALUES = 100_000  # every value, counted once per place an alias puts it


def shape_problem(
    value: Any, *, max_depth: int = MAX_DEPTH, max_values: int = MAX_VALUES
) -> str | None:
    """Why `value` (a parsed document) is refused, or None when it is within the caps."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > max_values:
            return f"it expands to more than {max_values} values (aliases repeat what they name)"
        if isinstance(item, dict):
            children: Any = [*item.keys(), *item.values()]
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth >= max_depth:
            return f"it is nested more than {max_depth} levels deep"
        stack.extend((child, depth + 1) for child in children)
    return None


def parse_refused(exc: RecursionError) -> str:
    """The problem to report when a parser ran out of stack on a task file."""
    return f"it is nested too deeply to parse ({type(exc).__name__})"
