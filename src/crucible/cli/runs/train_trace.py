"""`crucible runs trace` of a training run: sampled responses per step (export/train_trace.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from crucible.cli.common import console, fail, print_json
from crucible.errors import ExitCode

if TYPE_CHECKING:
    from crucible.store.queries import JobRecord


def trace_train(rec: JobRecord, out: Path, *, dry_run: bool, yes: bool, as_json: bool) -> None:
    from crucible.export.trace import out_is_nonempty
    from crucible.export.train_trace import plan_train_trace, write_train_trace

    manifest, data = plan_train_trace(rec.path, rec.job_id)
    if not manifest.n_samples:
        fail(ExitCode.NOT_FOUND, "not_found", f"training run {rec.job_id} has no samples yet",
             hint="samples are recorded per step (TrainConfig.trace_samples)",
             as_json=as_json)  # fmt: skip
    nonempty = out_is_nonempty(out)
    if dry_run:
        shown = manifest.model_dump(mode="json")
        shown.update(out_nonempty=nonempty, would_refuse=nonempty and not yes)
        if as_json:
            print_json(shown)
            return
        console.print(f"would write {manifest.n_files} files ({manifest.total_bytes} bytes) "
                      f"for {manifest.n_samples} samples of {manifest.n_steps} steps into {out}",
                      highlight=False)  # fmt: skip
        if nonempty and not yes:
            console.print(f"{out} is not empty: the export would need --yes", style="yellow")
        return
    if nonempty and not yes:
        fail(ExitCode.ERROR, "exists", f"{out} exists and is not empty",
             hint="pass --yes to write into it (files are overwritten), or choose another --out",
             as_json=as_json)  # fmt: skip
    if out.exists() and not out.is_dir():
        fail(ExitCode.ERROR, "exists", f"{out} is a file, not a folder", as_json=as_json)
    write_train_trace(manifest, data, out)
    if as_json:
        print_json(manifest.model_dump(mode="json"))
        return
    console.print(f"wrote {manifest.n_files} files ({manifest.total_bytes} bytes) for "
                  f"{manifest.n_samples} samples into {out} (manifest.json lists them)",
                  highlight=False)  # fmt: skip
