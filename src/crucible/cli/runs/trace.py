"""`crucible runs trace`: export a job's traces (instruction, agent and verifier output, rewards)."""

from __future__ import annotations

from pathlib import Path

import typer

from crucible.cli.common import JsonOpt, console, fail, print_json
from crucible.cli.runs.common import (
    JobIdArg,
    JobsDirOpt,
    command,
    open_jobs_dir,
    resolve,
)
from crucible.errors import ExitCode


@command("trace")
def trace_cmd(
    job_id: str = JobIdArg,
    out: Path = typer.Option(..., "--out", "-o", help="Folder to export into."),
    jobs_dir: Path | None = JobsDirOpt,
    trial: list[str] = typer.Option(
        [], "--trial", "-t", help="Only this trial (name or prefix; repeatable)."
    ),
    task: list[str] = typer.Option(
        [], "--task", help="Only trials of this task (name or glob; repeatable)."
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Say what would be written, and its size; write nothing."
    ),
    yes: bool = typer.Option(
        False, "--yes", "-y", help="Write into a non-empty --out folder (files are overwritten)."
    ),
    fmt: str = typer.Option(
        "files",
        "--format",
        help="files: the trial's records and logs as stored; atif: only each trial's ATIF v1.8 "
        "trajectory, at TRIAL/agent/trajectory.json (Harbor's layout), converted where needed.",
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Export, per finished trial: instruction, agent output (trajectory), verifier output, rewards.

    A training run: its sampled responses with their rewards, one file per step.

    Writes OUT/manifest.json (trials, files, sizes, sha256) beside one folder per
    trial. With --format atif each trial folder holds its ATIF trajectory only. Symbolic links under agent/ and verifier/ are listed as skipped, never
    followed. Refuses a non-empty OUT without --yes; nothing is deleted there.
    """
    from crucible.export.trace import (
        NothingSelected,
        atif_documents,
        out_is_nonempty,
        plan_atif,
        plan_trace,
        write_atif_trace,
        write_trace,
    )

    if fmt not in ("files", "atif"):
        fail(
            ExitCode.USAGE, "usage", f"--format must be files or atif, not {fmt!r}", as_json=as_json
        )

    with open_jobs_dir(jobs_dir, as_json) as jd:
        rec = resolve(jd, job_id, as_json)
        cfg = jd.config(rec)
    if rec.kind == "train" and rec.path.is_dir():
        from crucible.cli.runs.train_trace import trace_train

        trace_train(rec, out, dry_run=dry_run, yes=yes, as_json=as_json)
        return
    if not rec.path.is_dir():
        fail(
            ExitCode.NOT_FOUND,
            "not_found",
            f"the folder of job {rec.job_id} ({rec.path}) is gone",
            as_json=as_json,
        )
    try:
        manifest, plan = plan_trace(
            rec.path,
            rec.job_id,
            cfg,
            out,
            trials=trial or None,
            tasks=task or None,
            dry_run=dry_run,
        )
    except NothingSelected as exc:
        fail(
            ExitCode.NOT_FOUND,
            "not_found",
            f"{exc} in job {rec.job_id}",
            hint=f"`crucible runs get {rec.job_id} --verbose` lists its trials",
            as_json=as_json,
        )
    docs: dict[str, str] = {}
    if fmt == "atif":
        docs = atif_documents(rec.path, manifest)
        manifest = plan_atif(manifest, docs)
    nonempty = out_is_nonempty(out)
    if dry_run:
        data = manifest.model_dump(mode="json")
        data["out_nonempty"] = nonempty
        data["would_refuse"] = nonempty and not yes
        if as_json:
            print_json(data)
            return
        console.print(
            f"would write {manifest.n_files} files ({_fmt_bytes(manifest.total_bytes)}) "
            f"for {manifest.n_trials} trials into {out}",
            highlight=False,
        )
        for tt in manifest.trials:
            size = sum(f.size for f in tt.files)
            console.print(
                f"  {tt.trial_name}: {len(tt.files)} files, {_fmt_bytes(size)}", highlight=False
            )
        if nonempty and not yes:
            console.print(f"{out} is not empty: the export would need --yes", style="yellow")
        return
    if nonempty and not yes:
        fail(
            ExitCode.ERROR,
            "exists",
            f"{out} exists and is not empty",
            hint="pass --yes to write into it (files are overwritten), or choose another --out",
            as_json=as_json,
        )
    if out.exists() and not out.is_dir():
        fail(ExitCode.ERROR, "exists", f"{out} is a file, not a folder", as_json=as_json)
    if fmt == "atif":
        manifest = write_atif_trace(manifest, docs, out)
    else:
        manifest = write_trace(manifest, plan, out)
    if as_json:
        print_json(manifest.model_dump(mode="json"))
        return
    console.print(
        f"wrote {manifest.n_files} files ({_fmt_bytes(manifest.total_bytes)}) for "
        f"{manifest.n_trials} trials into {out} (manifest.json lists them)",
        highlight=False,
    )
    skipped = sum(len(t.skipped) for t in manifest.trials)
    if skipped:
        console.print(
            f"{skipped} entries skipped (links or special files): see manifest.json", style="yellow"
        )
    if manifest.n_unfinished_skipped:
        console.print(
            f"{manifest.n_unfinished_skipped} trials still running were not exported", style="dim"
        )


def _fmt_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
