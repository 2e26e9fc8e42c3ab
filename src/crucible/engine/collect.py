"""Collecting a trial's /logs folders into its trial folder, and the manifest of it.

The caller kills every sandbox process first (trial.py: agent -> kill_all ->
/logs/agent; verifier -> kill_all -> /logs/verifier and /logs/artifacts).
Everything lands under <trial>/sandbox/ (store/layout.py), apart from what
crucible writes. /logs/agent and /logs/artifacts share one budget and
/logs/verifier has its own, so an agent cannot crowd the reward file out; a
task's declared artifacts (engine/grading/artifacts.py) have a third, larger one.
Truncation and links are warned about in trial.log as they are met; the
detail is in <trial>/sandbox/manifest.json, written once the trial's sandbox
is gone (one file write per trial, not one per folder).
"""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path

from crucible.errors import SandboxFailed
from crucible.records.text import storable_text
from crucible.sandboxes.base import Sandbox
from crucible.sandboxes.collect.collector import (
    Budget,
    Collected,
    CollectManifest,
    Sink,
    collect,
    collect_entry,
)
from crucible.sandboxes.collect.manifest import ARTIFACTS
from crucible.store.layout import (
    COLLECT_MANIFEST,
    LOGS_VERIFIER,
    SANDBOX_DIR,
    collected_dir,
    dump,
    write_json_atomic,
)
from crucible.store.logs import FileLog


class TrialCollector:
    def __init__(self, trial_dir: Path, log: FileLog) -> None:
        self.trial_dir = trial_dir
        self.log = log
        self.manifest = CollectManifest()
        self._agent_side = Budget.of(self.manifest.limits)
        self._verifier = Budget.of(self.manifest.limits)
        self._artifacts = Budget.of(ARTIFACTS)

    async def collect(self, sandbox: Sandbox, src: str, dst: Path | None = None) -> Path:
        """Collect `src` (best effort: only a lost sandbox raises) into `dst` (by default its
        place under <trial>/sandbox/); returns that host folder."""
        dst = dst or collected_dir(self.trial_dir, src)
        budget = self._verifier if src == LOGS_VERIFIER else self._agent_side
        sink = Sink(src, dst, budget, shown=str(dst.relative_to(self.trial_dir)))
        await self._run(sandbox, sink, collect(sandbox, src, sink))
        return dst

    async def collect_artifact(
        self, sandbox: Sandbox, parent: str, name: str, stage: Path, exclude: list[str]
    ) -> Collected:
        """One declared artifact (entry `name` of folder `parent`) into host folder `stage`,
        under the artifacts' own budget (best effort: only a lost sandbox raises)."""
        shown = str(stage.relative_to(self.trial_dir))
        sink = Sink(parent, stage, self._artifacts, shown, only=name, exclude=exclude)
        return await self._run(sandbox, sink, collect_entry(sandbox, parent, sink))

    async def _run(self, sandbox: Sandbox, sink: Sink, work: Awaitable[Collected]) -> Collected:
        """Run one collection and record it. Best effort: only a lost sandbox raises; an
        in-sandbox tar the agent broke (modal's transfers: a /tmp made a file) leaves the
        folder missing (no reward: a counted failure), never the trial uncounted."""
        try:
            record = await work
        except SandboxFailed as exc:
            if not await sandbox.alive():
                raise
            record = sink.record
            record.error = storable_text(exc.message)[:1000]
        except Exception as exc:  # logs are best effort; the reward is not
            record = sink.record
            record.error = storable_text(f"{type(exc).__name__}: {exc}")[:1000]
        self.manifest.folders.append(record)
        self._warn(record)
        return record

    def write(self) -> None:
        """Write the manifest (once, when the trial's collecting is over).

        Never fails the trial: the manifest describes what was collected, it
        does not decide the reward, and the agent must not be able to turn its
        grading into an error through it.
        """
        try:
            folder = self.trial_dir / SANDBOX_DIR
            folder.mkdir(exist_ok=True)
            write_json_atomic(folder / COLLECT_MANIFEST, dump(self.manifest))
        except Exception as exc:
            self.log.warning(f"could not write {SANDBOX_DIR}/{COLLECT_MANIFEST}: {exc}")

    def _warn(self, r: Collected) -> None:
        where = f"{SANDBOX_DIR}/{COLLECT_MANIFEST}"
        if r.error:
            self.log.warning(f"could not collect {r.src}: {r.error}")
        if r.truncated:
            self.log.warning(
                f"collecting {r.src}: cut short by a cap ({r.files} files, {r.bytes} bytes "
                f"kept); see {where}"
            )
        skipped = len(r.notes) + r.notes_dropped - sum(n.truncated for n in r.notes)
        if skipped:
            self.log.warning(
                f"collecting {r.src}: {skipped} entries not copied as bytes "
                f"(links, devices, odd names); see {where}"
            )
