"""The one reader of stored trial records (a trial folder's result.json) that every view
uses: `report`, `runs list|get|logs|trace`, the viewer, a resumed job.

A record can be bad: written before rewards were range-checked (1.5e308), edited by
hand, truncated by a full disk, or hostile (a lone surrogate escaped, Infinity). One bad
record never stops a view: it is left out, and the caller is told which (its path) and
why, to warn. Records are written atomically (write_json_atomic), so one that does not
parse is not one being written: it is bad, and said so.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from crucible.records.reward_range import stored_problem
from crucible.records.trial import TrialResult

RESULT = "result.json"
# A trial record is a few KiB to a few MiB (stage reasons, details); past this it is
# not one crucible wrote, and reading it whole would only cost memory.
MAX_RECORD_BYTES = 64 << 20


class BadRecord(ValueError):
    """A stored trial record that cannot be counted; the message says why."""


@dataclass(frozen=True)
class Skipped:
    """A trial record left out of a view."""

    path: Path
    why: str

    def __str__(self) -> str:
        return f"{self.path}: {self.why}"


def _brief(exc: ValidationError) -> str:
    errs = exc.errors(include_url=False)
    first = errs[0] if errs else {"loc": (), "msg": str(exc), "type": ""}
    where = ".".join(str(p) for p in first["loc"]) or "record"
    more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
    kind = "not valid JSON" if first["type"] == "json_invalid" else "wrong schema"
    return f"{kind}: {where}: {first['msg']}{more}"[:300]


def _rewards(r: TrialResult) -> Iterator[tuple[str, float | None]]:
    """Every stored reward: the final ones, the script's, each stage's and each step's."""
    v = r.verifier_result
    if v is not None:
        yield from (v.rewards or {}).items()
        yield from (v.script_rewards or {}).items()
        for s in v.stages:
            yield from ((f"{s.name}.{k}", x) for k, x in s.components.items())
    for step in r.steps or []:
        sv = step.verifier_result
        if sv is not None:
            yield from ((f"{step.name}/{k}", x) for k, x in (sv.rewards or {}).items())


def load_trial_result(path: Path) -> TrialResult:
    """The record at `path`; BadRecord saying why it cannot be used (unreadable, not
    JSON, wrong schema, or a reward not finite or outside its task's range)."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_RECORD_BYTES + 1)
    except OSError as exc:
        raise BadRecord(f"unreadable: {exc.strerror or exc}") from exc
    if len(data) > MAX_RECORD_BYTES:
        raise BadRecord(f"larger than {MAX_RECORD_BYTES} bytes")
    try:
        r = TrialResult.model_validate_json(data)
    except ValidationError as exc:
        raise BadRecord(_brief(exc)) from exc
    except (ValueError, RecursionError) as exc:
        raise BadRecord(f"not valid JSON: {type(exc).__name__}") from exc
    problem = stored_problem(_rewards(r), r.task_metadata)
    if problem is not None:
        raise BadRecord(problem)
    return r


def scan_trials(jdir: Path) -> tuple[list[tuple[str, TrialResult]], list[Skipped]]:
    """(folder name, record) of every trial folder of `jdir` holding a usable
    result.json, in folder order, and the records left out. A folder without one is a
    trial still running, and neither."""
    done: list[tuple[str, TrialResult]] = []
    skipped: list[Skipped] = []
    try:
        children = sorted(jdir.iterdir())
    except OSError:
        return done, skipped
    for child in children:
        p = child / RESULT
        if child.name.startswith(".") or not child.is_dir() or not p.is_file():
            continue
        try:
            done.append((child.name, load_trial_result(p)))
        except BadRecord as exc:
            skipped.append(Skipped(p, str(exc)))
    return done, skipped
