"""What `runs list` and `runs get` say of jobs: rows, filters, detail, reward over time.

Built from the records of queries.py; nothing here reads the index by itself, and
the folders only for `runs get --verbose`'s verifier-stage notes (trial result.json).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from crucible.records.trial import counted_as, utcnow
from crucible.records.verifier import not_fully_graded_text
from crucible.store.layout import CANCEL_FILE
from crucible.store.log_reader import verifier_tail
from crucible.store.queries import JobRecord, JobsDir, TrialStats, parse_dt
from crucible.store.trial_load import RESULT, BadRecord, Skipped, load_trial_result

# -- time -------------------------------------------------------------------

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|hr|d|w)\s*$", re.IGNORECASE)
_UNIT_SEC = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600, "d": 86400, "w": 604800}


def parse_when(text: str, *, now: datetime | None = None) -> datetime:
    """A point in time: an age like '2h', '30m', '1d' (that long ago) or ISO 8601.

    A naive ISO timestamp is taken as UTC. Raises ValueError on anything else.
    """
    m = _DURATION.match(text)
    if m:
        secs = float(m.group(1)) * _UNIT_SEC[m.group(2).lower()]
        return (now or utcnow()) - timedelta(seconds=secs)
    dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


class JobIdentity(BaseModel):
    """What `runs list` and `runs get` both say of a job."""

    job_id: str
    name: str
    kind: str = "eval"
    status: str
    interrupted: bool = False
    hint: str | None = None
    agent: str
    model: str | None
    env: str
    dataset: list[str]
    path: str
    pid: int | None
    created_at: datetime | None
    updated_at: datetime | None


class JobRow(JobIdentity):
    """One row of `runs list`."""

    n_trials: int
    n_done: int
    outcomes: dict[str, int]
    n_errors: int
    mean_reward: float | None


def resume_hint(job_id: str, kind: str = "eval", path: str = "") -> str:
    if kind == "generate":
        return f"the run's process is gone; continue it with `crucible generate -o {path}`"
    return f"the job's process is gone; continue it with `crucible run --resume {job_id}`"


# -- list -------------------------------------------------------------------


@dataclass
class ListFilter:
    since: datetime | None = None
    status: str | None = None
    agent: str | None = None
    model: str | None = None


def _matches(value: str | None, pattern: str | None) -> bool:
    if pattern is None:
        return True
    return value is not None and (value == pattern or fnmatchcase(value, pattern))


def job_row(rec: JobRecord, st: TrialStats | None) -> JobRow:
    if rec.kind != "eval" and rec.summary is not None and not st:
        # a run without trials of its own (generate): its result.json counts for it
        st = TrialStats(n_done=rec.summary.n_done, outcomes=dict(rec.summary.outcomes))
    st = st or TrialStats()
    n_errors = sum(n for k, n in st.outcomes.items() if k != "graded")
    return JobRow(
        **identity(rec).model_dump(),
        n_trials=rec.n_trials,
        n_done=st.n_done,
        outcomes=dict(sorted(st.outcomes.items())),
        n_errors=n_errors,
        mean_reward=st.mean_reward,
    )


def identity(rec: JobRecord) -> JobIdentity:
    """The fields `runs list` and `runs get` share, from one job record."""
    return JobIdentity(
        job_id=rec.job_id,
        name=rec.name,
        kind=rec.kind,
        status=rec.status,
        interrupted=rec.interrupted,
        hint=resume_hint(rec.job_id, rec.kind, str(rec.path)) if rec.interrupted else None,
        agent=rec.agent,
        model=rec.model,
        env=rec.env,
        dataset=rec.dataset,
        path=str(rec.path),
        pid=rec.pid,
        created_at=rec.created_at,
        updated_at=rec.updated_at,
    )


def list_jobs(
    jd: JobsDir, flt: ListFilter, *, limit: int | None = None
) -> tuple[list[JobRow], int]:
    """Matching jobs, newest first, and how many matched before the limit."""
    recs = list(jd.records().values())
    want_status = flt.status
    chosen: list[JobRecord] = []
    for rec in recs:
        if want_status == "interrupted":
            if not rec.interrupted:
                continue
        elif want_status is not None and rec.status != want_status:
            continue
        if not _matches(rec.agent, flt.agent) or not _matches(rec.model, flt.model):
            continue
        if flt.since is not None:
            last = rec.updated_at or rec.created_at
            if last is None or last < flt.since:
                continue
        chosen.append(rec)
    epoch = datetime.min.replace(tzinfo=UTC)
    chosen.sort(key=lambda r: (r.created_at or epoch, r.job_id), reverse=True)
    total = len(chosen)
    if limit is not None:
        chosen = chosen[:limit]
    stats = jd.trial_stats() if chosen else {}
    return [job_row(r, stats.get(r.job_id)) for r in chosen], total


# -- get --------------------------------------------------------------------


class ErrorGroup(BaseModel):
    count: int
    example_trial: str
    example_message: str | None
    example_output: list[str] = Field(default_factory=list)  # the verifier's last lines


class RewardPoint(BaseModel):
    finished_at: datetime | None
    trial_name: str
    reward: float
    n: int
    mean_reward: float


class TrialRow(BaseModel):
    trial_name: str
    task_name: str
    attempt: int
    outcome: str
    reward: float | None
    rewards: dict[str, float] | None
    error_kind: str | None
    error_message: str | None
    retries: int
    cost_usd: float | None
    started_at: datetime | None
    finished_at: datetime | None
    duration_sec: float | None
    # Why it errored or scored 0: the verifier's last lines (errors and zeros only).
    output_tail: list[str] = Field(default_factory=list)
    # Why a host-side verifier stage zeroed or stopped the trial ("judge vetoed: ..."),
    # read from its result.json (verbose only).
    stage_note: str | None = None


class Progress(BaseModel):
    done: int
    total: int
    fraction: float | None
    in_progress: int | None = None  # trial folders without a final record, while running
    cancelled: int = 0  # stopped by a cancel: not done (a resume runs them again)


class JobDetail(JobIdentity):
    """`runs get`: a job's identity, progress, errors and rewards."""

    pid_alive: bool | None
    cancel_requested: bool
    started_at: datetime | None
    finished_at: datetime | None
    progress: Progress
    outcomes: dict[str, int]
    errors: dict[str, ErrorGroup]
    n_errors: int
    mean_reward: float | None
    n_rewarded: int
    pass_at_k: dict[str, float]
    retries: int
    cost_usd: float | None
    # "2 trials not fully graded (judge veto not run: no judge configured)" (JobSummary)
    not_fully_graded: str | None = None
    reward_over_time: list[RewardPoint] | None = None
    trials: list[TrialRow] | None = None


