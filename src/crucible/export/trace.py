"""Exporting a job's traces: per trial, the instruction, the agent's output, the verifier's
output and the rewards, with a manifest (files, sizes, sha256).

Layout of the export:

  <out>/manifest.json
  <out>/job.json                       the job's config, as run
  <out>/<trial>/instruction.md         the task's instruction (from job.json tasks[].path)
  <out>/<trial>/result.json            the trial record: outcome, rewards, timings
  <out>/<trial>/trial.log
  <out>/<trial>/agent/...              crucible's record of the agent (trajectory, oracle output)
  <out>/<trial>/verifier/...           crucible's record of grading (test output)
  <out>/<trial>/sandbox/...            what was collected from the sandbox (logs/agent,
                                       logs/verifier with the reward files, logs/artifacts)
                                       and its manifest.json

With format "atif" (write_atif_trace), each trial folder holds only agent/trajectory.json,
the trial's ATIF v1.8 document under Harbor's name for it: the one the run wrote, or one
converted from the terminal agent's record or an installed agent's stdout
(export/atif/trial.py); a trial with nothing to convert is listed as missing.

Files under sandbox/ come from untrusted code: symbolic links (and anything that
is not a regular file) are listed as skipped and never followed, so an agent
cannot make an export copy files from the host.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from datetime import datetime
from fnmatch import fnmatchcase
from pathlib import Path

from pydantic import BaseModel, Field

from crucible.export.atif.trial import atif_json, trial_atif
from crucible.records.job import JobConfig
from crucible.records.text import storable_text
from crucible.records.trial import TrialResult, utcnow
from crucible.store.layout import AGENT_DIR, SANDBOX_DIR, VERIFIER_DIR, dump, write_json_atomic
from crucible.store.logs import TRIAL_LOG

MANIFEST = "manifest.json"
HARBOR_TRAJECTORY = f"{AGENT_DIR}/trajectory.json"  # where Harbor's readers look for ATIF
TREES = (AGENT_DIR, VERIFIER_DIR, SANDBOX_DIR)


class TraceFile(BaseModel):
    path: str  # relative to the export folder
    kind: str  # instruction | result | log | agent | verifier | sandbox | job
    size: int
    sha256: str | None = None  # None in a dry run


class Skipped(BaseModel):
    path: str
    reason: str


class TraceTrial(BaseModel):
    trial_name: str
    task_name: str
    attempt: int
    outcome: str
    reward: float | None
    rewards: dict[str, float] | None
    error_kind: str | None
    files: list[TraceFile] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)
    skipped: list[Skipped] = Field(default_factory=list)


class TraceManifest(BaseModel):
    job_id: str
    job_path: str
    exported_at: datetime = Field(default_factory=utcnow)
    out: str
    dry_run: bool
    n_trials: int
    n_files: int
    total_bytes: int
    n_unfinished_skipped: int  # trial folders with no final record yet (still running)
    job_files: list[TraceFile] = Field(default_factory=list)
    trials: list[TraceTrial] = Field(default_factory=list)


class NothingSelected(LookupError):
    pass


# Where each planned file comes from; kept apart from the manifest that is written.
Plan = list[tuple[Path, TraceFile]]


def _select(
    results: list[TrialResult], trials: list[str] | None, tasks: list[str] | None
) -> list[TrialResult]:
    out = results
    if trials:
        out = [
            r for r in out if any(r.trial_name == t or r.trial_name.startswith(t) for t in trials)
        ]
    if tasks:
        out = [
            r for r in out if any(r.task_name == t or fnmatchcase(r.task_name, t) for t in tasks)
        ]
    return out


def _instruction_path(cfg: JobConfig | None, task_name: str) -> Path | None:
    if cfg is None:
        return None
    for ref in cfg.tasks:
        if ref.name == task_name:
            return Path(ref.path) / "instruction.md"
    return None


def _walk(root: Path, rel_prefix: str, kind: str, tt: TraceTrial, plan: Plan) -> None:
    """Regular files under root, without following links."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        d = Path(dirpath)
        for name in sorted(dirnames):
            p = d / name
            if p.is_symlink():
                rel = f"{rel_prefix}/{p.relative_to(root).as_posix()}"
                tt.skipped.append(Skipped(path=rel, reason=f"symlink to {os.readlink(p)}"))
        dirnames[:] = sorted(n for n in dirnames if not (d / n).is_symlink())
        for name in sorted(filenames):
            p = d / name
            rel = f"{rel_prefix}/{p.relative_to(root).as_posix()}"
            st = p.lstat()
            if storable_text(rel) != rel:  # a sandbox's name, not UTF-8: JSON cannot hold it
                tt.skipped.append(Skipped(path=storable_text(rel), reason="name is not UTF-8"))
            elif stat.S_ISLNK(st.st_mode):
                tt.skipped.append(Skipped(path=rel, reason=f"symlink to {os.readlink(p)}"))
            elif not stat.S_ISREG(st.st_mode):
                tt.skipped.append(Skipped(path=rel, reason="not a regular file"))
            else:
                plan.append((p, TraceFile(path=rel, kind=kind, size=st.st_size)))


