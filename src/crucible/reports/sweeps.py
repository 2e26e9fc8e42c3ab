"""What `crucible report` was asked for, as loaded jobs: job refs, and sweeps as their arms."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from crucible.engine.sweep import read_sweep
from crucible.llm.pricing import ModelPrice, ServerPrice
from crucible.reports.load import JobNotFound, LoadedJob, load_job, resolve_job


def load_jobs(
    refs: Sequence[str],
    jobs_dir: Path,
    prices: Mapping[str, ModelPrice] | None = None,
    servers: Mapping[str, ServerPrice] | None = None,
) -> tuple[list[LoadedJob], str | None]:
    """Each ref's job, or a sweep's arms in its order (labelled), and the baseline of
    the first sweep named (None when none was). An arm whose job never started is
    an error: a sweep's table must not quietly lose a row."""
    loaded: list[LoadedJob] = []
    baseline: str | None = None
    for ref in refs:
        sweep = read_sweep(jobs_dir, ref)
        if sweep is None:
            loaded.append(load_job(resolve_job(ref, jobs_dir), prices, servers))
            continue
        baseline = baseline or sweep.baseline
        for arm in sweep.arms:
            jdir = jobs_dir / arm.job_id
            if not (jdir / "job.json").is_file():
                raise JobNotFound(
                    f"sweep {ref!r}: arm {arm.label!r} has no job {arm.job_id!r} in {jobs_dir} "
                    f"(resume it: crucible run --resume {ref})"
                )
            job = load_job(jdir, prices, servers)
            job.label = arm.label
            loaded.append(job)
    return loaded, baseline


def with_baseline_first(jobs: list[LoadedJob], baseline: str | None) -> list[LoadedJob]:
    """The jobs with the baseline first (the report compares every other job with the
    first). `baseline`: an arm label, a job id or a job name; unknown is a JobNotFound."""
    if baseline is None:
        return jobs
    for i, job in enumerate(jobs):
        names = {job.label, job.job_id, job.config.name if job.config else None}
        if baseline in names:
            return [job, *jobs[:i], *jobs[i + 1 :]]
    known = ", ".join(j.label or j.job_id for j in jobs)
    raise JobNotFound(f"baseline {baseline!r} is none of the jobs reported: {known}")