def _count_in_progress(rec: JobRecord, finished: set[str]) -> int:
    n = 0
    try:
        for child in rec.path.iterdir():
            if (
                child.is_dir()
                and child.name not in finished
                and not (child / "result.json").exists()
                and (child / "trial.log").exists()
            ):
                n += 1
    except OSError:
        return 0
    return n


def job_detail(jd: JobsDir, rec: JobRecord, *, verbose: bool = False) -> JobDetail:
    rows = jd.trial_rows(rec)
    st = TrialStats()
    errors: dict[str, ErrorGroup] = {}
    cost: float | None = None
    retries = 0
    for r in rows:
        st.add(r["outcome"], r["reward"])
        retries += r["retries"] or 0
        if r["cost_usd"] is not None:
            cost = (cost or 0.0) + r["cost_usd"]
        if r["outcome"] not in ("graded", "cancelled"):  # cancelled: counted in progress
            kind = r["error_kind"] or r["outcome"]
            g = errors.get(kind)
            if g is None:
                errors[kind] = ErrorGroup(
                    count=1,
                    example_trial=r["trial_name"],
                    example_message=r["error_message"],
                    example_output=verifier_tail(rec.path / r["trial_name"]),
                )
            else:
                g.count += 1
    total = rec.n_trials or (rec.summary.n_trials if rec.summary else 0)
    in_progress = _count_in_progress(rec, {r["trial_name"] for r in rows}) if rec.running else None
    summary = rec.summary
    detail = JobDetail(
        **identity(rec).model_dump(),
        pid_alive=rec.alive,
        cancel_requested=(rec.path / CANCEL_FILE).exists(),
        started_at=summary.started_at if summary else None,
        finished_at=summary.finished_at if summary and not rec.running else None,
        progress=Progress(
            done=st.n_done,
            total=total,
            fraction=round(st.n_done / total, 4) if total else None,
            in_progress=in_progress,
            cancelled=st.n_cancelled,
        ),
        outcomes=dict(sorted(st.outcomes.items())),
        errors=dict(sorted(errors.items())),
        n_errors=sum(g.count for g in errors.values()),
        mean_reward=st.mean_reward,
        n_rewarded=st.n_rewarded,
        pass_at_k=dict(summary.pass_at_k) if summary else {},
        retries=retries,
        cost_usd=cost,
        not_fully_graded=not_fully_graded_text(summary.n_not_fully_graded,
                                               summary.not_fully_graded)
        if summary and summary.n_not_fully_graded else None,
    )  # fmt: skip
    if verbose:
        detail.reward_over_time = reward_over_time(rows)
        detail.trials = [_trial_row(r, rec.path) for r in rows]
        for tr in detail.trials:
            tr.stage_note = stage_note(rec.path / tr.trial_name / RESULT, jd.skipped)
    return detail


