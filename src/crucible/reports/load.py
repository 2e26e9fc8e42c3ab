"""Finding a job folder from what the user typed, and reading its trial records."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from crucible.llm.pricing import ModelPrice, ServerPrice, lookup_price
from crucible.metrics.records import TrialRecord, record_from_result
from crucible.metrics.selfhosted import SelfHostedBasis, price_self_hosted
from crucible.records.job import JobConfig, JobSummary
from crucible.records.trial import TrialResult
from crucible.store.layout import read_job_config, read_job_summary
from crucible.store.trial_load import Skipped, scan_trials

JOB_JSON = "job.json"


class JobNotFound(LookupError):
    """No job folder matches what was asked for."""


@dataclass
class LoadedJob:
    job_id: str
    dir: Path
    config: JobConfig | None
    summary: JobSummary | None
    records: list[TrialRecord] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)  # bad trial records left out
    cost_basis: SelfHostedBasis | None = None  # a self-hosted model's costs: how
    label: str | None = None  # a sweep arm's label

    @property
    def model(self) -> str | None:
        return self.config.model if self.config else None

    def info(self) -> dict[str, object]:
        """Descriptive fields for `metrics.job_metrics`."""
        cfg = self.config
        return {
            "name": cfg.name if cfg else None,
            "agent": cfg.agent if cfg else None,
            "model": cfg.model if cfg else None,
            "status": self.summary.status if self.summary else None,
            "path": str(self.dir),
            "n_planned": len(cfg.tasks) * cfg.attempts if cfg else None,
            "skipped": [str(s) for s in self.skipped],
            "cost_basis": self.cost_basis.text() if self.cost_basis else None,
            "arm": self.label,
        }


def is_job_dir(path: Path) -> bool:
    return path.is_dir() and (path / JOB_JSON).is_file()


def list_job_dirs(jobs_dir: Path) -> list[Path]:
    if not jobs_dir.is_dir():
        return []
    return sorted(p for p in jobs_dir.iterdir() if not p.name.startswith(".") and is_job_dir(p))


def resolve_job(ref: str, jobs_dir: Path) -> Path:
    """A job folder from a path, a job id under `jobs_dir`, a job name (the
    newest job of that name wins) or an unambiguous id prefix."""
    as_path = Path(ref).expanduser()
    if is_job_dir(as_path):
        return as_path
    candidate = jobs_dir / ref
    if "/" not in ref and ref not in (".", "..") and is_job_dir(candidate):
        return candidate
    named: list[tuple[str, Path]] = []
    prefixed: list[Path] = []
    for jdir in list_job_dirs(jobs_dir):
        try:
            cfg = read_job_config(jdir)
        except (OSError, ValidationError, ValueError):
            continue
        if cfg.name == ref:
            named.append((cfg.created_at.isoformat(), jdir))
        if jdir.name.startswith(ref):
            prefixed.append(jdir)
    if named:
        return max(named)[1]
    if len(prefixed) == 1:
        return prefixed[0]
    if len(prefixed) > 1:
        names = ", ".join(p.name for p in prefixed[:5])
        raise JobNotFound(f"job {ref!r} is ambiguous: {names}")
    raise JobNotFound(f"no job {ref!r} in {jobs_dir} (and no job folder at that path)")


def read_trials(jdir: Path, skipped: list[Skipped] | None = None) -> list[tuple[str, TrialResult]]:
    """(folder name, final record) of every trial, one per (task, attempt).

    A bad record (store/trial_load.py: not JSON, wrong schema, a reward out of range)
    is left out and added to `skipped`. Should two folders hold the same (task,
    attempt), the one that finished last is the final record.
    """
    best: dict[tuple[str, int], tuple[str, TrialResult]] = {}
    done, bad = scan_trials(jdir)
    if skipped is not None:
        skipped.extend(bad)
    for folder, r in done:
        key = (r.task_name, r.attempt)
        old = best.get(key)
        if old is None or _finished(r) >= _finished(old[1]):
            best[key] = (folder, r)
    return sorted(best.values(), key=lambda fr: (fr[1].task_name, fr[1].attempt))


def _finished(r: TrialResult) -> str:
    return r.finished_at.isoformat() if r.finished_at else ""


def load_job(
    jdir: Path,
    prices: Mapping[str, ModelPrice] | None = None,
    servers: Mapping[str, ServerPrice] | None = None,
) -> LoadedJob:
    """The job's records, each rollout priced: by its recorded cost, else its tokens at
    `prices`, else (a model in `servers`) its share of a self-hosted server's time."""
    try:
        cfg: JobConfig | None = read_job_config(jdir)
    except (OSError, ValueError):
        cfg = None
    try:
        summary = read_job_summary(jdir)
    except (OSError, ValueError):
        summary = None
    model = cfg.model if cfg else None
    skipped: list[Skipped] = []
    trials = read_trials(jdir, skipped)
    records = [
        record_from_result(r, folder=folder, model=model, prices=prices) for folder, r in trials
    ]
    basis = None
    server = lookup_price(model, servers) if model and servers else None
    if server is not None and model is not None:
        spans = [
            (t.started_at, t.finished_at)
            for _, r in trials
            if (t := r.agent_execution) and t.started_at and t.finished_at
        ]
        records, basis = price_self_hosted(records, model, server, spans)
    return LoadedJob(
        job_id=cfg.job_id if cfg else jdir.name,
        dir=jdir,
        config=cfg,
        summary=summary,
        records=records,
        skipped=skipped,
        cost_basis=basis,
    )
