"""A parsed patch (agents/patch.py) applied to the texts of the files it touches.

`apply_patch` is all or nothing: every file's outcome is worked out in memory before
agents/submission.py writes any of them. Hunks apply as `patch` applies them with fuzz 0:
the lines a hunk replaces must match exactly, at its line or at the nearest offset
(later hunks keep the offset found), never before the previous hunk's end; a hunk with
less leading than trailing context is pinned to the file's start, one with less
trailing context to its end.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from crucible.agents.patch import FilePatch, Hunk, PatchError, split_lines

# Lines compared while placing hunks, over one patch: past it the patch is refused (a
# hostile one could otherwise ask for every hunk to be sought through a huge file).
MAX_PROBES = 20_000_000


class _Budget:
    def __init__(self) -> None:
        self.left = MAX_PROBES

    def spend(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise PatchError("the patch's hunks take too long to place (too far from their lines)")


def apply_hunks(
    text: str, hunks: list[Hunk], where: str = "the file", budget: _Budget | None = None
) -> str:
    """`text` with each hunk applied in order."""
    budget = budget or _Budget()
    lines = split_lines(text)
    out: list[str] = []
    pos = 0
    offset = 0
    for n, hunk in enumerate(hunks, 1):
        base = hunk.old_start - 1 if hunk.old else hunk.old_start
        at = _locate(lines, hunk, base + offset, pos, budget)
        if at is None:
            raise PatchError(
                f"{where}: hunk {n} (at line {hunk.old_start}) does not match the file"
            )
        out += lines[pos:at]
        out += hunk.new
        pos = at + len(hunk.old)
        offset = at - base
    out += lines[pos:]
    return "".join(out)


def _locate(lines: list[str], hunk: Hunk, want: int, low: int, budget: _Budget) -> int | None:
    size = len(hunk.old)
    high = len(lines) - size
    if high < low:
        return None
    if hunk.lead < hunk.trail:  # fewer lines before than after its change: at the start
        spots: Iterator[int] = iter([0])
    elif hunk.trail < hunk.lead:  # and the other way: at the end
        spots = iter([high])
    else:
        spots = _nearest(min(max(want, low), high), low, high)
    old = list(hunk.old)
    first = old[0] if old else None
    for at in spots:
        budget.spend(1)
        if not low <= at <= high or (first is not None and lines[at] != first):
            continue
        budget.spend(size)
        if lines[at : at + size] == old:
            return at
    return None


def _nearest(want: int, low: int, high: int) -> Iterator[int]:
    """want, want-1, want+1, ... over [low, high] (want within it)."""
    for d in range(max(want - low, high - want) + 1):
        if want - d >= low:
            yield want - d
        if d and want + d <= high:
            yield want + d


@dataclass(frozen=True)
class Outcome:
    text: str | None  # the file's new content; None: removed
    mode: int | None = None  # the mode to set, or None to leave it


def touched(patches: list[FilePatch]) -> list[str]:
    """Every path the patches read or write, in order, once each."""
    names = (p for fp in patches for p in (fp.old_path, fp.new_path) if p is not None)
    return list(dict.fromkeys(names))


def apply_patch(patches: list[FilePatch], current: dict[str, str | None]) -> dict[str, Outcome]:
    """What the patches make of the files in `current` (every touched path: its text, or
    None where it does not exist): the paths they change, with their outcome. All or
    nothing: a PatchError leaves nothing half-applied."""
    state = dict(current)
    modes: dict[str, int] = {}
    budget = _Budget()
    for fp in patches:
        if fp.old_path is None:
            if state.get(fp.path) is not None:
                raise PatchError(f"{fp.path}: the patch creates it, but it already exists")
            text = apply_hunks("", fp.hunks, fp.path, budget)
        else:
            source = state.get(fp.old_path)
            if source is None:
                raise PatchError(f"{fp.old_path}: no such file to patch")
            text = apply_hunks(source, fp.hunks, fp.old_path, budget)
        if fp.new_path is None:
            assert fp.old_path is not None
            if text:
                raise PatchError(f"{fp.old_path}: the patch deletes it but its lines differ")
            state[fp.old_path] = None
            modes.pop(fp.old_path, None)
            continue
        if fp.old_path is not None and fp.old_path != fp.new_path:
            if state.get(fp.new_path) is not None:
                raise PatchError(
                    f"{fp.new_path}: the patch renames or copies onto it, but it exists"
                )
            if not fp.copy:
                state[fp.old_path] = None
                modes.pop(fp.old_path, None)
        state[fp.new_path] = text
        if fp.mode is not None:
            modes[fp.new_path] = fp.mode
    return {
        path: Outcome(text, modes.get(path))
        for path, text in state.items()
        if text != current.get(path) or path in modes
    }
