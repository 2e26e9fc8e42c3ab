"""How the io stage compares two outputs: parsed as JSON and matched with tolerances, or
as text.

JSON outputs are compared structurally: numbers within `abs_tol` or `rel_tol` (as
math.isclose), NaN equal to NaN, lists (arrays, nested lists, tuples printed as lists)
element by element with the same length, objects with the same keys, anything else
exactly. A bool is not a number here (True is not 1). A data frame is compared when the
program prints it as JSON (records or columns); no pandas or polars is needed for that.
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal

CompareMode = Literal["json", "text"]


def parse_output(stdout: str, mode: CompareMode) -> Any:
    """The output a program printed: the whole stdout as JSON or else its last non-empty
    line as JSON (a program may log before its result); text mode strips trailing
    whitespace. ValueError when JSON mode finds none."""
    if mode == "text":
        return "\n".join(line.rstrip() for line in stdout.rstrip().splitlines())
    text = stdout.strip()
    try:
        return json.loads(text)
    except ValueError:
        pass
    except RecursionError:  # a hostile output nested past the parser's depth
        raise ValueError("its output is nested too deeply") from None
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError("printed nothing")
    try:
        return json.loads(lines[-1])
    except ValueError as exc:
        raise ValueError(f"its last line is not JSON: {lines[-1][:200]!r}") from exc
    except RecursionError:
        raise ValueError("its last line is nested too deeply") from None


def mismatch(
    expected: Any, got: Any, abs_tol: float, rel_tol: float, path: str = "$"
) -> str | None:
    """Where `got` differs from `expected` (a JSON path and why), or None when they match."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return None if expected is got else f"{path}: expected {expected!r}, got {got!r}"
    if isinstance(expected, int | float) and isinstance(got, int | float):
        try:
            e, g = float(expected), float(got)
        except OverflowError:  # an int past any float: only itself matches
            return (
                None
                if expected == got
                else f"{path}: expected {_short(expected)}, got {_short(got)}"
            )
        if math.isnan(e) and math.isnan(g):
            return None
        if e == g or math.isclose(e, g, rel_tol=rel_tol, abs_tol=abs_tol):
            return None
        return f"{path}: expected {expected!r}, got {got!r} (abs_tol {abs_tol}, rel_tol {rel_tol})"
    if isinstance(expected, list) and isinstance(got, list):
        if len(expected) != len(got):
            return f"{path}: expected {len(expected)} items, got {len(got)}"
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            why = mismatch(e, g, abs_tol, rel_tol, f"{path}[{i}]")
            if why:
                return why
        return None
    if isinstance(expected, dict) and isinstance(got, dict):
        if set(expected) != set(got):
            diff = sorted(set(expected) ^ set(got))[:5]
            return f"{path}: keys differ: {diff}"
        for key in expected:
            why = mismatch(expected[key], got[key], abs_tol, rel_tol, f"{path}.{key}")
            if why:
                return why
        return None
    if type(expected) is not type(got) or expected != got:
        return f"{path}: expected {_short(expected)}, got {_short(got)}"
    return None


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
