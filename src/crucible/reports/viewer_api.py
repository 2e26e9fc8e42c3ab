"""The viewer's JSON API over a jobs dir: jobs, one job, a task, a trial, a trial's files.

Trial folders hold untrusted output: names are checked to be direct children
of the jobs dir and file paths must resolve inside their trial folder. Files
and JSON are re-read from disk on each request (parsed records are cached by
mtime and size), so the page follows a running job by polling. viewer.py
serves this API over HTTP.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any

from crucible.export.atif.common import ATIF_FILE
from crucible.export.atif.trial import trial_atif
from crucible.metrics.aggregate import group_metrics, task_metrics
from crucible.metrics.model import MetricOptions
from crucible.metrics.records import record_from_result
from crucible.records.job import JobConfig, JobSummary
from crucible.records.trajectory import TRAJECTORY_LOG, load_trajectory
from crucible.records.trial import TrialResult
from crucible.store.layout import (
    AGENT_DIR,
    LOGS_AGENT,
    LOGS_VERIFIER,
    TRAJECTORY_FILE,
    VERIFIER_DIR,
    collected_dir,
)
from crucible.store.log_reader import verifier_tail
from crucible.store.logs import TRIAL_LOG, read_lines
from crucible.store.trial_load import RESULT, BadRecord, Skipped, load_trial_result

TEXT_CAP = 512 * 1024  # bytes of one file shown inline
TRAJECTORY_CAP = 8 * 1024 * 1024  # an old trajectory.json
TRAJECTORY_LOG_CAP = 40 * 1024 * 1024  # the append-only log (its writer caps it at 32 MiB)


class ApiError(Exception):
    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def not_found(what: str) -> ApiError:
    return ApiError(HTTPStatus.NOT_FOUND, f"{what} not found")


def read_text_capped(path: Path, cap: int = TEXT_CAP) -> dict[str, Any]:
    """The head of a text file, with its size and whether it was cut."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        data = fh.read(cap)
    return {
        "name": path.name,
        "size": size,
        "truncated": size > cap,
        "text": data.decode("utf-8", errors="replace"),
    }