def reward_over_time(rows: list[dict[str, Any]]) -> list[RewardPoint]:
    """The cumulative mean reward, in the order trials finished (verifier_failed as 0)."""
    scored = [
        (r, v)
        for r in rows
        if (v := r["reward"] if r["outcome"] == "graded" else counted_as(r["outcome"])) is not None
    ]
    far = datetime.max.replace(tzinfo=UTC)
    scored.sort(key=lambda rv: (parse_dt(rv[0]["finished_at"]) or far, rv[0]["trial_name"]))
    out: list[RewardPoint] = []
    total = 0.0
    for i, (r, v) in enumerate(scored, start=1):
        total += v
        out.append(
            RewardPoint(
                finished_at=parse_dt(r["finished_at"]),
                trial_name=r["trial_name"],
                reward=v,
                n=i,
                mean_reward=total / i,
            )
        )
    return out


def stage_note(result_json: Path, skipped: list[Skipped] | None = None) -> str | None:
    """The verifier stages' note of one trial record; None when it has none or is bad
    (then added to `skipped`)."""
    try:
        r = load_trial_result(result_json)
    except BadRecord as exc:
        if skipped is not None:
            skipped.append(Skipped(result_json, str(exc)))
        return None
    return r.verifier_result.stage_note() if r.verifier_result else None


def _trial_row(r: dict[str, Any], job_path: Path) -> TrialRow:
    rewards = json.loads(r["rewards_json"]) if r.get("rewards_json") else None
    failed = r["outcome"] != "graded" or not r["reward"]
    return TrialRow(
        output_tail=verifier_tail(job_path / r["trial_name"]) if failed else [],
        trial_name=r["trial_name"],
        task_name=r["task_name"],
        attempt=r["attempt"],
        outcome=r["outcome"],
        reward=r["reward"],
        rewards=rewards,
        error_kind=r["error_kind"],
        error_message=r["error_message"],
        retries=r["retries"] or 0,
        cost_usd=r["cost_usd"],
        started_at=parse_dt(r["started_at"]),
        finished_at=parse_dt(r["finished_at"]),
        duration_sec=r["duration_sec"],
    )
