"""A task's declared artifacts and its [[verifier.collect]] hooks, taken from the agent's
sandbox once the agent phase is over, as Harbor takes them: hooks first, then every
`artifacts` entry (a path, or a table with source / destination / exclude).

Hooks and artifacts of a compose sidecar (`service = "db"`) are taken from that
service after main's (docker only; elsewhere there is no such service, and they are
skipped with a warning).

Taken under the reward-integrity rules: every sandbox process killed first, then
crucible's collector (sandboxes/collect/): no link followed or made on the host,
only regular files' bytes, within the artifacts' own caps. Each entry lands in
<trial>/sandbox/artifacts/ at its destination, or at its sandbox path
(/app/out.txt -> artifacts/app/out.txt); the first of two entries claiming one
host path is kept. A multi-step trial takes them after every step, into
<trial>/steps/NAME/sandbox/artifacts/. A separate verifier gets them back at their sandbox
paths (`give`), and nothing else of the agent's sandbox. The submission host-side stages
judge is taken before any of this (engine/grading/grader.py): a hook is a command run in
the agent's sandbox, and may run the agent's code.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from crucible.engine.collect import TrialCollector
from crucible.errors import SandboxFailed
from crucible.records.tamper import TamperRecord
from crucible.sandboxes.base import Sandbox
from crucible.store.layout import ARTIFACTS_DIR, LOGS_ARTIFACTS, SANDBOX_DIR
from crucible.store.logs import FileLog
from crucible.tasks.models import Task
from crucible.tasks.sections import MAIN_SERVICE, ArtifactSection, artifact_list


@dataclass(frozen=True)
class Taken:
    """One artifact on the host, and where it stood in the agent's sandbox."""

    sandbox_path: str
    host: Path


def entries(task: Task, *, with_logs: bool) -> list[ArtifactSection]:
    """The task's artifacts of the main service; /logs/artifacts first when `with_logs`
    (a separate verifier sees the agent's /logs/artifacts, as in Harbor)."""
    out = [a for a in artifact_list(task.config.artifacts) if not a.on_sidecar]
    if with_logs and not any(_path(a.source, "/") == LOGS_ARTIFACTS for a in out):
        out.insert(0, ArtifactSection(source=LOGS_ARTIFACTS))
    return out


def _path(source: str, workdir: str) -> str:
    return posixpath.normpath(posixpath.join(workdir, source))


async def run_collect_hooks(
    sandbox: Sandbox, task: Task, log: FileLog, *, sidecars: bool = False
) -> None:
    """The task's [[verifier.collect]] commands for main (or, `sidecars`, for the compose
    sidecars, in their own working folders), in order, best effort (Harbor's rule: a
    failing hook is a warning). Only a lost sandbox raises."""
    for hook in task.config.verifier.collect:
        if (hook.service != MAIN_SERVICE) != sidecars:
            continue
        box = sandbox if hook.service == MAIN_SERVICE else sandbox.service(hook.service)
        if box is None:
            log.warning(f"collect hook for service {hook.service!r} skipped (no such service)")
            continue
        user = None if hook.user is None else str(hook.user)
        cwd = task.workdir if box is sandbox else None
        try:
            res = await box.exec(hook.command, timeout=hook.timeout_sec, cwd=cwd, user=user)
        except SandboxFailed:
            raise
        except Exception as exc:
            log.warning(f"collect hook {hook.command!r} failed: {type(exc).__name__}: {exc}")
            continue
        if not res.ok:
            why = "timed out" if res.timed_out else f"exited {res.exit_code}"
            log.warning(f"collect hook {hook.command!r} {why}: {res.stderr.strip()[-300:]}")