def _child(parent: Path, name: str) -> Path | None:
    """`parent/name` when `name` is one plain path segment naming a real child."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
        return None
    p = parent / name
    try:
        if p.resolve().parent != parent.resolve():
            return None  # a symlink out of the folder
    except OSError:
        return None
    return p


@dataclass
class _Cached:
    mtime_ns: int
    size: int
    result: TrialResult | Skipped  # a bad record is remembered too, with why


class ViewerAPI:
    """What the HTTP handler serves, as plain dicts; usable without a server."""

    def __init__(self, jobs_dir: Path, options: MetricOptions | None = None) -> None:
        self.jobs_dir = jobs_dir
        self.options = options or MetricOptions()
        self._cache: dict[Path, _Cached] = {}
        self._lock = threading.Lock()

    # --- reading the store -----------------------------------------------------
    def _job_dir(self, job_id: str) -> Path:
        p = _child(self.jobs_dir, job_id)
        if p is None or not (p / "job.json").is_file() or job_id.startswith("."):
            raise not_found(f"job {job_id!r}")
        return p

    def _trial_dir(self, jdir: Path, trial: str) -> Path:
        p = _child(jdir, trial)
        if p is None or not p.is_dir() or trial.startswith("."):
            raise not_found(f"trial {trial!r}")
        return p

    def _config(self, jdir: Path) -> JobConfig | None:
        try:
            return JobConfig.model_validate_json((jdir / "job.json").read_bytes())
        except (OSError, ValueError):
            return None

    def _summary(self, jdir: Path) -> JobSummary | None:
        try:
            return JobSummary.model_validate_json((jdir / "result.json").read_bytes())
        except (OSError, ValueError):
            return None

    def _load(self, path: Path) -> TrialResult | Skipped | None:
        """The record at `path`, the Skipped saying why it is bad, or None (no record:
        the trial is running). Through store/trial_load.py, the one tolerant reader."""
        try:
            st = path.stat()
        except OSError:
            return None
        with self._lock:
            hit = self._cache.get(path)
        if hit and hit.mtime_ns == st.st_mtime_ns and hit.size == st.st_size:
            return hit.result
        got: TrialResult | Skipped
        try:
            got = load_trial_result(path)
        except BadRecord as exc:
            got = Skipped(path, str(exc))
        with self._lock:
            self._cache[path] = _Cached(st.st_mtime_ns, st.st_size, got)
        return got

    def _result(self, path: Path) -> TrialResult | None:
        got = self._load(path)
        return got if isinstance(got, TrialResult) else None

    def _trials(self, jdir: Path) -> tuple[list[tuple[str, TrialResult]], list[str], list[Skipped]]:
        """(finished trials, folders of trials in progress, bad records left out)."""
        done: list[tuple[str, TrialResult]] = []
        running: list[str] = []
        skipped: list[Skipped] = []
        for child in sorted(jdir.iterdir()):
            if not child.is_dir() or child.name.startswith("."):
                continue
            r = self._load(child / RESULT)
            if isinstance(r, TrialResult):
                done.append((child.name, r))
            elif isinstance(r, Skipped):
                skipped.append(r)
            elif (child / TRIAL_LOG).exists() or (child / "agent").exists():
                running.append(child.name)
        return done, running, skipped

    def _instruction(self, jdir: Path, cfg: JobConfig | None, task: str, tdir: Path | None) -> Any:
        """The instruction as run: a copy in the trial or job folder if the runner
        kept one, else instruction.md in the task folder named by job.json."""
        candidates: list[Path] = []
        if tdir is not None:
            candidates += [tdir / "instruction.md", tdir / "agent" / "instruction.md"]
        candidates += [
            jdir / "instructions" / f"{task}.md",
            jdir / "tasks" / task / "instruction.md",
        ]
        ref = next((t for t in cfg.tasks if t.name == task), None) if cfg else None
        if ref is not None:
            base = Path(ref.path).expanduser()
            candidates.append(base / "instruction.md")
            if not base.is_absolute():
                candidates.append(self.jobs_dir.parent / base / "instruction.md")
        for c in candidates:
            if c.is_file():
                out = read_text_capped(c)
                out["path"] = str(c)
                return out
        return None

    # --- endpoints -------------------------------------------------------------
    def jobs(self) -> dict[str, Any]:
        out = []
        if self.jobs_dir.is_dir():
            for jdir in self.jobs_dir.iterdir():
                if jdir.name.startswith(".") or not (jdir / "job.json").is_file():
                    continue
                cfg, summary = self._config(jdir), self._summary(jdir)
                out.append(
                    {
                        "job_id": jdir.name,
                        "name": cfg.name if cfg else jdir.name,
                        "agent": cfg.agent if cfg else None,
                        "model": cfg.model if cfg else None,
                        "env": cfg.env if cfg else None,
                        "created_at": cfg.created_at.isoformat() if cfg else None,
                        "n_planned": len(cfg.tasks) * cfg.attempts if cfg else None,
                        "status": summary.status if summary else None,
                        "n_done": summary.n_done if summary else None,
                        "outcomes": summary.outcomes if summary else {},
                        "mean_reward": summary.mean_reward if summary else None,
                        "pass_at_k": summary.pass_at_k if summary else {},
                    }
                )
        out.sort(key=lambda j: (j["created_at"] or "", j["job_id"]), reverse=True)
        from crucible.reports.viewer_train import train_runs

        return {
            "jobs_dir": str(self.jobs_dir),
            "jobs": out,
            "train_runs": train_runs(self.jobs_dir),
        }

    def job(self, job_id: str) -> dict[str, Any]:
        jdir = self._job_dir(job_id)
        cfg, summary = self._config(jdir), self._summary(jdir)
        done, running, skipped = self._trials(jdir)
        model = cfg.model if cfg else None
        records = [record_from_result(r, folder=f, model=model) for f, r in done]
        return {
            "job_id": job_id,
            "config": cfg.model_dump(mode="json") if cfg else None,
            "summary": summary.model_dump(mode="json") if summary else None,
            "n_planned": len(cfg.tasks) * cfg.attempts if cfg else None,
            "metrics": group_metrics(records, self.options).model_dump(mode="json"),
            "tasks": [t.model_dump(mode="json") for t in task_metrics(records, self.options)],
            "running": running,
            # bad trial records left out of the metrics: the page warns, naming each
            "skipped": [{"trial": s.path.parent.name, "why": s.why} for s in skipped],
        }

    def task(self, job_id: str, task: str) -> dict[str, Any]:
        jdir = self._job_dir(job_id)
        cfg = self._config(jdir)
        done, _, _ = self._trials(jdir)
        mine = [(f, r) for f, r in done if r.task_name == task]
        known = {t.name for t in cfg.tasks} if cfg else set()
        if not mine and task not in known:
            raise not_found(f"task {task!r}")
        records = [record_from_result(r, folder=f) for f, r in mine]
        tm = task_metrics(records, self.options)
        return {
            "job_id": job_id,
            "task": task,
            "metadata": next((t.metadata for t in cfg.tasks if t.name == task), {}) if cfg else {},
            "instruction": self._instruction(jdir, cfg, task, None),
            "metrics": tm[0].model_dump(mode="json") if tm else None,
        }

    def trial(self, job_id: str, trial: str) -> dict[str, Any]:
        jdir = self._job_dir(job_id)
        tdir = self._trial_dir(jdir, trial)
        cfg = self._config(jdir)
        got = self._load(tdir / RESULT)
        result = got if isinstance(got, TrialResult) else None
        task = result.task_name if result else None
        raw = None
        if result is not None:  # as stored (it passed the tolerant reader: finite rewards)
            raw = json.loads((tdir / RESULT).read_text(errors="replace"))
        timings = {}
        if result is not None:
            for phase in ("environment_setup", "agent_setup", "agent_execution", "verifier"):
                t = getattr(result, phase)
                if t is not None:
                    timings[phase] = {
                        "started_at": t.started_at.isoformat() if t.started_at else None,
                        "finished_at": t.finished_at.isoformat() if t.finished_at else None,
                        "duration_sec": t.duration_sec,
                    }
        rec = record_from_result(result, folder=trial) if result else None
        return {
            "job_id": job_id,
            "trial": trial,
            "task": task,
            "status": "done" if result else ("bad_record" if got is not None else "running"),
            "bad_record": got.why if isinstance(got, Skipped) else None,
            "result": raw,
            "attempt": result.attempt if result else None,
            "outcome": result.outcome if result else None,
            "rewards": result.verifier_result.rewards
            if result and result.verifier_result
            else None,
            # each verifier stage (the test script, host-side gates, scores and vetoes)
            "stages": [
                {"name": n, "status": st, "reason": why}
                for n, st, why in (rec.stages if rec else ())
            ],
            "duration_sec": rec.duration_sec if rec else None,
            "cost_usd": rec.cost_usd if rec else None,
            "timings": timings,
            "instruction": self._instruction(jdir, cfg, task, tdir) if task else None,
            "trajectory": self._trajectory(tdir),
            "atif": self._atif(tdir, result),
            "agent_logs": self._texts(
                tdir / AGENT_DIR, skip={TRAJECTORY_FILE, TRAJECTORY_LOG, ATIF_FILE}
            )
            + self._texts(collected_dir(tdir, LOGS_AGENT), base=tdir),
            "verifier": self._texts(tdir / VERIFIER_DIR)
            + self._texts(collected_dir(tdir, LOGS_VERIFIER), base=tdir),
            # why it scored 0 or failed, shown above the rest
            "verifier_tail": verifier_tail(tdir)
            if result is not None and (not result.graded or not result.reward)
            else [],
            "log": [
                {"ts": ln.timestamp.isoformat(), "level": ln.level, "message": ln.message}
                for ln in read_lines(tdir / TRIAL_LOG)
            ],
            "files": self._files(tdir),
        }

    def _trajectory(self, tdir: Path) -> Any:
        log = tdir / AGENT_DIR / TRAJECTORY_LOG
        if log.is_file() and not log.is_symlink():
            if log.stat().st_size > TRAJECTORY_LOG_CAP:
                return {"truncated": True, "size": log.stat().st_size}
            try:
                traj = load_trajectory(log)
            except (ValueError, KeyError, TypeError):
                return read_text_capped(log)
            data = traj.model_dump(mode="json")
            for turn in data["turns"]:  # token ids and logprobs are for trainers, not the page
                turn["metrics"] = {
                    k: f"[{len(v)} items]" if isinstance(v, list | dict) else v
                    for k, v in turn["metrics"].items()
                }
            return data
        p = tdir / AGENT_DIR / TRAJECTORY_FILE
        if not p.is_file():
            return None
        if p.stat().st_size > TRAJECTORY_CAP:
            return {"truncated": True, "size": p.stat().st_size}
        try:
            return json.loads(p.read_text(errors="replace"))
        except ValueError:
            return read_text_capped(p)

    def _atif(self, tdir: Path, result: TrialResult | None) -> dict[str, Any] | None:
        """The trial's ATIF trajectory (written, or converted from the agent's own log)."""
        got = trial_atif(tdir, result)
        if got is None:
            return None
        doc, source = got
        return {"source": source, "document": doc.to_json_dict()}

    def _texts(
        self, folder: Path, skip: set[str] | None = None, base: Path | None = None
    ) -> list[dict[str, Any]]:
        """Text files of a folder, named relative to `base` (default: the folder)."""
        if not folder.is_dir() or folder.is_symlink():
            return []
        out = []
        root = folder.resolve()
        for p in sorted(folder.rglob("*")):
            if not p.is_file() or (skip and p.name in skip):
                continue
            if not p.resolve().is_relative_to(root):
                continue
            entry = read_text_capped(p)
            entry["name"] = str(p.relative_to(base or folder))
            out.append(entry)
            if len(out) >= 50:
                break
        return out

    def _files(self, tdir: Path) -> list[dict[str, Any]]:
        out = []
        for p in sorted(tdir.rglob("*")):
            if p.is_file():
                out.append({"path": str(p.relative_to(tdir)), "size": p.stat().st_size})
            if len(out) >= 500:
                break
        return out

    def file(self, job_id: str, trial: str, rel: str) -> Path:
        tdir = self._trial_dir(self._job_dir(job_id), trial)
        if "\x00" in rel:
            raise not_found("file")
        root = tdir.resolve()
        try:
            target = (tdir / rel).resolve(strict=True)
        except (OSError, RuntimeError):
            raise not_found("file") from None
        if not target.is_relative_to(root):
            raise ApiError(HTTPStatus.FORBIDDEN, "path outside the trial folder")
        if not target.is_file():
            raise not_found("file")
        return target
