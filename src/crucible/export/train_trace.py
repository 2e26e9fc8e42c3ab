"""`crucible runs trace` of a training run: its sampled responses with their rewards, one
JSON Lines file per step, and manifest.json (steps, files, sizes, sha256).

    OUT/manifest.json
    OUT/steps/step-000001.jsonl      SampleRecord lines (prompt, response, reward, components)

The samples are read from the run's samples.jsonl (store/train_runs.py, capped) and written
again as parsed records, so nothing but well-formed records reaches OUT; the folder layout
is crucible's own (no name comes from the run's data).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from pydantic import BaseModel, Field

from crucible.records.train import SampleRecord
from crucible.store.layout import write_json_atomic
from crucible.store.train_runs import read_samples

MANIFEST = "manifest.json"


class TrainTraceFile(BaseModel):
    path: str  # relative to OUT
    step: int
    n_samples: int
    size: int
    sha256: str


class TrainTraceManifest(BaseModel):
    schema_version: int = 1
    run_id: str
    kind: str = "train"
    n_steps: int
    n_samples: int
    n_files: int
    total_bytes: int
    skipped_lines: int  # sample lines of the run that did not parse
    files: list[TrainTraceFile] = Field(default_factory=list)


def _by_step(samples: list[SampleRecord], steps: set[int] | None) -> dict[int, list[SampleRecord]]:
    out: dict[int, list[SampleRecord]] = {}
    for s in samples:
        if steps is None or s.step in steps:
            out.setdefault(s.step, []).append(s)
    return dict(sorted(out.items()))


def _render(records: list[SampleRecord]) -> bytes:
    return "".join(r.model_dump_json() + "\n" for r in records).encode()


def plan_train_trace(folder: Path, run_id: str, *, steps: set[int] | None = None
                     ) -> tuple[TrainTraceManifest, dict[str, bytes]]:  # fmt: skip
    """The manifest and each file's bytes; nothing written."""
    samples, bad = read_samples(folder)
    files: list[TrainTraceFile] = []
    data: dict[str, bytes] = {}
    for step, recs in _by_step(samples, steps).items():
        rel = f"steps/step-{step:06d}.jsonl"
        body = _render(recs)
        data[rel] = body
        files.append(TrainTraceFile(path=rel, step=step, n_samples=len(recs), size=len(body),
                                    sha256=hashlib.sha256(body).hexdigest()))  # fmt: skip
    manifest = TrainTraceManifest(run_id=run_id, n_steps=len(files),
                                  n_samples=sum(f.n_samples for f in files),
                                  n_files=len(files), total_bytes=sum(f.size for f in files),
                                  skipped_lines=bad, files=files)  # fmt: skip
    return manifest, data


def write_train_trace(manifest: TrainTraceManifest, data: dict[str, bytes], out: Path) -> None:
    steps_dir = out / "steps"
    if steps_dir.is_symlink():  # a link planted in OUT is replaced, never written through
        steps_dir.unlink()
    for rel, body in data.items():
        dst = out / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.is_symlink():
            dst.unlink()
        tmp = dst.with_name(f".{dst.name}.tmp")
        tmp.write_bytes(body)
        tmp.replace(dst)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / MANIFEST, manifest.model_dump_json(indent=2))
