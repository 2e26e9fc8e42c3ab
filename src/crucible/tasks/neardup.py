"""Near-duplicate text of tasks: word shingles of a task's instruction and its normalised
reference solution, compared by Jaccard similarity.

Normalising drops comments, blank lines, case and runs of whitespace, so a copy with
reformatted code or reworded comments is still found. The solution is every text file under
solution/ except the failure cases (solution/failures/), each read up to a cap, never
through a link.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

SHINGLE_WORDS = 5
MAX_TEXT_BYTES = 256 * 1024  # read of one file
DEFAULT_THRESHOLD = 0.8
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+(?:\.\d+)?|[^\sA-Za-z0-9_]")
_COMMENT = re.compile(r"(^|\s)#(?!!).*$")


def normalise_code(text: str) -> str:
    lines = []
    for line in text.splitlines():
        line = _COMMENT.sub("", line).strip()
        if line:
            lines.append(line.lower())
    return " ".join(" ".join(lines).split())


def shingles(text: str, k: int = SHINGLE_WORDS) -> frozenset[int]:
    words = _WORD.findall(text.lower())
    if len(words) < k:
        return frozenset({_h(" ".join(words))}) if words else frozenset()
    return frozenset(_h(" ".join(words[i : i + k])) for i in range(len(words) - k + 1))


def jaccard(a: frozenset[int], b: frozenset[int]) -> float:
    if not a or not b:
        return 0.0
    common = len(a & b) if len(a) <= len(b) else len(b & a)
    return common / (len(a) + len(b) - common)


def _similar(a: frozenset[int], b: frozenset[int], threshold: float) -> float | None:
    # Jaccard is at most min/max of the sizes: most pairs are ruled out without a set op
    small, big = sorted((len(a), len(b)))
    if big == 0 or small / big < threshold:
        return None
    sim = jaccard(a, b)
    return sim if sim >= threshold else None


def task_text(task_dir: Path, instruction: str) -> str:
    """The instruction and the normalised reference solution, as one text."""
    parts = [instruction]
    solution = task_dir / "solution"
    if solution.is_dir() and not solution.is_symlink():
        for path in sorted(solution.rglob("*")):
            rel = path.relative_to(solution).parts
            if rel[0] == "failures" or path.is_symlink() or not path.is_file():
                continue
            if any(p.is_symlink() for p in path.parents if p.is_relative_to(solution)):
                continue
            parts.append(normalise_code(_read(path)))
    return "\n".join(parts)


def near_pairs(
    left: Sequence[tuple[str, frozenset[int]]],
    right: Sequence[tuple[str, frozenset[int]]],
    threshold: float = DEFAULT_THRESHOLD,
) -> tuple[list[tuple[str, str, float]], int]:
    """Pairs (left name, right name, similarity) at or above `threshold`, and the pairs checked."""
    found: list[tuple[str, str, float]] = []
    for a, sa in left:
        for b, sb in right:
            if (sim := _similar(sa, sb, threshold)) is not None:
                found.append((a, b, round(sim, 4)))
    return found, len(left) * len(right)


def near_pairs_within(
    items: Sequence[tuple[str, frozenset[int]]], threshold: float = DEFAULT_THRESHOLD
) -> list[tuple[str, str, float]]:
    """The near-duplicate pairs among `items` (each unordered pair once)."""
    found: list[tuple[str, str, float]] = []
    for i, (a, sa) in enumerate(items):
        for b, sb in items[i + 1 :]:
            if (sim := _similar(sa, sb, threshold)) is not None:
                found.append((a, b, round(sim, 4)))
    return found


def _read(path: Path) -> str:
    try:
        with path.open("rb") as f:
            return f.read(MAX_TEXT_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _h(s: str) -> int:
    return int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest(), "big")