async def take_artifacts(
    sandbox: Sandbox,
    task: Task,
    collector: TrialCollector,
    log: FileLog,
    *,
    with_logs: bool = False,
    into: Path | None = None,
) -> list[Taken]:
    """Hooks, then every artifact into <into>/sandbox/artifacts/ (`into`: the trial's folder,
    or a step's): main's first, then the compose sidecars' (their hooks, then their
    entries), as Harbor takes them. The caller has killed every agent process; main's hooks
    may start some, so they are killed again first."""
    wanted = entries(task, with_logs=with_logs)
    on_sidecars = [a for a in artifact_list(task.config.artifacts) if a.on_sidecar]
    hooks = task.config.verifier.collect
    if not wanted and not on_sidecars and not hooks:
        return []
    await run_collect_hooks(sandbox, task, log)
    await sandbox.kill_all()
    taken = [
        t
        for i, entry in enumerate(wanted)
        if (t := await _take(sandbox, entry, i, task.workdir, collector, log, into))
    ]
    if on_sidecars or any(h.service != MAIN_SERVICE for h in hooks):
        await run_collect_hooks(sandbox, task, log, sidecars=True)
    for i, entry in enumerate(on_sidecars, start=len(wanted)):
        assert entry.service is not None
        box = sandbox.service(entry.service)
        if box is None:
            log.warning(f"artifact {entry.source}: no service {entry.service!r}; skipped")
        elif t := await _take(box, entry, i, "/", collector, log, into):
            taken.append(t)
    return taken


async def _take(
    box: Sandbox,
    entry: ArtifactSection,
    i: int,
    workdir: str,
    collector: TrialCollector,
    log: FileLog,
    into: Path | None,
) -> Taken | None:
    trial_dir = collector.trial_dir
    base = into or trial_dir
    path = _path(entry.source, workdir)
    parent, name = posixpath.split(path)
    if not name:
        log.warning(f"artifact {entry.source!r}: the sandbox root is not an artifact")
        return None
    stage = base / SANDBOX_DIR / f".artifact-{i}"
    record = await collector.collect_artifact(box, parent, name, stage, entry.exclude)
    target = base / SANDBOX_DIR / ARTIFACTS_DIR / (entry.destination or path.lstrip("/"))
    problem = _place(stage / name, target)
    shutil.rmtree(stage, ignore_errors=True)
    if problem == "absent" and record.notes:  # a link, a fifo...: listed, not copied
        log.warning(f"artifact {path}: not a file or folder (see the manifest); skipped")
    elif problem == "absent":
        record.absent = True
        if path != LOGS_ARTIFACTS:  # Harbor's convention folder may well be empty
            log.warning(f"artifact {path}: not found in the sandbox")
    elif problem:
        log.warning(f"artifact {path}: {problem}")
    else:
        record.dst = str(target.relative_to(trial_dir))
        return Taken(path, target)
    return None


def _place(got: Path, target: Path) -> str | None:
    """Move a staged artifact to its place; what went wrong, or None."""
    if not os.path.lexists(got):
        return "absent"
    if os.path.lexists(target):
        return f"{target.name} is taken by an earlier artifact; skipped"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)  # folders crucible made
        os.rename(got, target)
    except OSError as exc:
        return f"could not be placed: {exc}"
    return None


async def hand_over(sandbox: Sandbox, *, separate: bool) -> TamperRecord | None:
    """The end of an agent phase: every agent process killed, and in separate mode what
    the attempt changed in the system, read before anything of grading runs (in place,
    grading reads it itself once the collect hooks are done: script.grade_in_place)."""
    await sandbox.kill_all()
    return await sandbox.system_changes() if separate else None


async def give(sandbox: Sandbox, taken: list[Taken]) -> None:
    """Upload the artifacts into (a separate verifier's) `sandbox` at their sandbox paths."""
    for t in taken:
        if t.host.is_dir():
            await sandbox.upload_dir(t.host, t.sandbox_path)
            continue
        parent, name = posixpath.split(t.sandbox_path)
        with tempfile.TemporaryDirectory(prefix="crucible-artifact-") as tmp:
            shutil.copy2(t.host, Path(tmp) / name)
            await sandbox.upload_dir(Path(tmp), parent)
