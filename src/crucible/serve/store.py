"""The service's grade records: one small JSON file per grade id, written before its
sandbox starts, in the job folder's hidden `.grades/` (trial scans skip dot folders).

A record holds the idempotency key (the id, the submission's digest, the task's name
and hash), the trial folder it runs in, and, once done, its final GradeResult. The key
record is written at once; the finished one behind the grade's answer, in batches off
the event loop (`write_later`): until then, its trial's result.json stands for it. It is
what makes a grade outlive its request (a client that disconnects), and the service
(kill -9 and restart: a record with a result is answered from disk, one without is
run again).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from crucible.records.serve import GradeResult
from crucible.records.submission import Submission
from crucible.records.trial import utcnow
from crucible.store.layout import write_json_atomic

GRADES_DIR = ".grades"
FLUSH_DELAY_SEC = 0.05  # how long a finished record may wait for its batch


def grade_key(grade_id: str) -> str:
    """The file-safe name of a grade id (ids are arbitrary strings): its sha256, cut."""
    return hashlib.sha256(grade_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def trial_name_for_grade(grade_id: str) -> str:
    return f"grade__{grade_key(grade_id)}"


class GradeRecord(BaseModel):
    id: str
    digest: str  # submission_digest
    task: str  # the task's name
    task_hash: str
    trial: str  # the trial folder's name in the job
    # The task's grades are its attempts, numbered as they come: reports count each one.
    attempt: int = 0
    # Kept until the grade is done (a restart re-runs it from here), then dropped.
    submission: Submission | None
    group_id: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)
    created_at: str = Field(default_factory=lambda: utcnow().isoformat())
    result: GradeResult | None = None  # None: not finished (or killed before it was)


class GradeStore:
    def __init__(self, job_dir: Path) -> None:
        self.dir = job_dir / GRADES_DIR
        self.dir.mkdir(parents=True, exist_ok=True)
        self._later: list[tuple[Path, str]] = []  # finished records not yet written
        self._flusher: asyncio.Task[None] | None = None
        self._writing: asyncio.Future[None] | None = None

    def path(self, grade_id: str) -> Path:
        return self.dir / f"{grade_key(grade_id)}.json"

    def write(self, record: GradeRecord) -> None:
        write_json_atomic(self.path(record.id), record.model_dump_json())

    def write_later(self, record: GradeRecord) -> None:
        """Queue a FINISHED record for `flush` (off the event loop, behind its answer).
        Safe to lose: its trial's result.json is already written, and start() finishes
        a record from it. A key record (before its sandbox starts) uses `write`."""
        self._later.append((self.path(record.id), record.model_dump_json()))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_soon(), name="grade-records")

    async def flush(self) -> None:
        """Write every queued record (each atomically), in a worker thread."""
        while self._later:
            batch, self._later = self._later, []
            self._writing = asyncio.ensure_future(asyncio.to_thread(_write_all, batch))
            await asyncio.shield(self._writing)  # a batch, once begun, is written whole

    async def close(self) -> None:
        """Write what is queued now, not at the batch's time."""
        if self._flusher is not None:
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
        if self._writing is not None:
            await self._writing
        await self.flush()

    async def _flush_soon(self) -> None:
        await asyncio.sleep(FLUSH_DELAY_SEC)  # the answers first; a burst is one batch
        await self.flush()

    def load_all(self) -> tuple[list[GradeRecord], list[str]]:
        """Every readable record, and a note for each one that is not (left out)."""
        records: list[GradeRecord] = []
        bad: list[str] = []
        for p in sorted(self.dir.glob("*.json")):
            try:
                records.append(GradeRecord.model_validate(json.loads(p.read_text())))
            except (OSError, ValueError, ValidationError) as exc:
                bad.append(f"{p.name}: {str(exc)[:200]}")
        return records, bad


def _write_all(batch: list[tuple[Path, str]]) -> None:
    for path, text in batch:
        try:
            write_json_atomic(path, text)
        except OSError:  # a full disk, say: the record stays unfinished, which start()
            pass  # finishes from its trial's result.json, as after a kill