def _regular(p: Path) -> os.stat_result | None:
    try:
        st = p.lstat()
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def plan_trace(
    jdir: Path,
    job_id: str,
    cfg: JobConfig | None,
    out: Path,
    *,
    trials: list[str] | None = None,
    tasks: list[str] | None = None,
    dry_run: bool = True,
) -> tuple[TraceManifest, Plan]:
    """What an export would write; raises NothingSelected when filters match no trial."""
    from crucible.store.layout import iter_trial_results

    results = iter_trial_results(jdir)
    finished = {r.trial_name for r in results}
    unfinished = sum(
        1
        for c in jdir.iterdir()
        if c.is_dir() and c.name not in finished and (c / TRIAL_LOG).exists()
    )
    chosen = _select(results, trials, tasks)
    if (trials or tasks) and not chosen:
        raise NothingSelected("no finished trial matches the --trial/--task filters")
    plan: Plan = []
    manifest = TraceManifest(
        job_id=job_id,
        job_path=str(jdir),
        out=str(out),
        dry_run=dry_run,
        n_trials=len(chosen),
        n_files=0,
        total_bytes=0,
        n_unfinished_skipped=unfinished,
    )
    job_json = jdir / "job.json"
    if st := _regular(job_json):
        f = TraceFile(path="job.json", kind="job", size=st.st_size)
        manifest.job_files.append(f)
        plan.append((job_json, f))
    for r in chosen:
        tdir = jdir / r.trial_name
        rewards = r.verifier_result.rewards if r.verifier_result else None
        tt = TraceTrial(
            trial_name=r.trial_name,
            task_name=r.task_name,
            attempt=r.attempt,
            outcome=r.outcome,
            reward=r.reward,
            rewards=rewards,
            error_kind=r.error.kind.value if r.error else None,
        )
        start = len(plan)
        instr = _instruction_path(cfg, r.task_name)
        if instr is not None and (st := _regular(instr)):
            plan.append(
                (
                    instr,
                    TraceFile(
                        path=f"{r.trial_name}/instruction.md", kind="instruction", size=st.st_size
                    ),
                )
            )
        else:
            tt.missing.append(
                f"instruction.md (task {r.task_name!r}: "
                + (f"{instr} not found)" if instr else "not in job.json)")
            )
        for name, kind in (("result.json", "result"), (TRIAL_LOG, "log")):
            if st := _regular(tdir / name):
                plan.append(
                    (
                        tdir / name,
                        TraceFile(path=f"{r.trial_name}/{name}", kind=kind, size=st.st_size),
                    )
                )
            else:
                tt.missing.append(name)
        for tree in TREES:
            root = tdir / tree
            if root.is_symlink():
                tt.skipped.append(Skipped(path=f"{r.trial_name}/{tree}", reason="symlink"))
            elif root.is_dir():
                _walk(root, f"{r.trial_name}/{tree}", tree, tt, plan)
            elif tree != SANDBOX_DIR:  # sandbox/ exists only once something was collected
                tt.missing.append(f"{tree}/")
        tt.files = [f for _, f in plan[start:]]
        manifest.trials.append(tt)
    manifest.n_files = len(plan)
    manifest.total_bytes = sum(f.size for _, f in plan)
    return manifest, plan


