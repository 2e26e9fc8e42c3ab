"""Where things live on disk, and the job-level records (job.json, result.json).

<jobs-dir>/
  index.sqlite                 jobs and trials (see store/index.py)
  <job-id>/
    job.json                   JobConfig, as run
    result.json                JobSummary, rewritten as trials finish
    cancel.request             present when `runs cancel` asked the job to stop
    <trial-id>/
      result.json              TrialResult
      trial.log                timestamped lifecycle log lines
      agent/                   crucible's records of the agent (trajectory.json, oracle.txt, ...)
      verifier/                crucible's records of grading (test-stdout.txt)
      sandbox/                 what was collected from the sandbox, and nothing else:
        manifest.json          what was not copied as bytes (links, devices) or was cut short
        logs/agent/  logs/verifier/  logs/artifacts/
        artifacts/             the task's declared artifacts (at their destination, or at
                               their sandbox path: /app/out.txt -> artifacts/app/out.txt),
                               as taken from the agent's sandbox after the agent phase

Nothing collected from a sandbox ever shares a folder or a name with what
crucible writes about the trial: an agent cannot forge its own record.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from crucible.records.job import JobConfig, JobSummary
from crucible.records.text import named, storable, storable_model, storable_text
from crucible.records.trial import TrialResult
from crucible.store.trial_load import Skipped, scan_trials

M = TypeVar("M", bound=BaseModel)
WARNINGS_FIELD = "record_warnings"  # where a record says it was written with escapes
# What a record that cannot be written even escaped keeps: who it is and how it ended.
BARE_FIELDS = ("schema_version", "id", "task_name", "trial_name", "job_id", "attempt",
               "task_checksum", "source", "agent_info", "outcome", "error", "retries",
               "started_at", "finished_at", "tampered_paths")  # fmt: skip
# ...and what it counts as: without its rewards a graded 0 reads back as no reward,
# left out of every mean, which a trial could aim for.
BARE_NESTED = {"verifier_result": {"rewards", "exit_code"}}

JOBS_DIR_ENV = "CRUCIBLE_JOBS_DIR"
INDEX_NAME = "index.sqlite"
CANCEL_FILE = "cancel.request"
AGENT_DIR = "agent"
VERIFIER_DIR = "verifier"
SANDBOX_DIR = "sandbox"
COLLECT_MANIFEST = "manifest.json"  # in SANDBOX_DIR, beside (never inside) what was collected
TRAJECTORY_FILE = "trajectory.json"  # in AGENT_DIR: the terminal agent's record, older runs
# The sandbox folders a trial collects (to <trial>/sandbox/logs/...).
LOGS_AGENT = "/logs/agent"
LOGS_VERIFIER = "/logs/verifier"
LOGS_ARTIFACTS = "/logs/artifacts"
ARTIFACTS_DIR = "artifacts"  # in SANDBOX_DIR: the declared artifacts


def default_jobs_dir() -> Path:
    return Path(os.environ.get(JOBS_DIR_ENV, "jobs"))


def write_json_atomic(path: Path, data: str) -> None:
    """Write via a temp file and rename, so a crash never leaves half a file."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(data, encoding="utf-8")
    os.replace(tmp, path)


def collected_dir(trial_dir: Path, sandbox_path: str) -> Path:
    """Where a sandbox folder (/logs/agent, say) is collected in a trial folder."""
    return trial_dir / SANDBOX_DIR / sandbox_path.strip("/")


def job_dir(jobs_dir: Path, job_id: str) -> Path:
    return jobs_dir / job_id


def read_job_config(jdir: Path) -> JobConfig:
    return JobConfig.model_validate_json((jdir / "job.json").read_text())


def read_job_summary(jdir: Path) -> JobSummary | None:
    p = jdir / "result.json"
    if not p.exists():
        return None
    return JobSummary.model_validate_json(p.read_text())


def iter_trial_results(jdir: Path, skipped: list[Skipped] | None = None) -> list[TrialResult]:
    """Every usable trial record of a job folder, sorted by (task, attempt). A bad one
    (store/trial_load.py) is left out, and added to `skipped` for the caller to warn."""
    done, bad = scan_trials(jdir)
    if skipped is not None:
        skipped.extend(bad)
    out = [r for _, r in done]
    out.sort(key=lambda r: (r.task_name, r.attempt))
    return out


def dump(model: BaseModel) -> str:
    return storable_dump(model)[1]


def storable_dump(model: M) -> tuple[M, str, list[str]]:
    """The record as JSON, never raising over what it holds: (the record written, its
    text, warnings). A string no record can hold (a lone surrogate that got past the
    parse points) is escaped in a copy, which says so in `record_warnings` where the
    model has that field; a value that still cannot be written leaves a bare record
    (BARE_FIELDS) that says why. The caller logs the warnings."""
    try:
        return model, model.model_dump_json(indent=2), []
    except ValueError:  # PydanticSerializationError: text UTF-8 cannot hold, say
        pass
    warnings: list[str] = []
    try:
        clean, places = storable_model(model)
        warnings.append(
            f"strings no record can hold were escaped at: {named(places)}"
            if places
            else "the record could not be written as it was"
        )
        clean = _warned(clean, warnings)
        return clean, clean.model_dump_json(indent=2), warnings
    except ValueError as exc:
        why = storable_text(f"{type(exc).__name__}: {exc}"[:500])
        warnings.append(f"the record could not be written whole, only its outcome: {why}")
        failed = exc
    keep: dict[str, Any] = {**dict.fromkeys(BARE_FIELDS, True), **BARE_NESTED}
    data = model.model_dump(mode="python", include=keep)
    try:  # a trial's record: who it is and how it ended still count
        bare = _warned(type(model).model_validate(storable(data)), warnings)
        return bare, bare.model_dump_json(indent=2), warnings
    except ValueError:  # a model with no bare form (job.json)
        raise failed from None


def _warned(model: M, warnings: list[str]) -> M:
    if WARNINGS_FIELD not in type(model).model_fields:
        return model
    earlier = getattr(model, WARNINGS_FIELD) or []
    return model.model_copy(update={WARNINGS_FIELD: [*earlier, *warnings]})
