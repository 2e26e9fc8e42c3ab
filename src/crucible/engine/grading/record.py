"""What grading puts on the trial's record: what the attempt changed in the system
(and, under `--tampered zero`, its 0), test.sh's output in crucible's own folder, and
the rewards read from what was collected of /logs/verifier."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from crucible.errors import Tampered, VerifierFailed
from crucible.records.tamper import TamperPolicy, TamperRecord
from crucible.records.trial import TrialResult
from crucible.records.verifier import VerifierResult
from crucible.sandboxes.base import ExecResult
from crucible.store.logs import FileLog
from crucible.verifiers.rewards import check_range
from crucible.verifiers.script import PRELUDE_FAILED, read_rewards


def note_changes(
    result: TrialResult,
    record: TamperRecord | None,
    log: FileLog,
    policy: TamperPolicy = "flag",
    *,
    shared: bool = True,
) -> None:
    """Put what the attempt changed on the trial's record (both forms), say so in the log,
    and, under `--tampered zero` when grading runs where the agent was (`shared`), count it
    0: raise Tampered naming the changes grading could run. The one place every grading
    path (a trial, a step, shared or separate) records and polices tampering."""
    result.tamper = record
    result.tampered_paths = None if record is None else record.as_paths()
    if record is None and policy == "zero" and shared:
        log.warning("--tampered zero: this provider cannot see what the attempt changed")
    if record is None or not (record.changes or record.walk_cut):
        return
    reaching = record.reaching
    log.warning(
        f"the attempt changed {record.n_total} path(s) outside its own places, "
        f"{len(reaching)} that grading can run: "
        + ", ".join(f"{c.path} ({c.marks()})" for c in (reaching or record.changes)[:10])
    )
    if policy == "zero" and shared and record.counts_against:
        record.zeroed = True
        raise Tampered(record.reason()[:1000])


def record_grade(
    res: ExecResult,
    verifier_dir: Path,
    own: Path,
    timeout_sec: float,
    log: FileLog,
    hold: Callable[[VerifierResult], None],
    reward_range: tuple[float, float],
) -> VerifierResult:
    """Write test.sh's output to crucible's own folder `own` (made here: never one the
    sandbox shares), then read the rewards into a VerifierResult. `hold` gets it first, so
    a reward that cannot be read, or lies outside `reward_range` (VerifierFailed), leaves
    the exit code on record."""
    own.mkdir(parents=True)
    (own / "test-stdout.txt").write_text(
        res.stdout + (f"\n--- stderr ---\n{res.stderr}" if res.stderr else "")
    )
    record = VerifierResult(exit_code=res.exit_code)
    hold(record)
    record.rewards, details = rewards_of(res, verifier_dir, timeout_sec)
    # The task's range, after the details are split off: a reward outside it (1.5e308,
    # whose sum with itself is inf) is the attempt's failure, never a score.
    check_range(record.rewards, *reward_range, source="the test script's reward")
    if details:  # Harbor's reward.json may carry strings beside its numbers
        record.details = details
        log.warning(
            f"reward.json values that are not numbers kept as details: {sorted(details)[:10]}"
        )
    return record


def rewards_of(
    res: ExecResult, verifier_dir: Path, timeout_sec: float
) -> tuple[dict[str, float], dict[str, Any]]:
    """The rewards graded and reward.json's non-numeric details, or VerifierFailed saying
    why there are none."""
    if res.timed_out:
        raise VerifierFailed(f"the verifier timed out after {timeout_sec:g}s")
    try:
        return read_rewards(verifier_dir)
    except VerifierFailed as exc:
        if res.exit_code == 0:
            raise
        tail = (res.stderr.strip().splitlines() or [""])[-1][:300]
        what = (
            "grading could not be set up"
            if res.exit_code == PRELUDE_FAILED
            else f"test.sh exited {res.exit_code}"
        )
        raise VerifierFailed(f"{exc.message}; {what}: {tail}") from exc