def out_is_nonempty(out: Path) -> bool:
    if out.is_dir():
        return any(out.iterdir())
    return out.exists()


def _copy_hashing(src: Path, dst: Path) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    dst.parent.mkdir(parents=True, exist_ok=True)
    # O_NOFOLLOW: a file swapped for a link after planning is refused, not followed.
    fd = os.open(src, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as fin, dst.open("wb") as fout:
        while chunk := fin.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
            fout.write(chunk)
    return size, h.hexdigest()


def write_trace(manifest: TraceManifest, plan: Plan, out: Path) -> TraceManifest:
    """Copy every planned file, hashing as it goes, then write manifest.json."""
    out.mkdir(parents=True, exist_ok=True)
    for src, f in plan:
        dst = out / f.path
        if dst.is_symlink() or (dst.exists() and not dst.is_file()):
            # Left from an earlier export: replace it, never write through it.
            if dst.is_dir() and not dst.is_symlink():
                shutil.rmtree(dst)
            else:
                dst.unlink()
        try:
            f.size, f.sha256 = _copy_hashing(src, dst)
        except OSError as exc:
            f.sha256 = None
            f.size = 0
            for tt in manifest.trials:
                if f in tt.files:
                    tt.files.remove(f)
                    tt.skipped.append(Skipped(path=f.path, reason=f"unreadable: {exc.strerror}"))
    manifest.dry_run = False
    manifest.n_files = sum(len(t.files) for t in manifest.trials) + len(manifest.job_files)
    manifest.total_bytes = sum(f.size for t in manifest.trials for f in t.files) + sum(
        f.size for f in manifest.job_files
    )
    manifest.exported_at = utcnow()
    write_json_atomic(out / MANIFEST, dump(manifest))
    return manifest


def atif_documents(jdir: Path, manifest: TraceManifest) -> dict[str, str]:
    """Trial name -> its ATIF JSON, for the manifest's trials that have one."""
    from crucible.store.trial_load import load_trial_result

    docs: dict[str, str] = {}
    for tt in manifest.trials:
        tdir = jdir / tt.trial_name
        try:
            result = load_trial_result(tdir / "result.json")
        except (OSError, ValueError):
            result = None
        got = trial_atif(tdir, result)
        if got is not None:
            docs[tt.trial_name] = atif_json(got[0])
    return docs


def plan_atif(manifest: TraceManifest, docs: dict[str, str]) -> TraceManifest:
    """The manifest of an ATIF export: one agent/trajectory.json per trial that has a document."""
    for tt in manifest.trials:
        tt.skipped = []
        doc = docs.get(tt.trial_name)
        if doc is None:
            tt.files, tt.missing = [], ["ATIF trajectory (no record to convert)"]
            continue
        path = f"{tt.trial_name}/{HARBOR_TRAJECTORY}"
        tt.files, tt.missing = [TraceFile(path=path, kind="atif", size=len(doc.encode()))], []
    manifest.job_files = []
    manifest.n_files = sum(len(t.files) for t in manifest.trials)
    manifest.total_bytes = sum(f.size for t in manifest.trials for f in t.files)
    return manifest


def write_atif_trace(manifest: TraceManifest, docs: dict[str, str], out: Path) -> TraceManifest:
    out.mkdir(parents=True, exist_ok=True)
    for tt in manifest.trials:
        for f in tt.files:
            dst = out / f.path
            dst.parent.mkdir(parents=True, exist_ok=True)
            if dst.is_symlink():
                dst.unlink()  # left from an earlier export: replaced, never written through
            data = docs[tt.trial_name].encode()
            dst.write_bytes(data)
            f.size, f.sha256 = len(data), hashlib.sha256(data).hexdigest()
    manifest.dry_run = False
    manifest.exported_at = utcnow()
    write_json_atomic(out / MANIFEST, dump(manifest))
    return manifest
