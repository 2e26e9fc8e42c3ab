"""Sandbox checks of a generated task, under the untrusted-task rules.

Every run goes through the engine's launch path (engine/launch.py), as
`crucible run` does, with `tampered="zero"`, no host variable allowed
(`task_env=[]`) and no network in any phase (`no_network`, whatever the task.toml
asks); builds are the provider's isolated builds. Each check is a
job of its own, named, in the proposal's jobs folder, so that a resumed
generation resumes it rather than running it again:
  oracle  (3 attempts)  every one scores 1.0, with the same reward keys;
  nop     (1)           scores below the band (0 when the band starts at 0);
  fail-<name> (1 each)  the failure case run as the solution, below 1.0;
and the oracle's verifier finishes within the task's verifier budget.
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crucible.engine.launch import prepare_launch
from crucible.engine.request import RunRequest
from crucible.generate.checks import Rejection
from crucible.generate.files import FAILURES_DIR
from crucible.records.trial import TrialResult
from crucible.store.layout import iter_trial_results

ORACLE_RUNS = 3


@dataclass(frozen=True)
class Where:
    """Where a generation run's checks run: the provider, and the executor that places
    their trials (engine/executor.py: this machine, or the nodes of a Ray cluster)."""

    env: str = "local"
    executor: str = "local"
    ray_address: str | None = None
    shared_store: str | None = None


async def run_job(
    paths: list[Path],
    jobs_dir: Path,
    name: str,
    agent: str,
    attempts: int,
    *,
    where: Where = Where(),
    agent_kwargs: dict[str, Any] | None = None,
    concurrency: int | None = None,
) -> list[TrialResult]:
    """One job as `crucible run` would run it (resumed when it exists), its trials' records."""
    req = RunRequest(
        paths=paths,
        agent=agent,
        attempts=attempts,
        jobs_dir=jobs_dir,
        job_name=name,
        env=where.env,
        executor=where.executor,
        ray_address=where.ray_address,
        shared_store=where.shared_store,
        tampered="zero",
        task_env=[],
        no_network=True,  # whatever the model's task.toml asks
        agent_kwargs=agent_kwargs or {},
        concurrency=concurrency,
        max_retries=1,
    )
    plan = await prepare_launch(req)
    try:
        await plan.runner().run()
    finally:
        await plan.provider.aclose()
    return sorted(iter_trial_results(jobs_dir / name), key=lambda r: r.attempt)


def failure_variant(task_dir: Path, name: str, dest: Path) -> Path:
    """A copy of the task whose reference solution is the failure case `name`."""
    if dest.exists():
        return dest
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(task_dir, tmp, symlinks=True)
    script = (tmp / FAILURES_DIR / f"{name}.sh").read_bytes()
    shutil.rmtree(tmp / FAILURES_DIR)
    (tmp / "solution" / "solve.sh").write_bytes(script)
    tmp.rename(dest)
    return dest


def _graded_score(r: TrialResult) -> float | None:
    """Its reward, 0 when its grading failed, None for an infrastructure error."""
    return r.counted_reward


async def prove(
    task_dir: Path, work: Path, failures: list[str], band_lo: float, where: Where = Where()
) -> Rejection | None:
    """The sandbox checks; None when the task is proven."""
    jobs = work / "jobs"
    variants = [failure_variant(task_dir, f, work / "variants" / f) for f in failures]
    oracle, nop, *fails = await asyncio.gather(
        run_job([task_dir], jobs, "oracle", "oracle", ORACLE_RUNS, where=where),
        run_job([task_dir], jobs, "nop", "nop", 1, where=where),
        *(
            run_job([v], jobs, f"fail-{f}", "oracle", 1, where=where)
            for f, v in zip(failures, variants, strict=True)
        ),
    )
    scores = [_graded_score(r) for r in oracle]
    if len(oracle) < ORACLE_RUNS or any(s != 1.0 for s in scores):
        why = [f"{r.outcome} {r.reward}" + (f" ({r.error.message[:200]})" if r.error else "")
               for r in oracle]  # fmt: skip
        return Rejection(reason="failing_oracle", message=f"oracle runs: {why}")
    keys = {tuple(sorted((r.verifier_result.rewards or {}) if r.verifier_result else {}))
            for r in oracle}  # fmt: skip
    if len(keys) != 1:
        return Rejection(reason="failing_oracle", message=f"reward keys differ: {sorted(keys)}")
    budget = _verifier_budget(task_dir)
    for r in oracle:
        t = r.verifier
        if t and t.started_at and t.finished_at and budget is not None:
            took = (t.finished_at - t.started_at).total_seconds()
            if took > budget:
                return Rejection(
                    reason="verifier_over_budget",
                    message=f"verifier took {took:.1f}s of {budget:g}s",
                )
    nop_score = _graded_score(nop[0]) if nop else None
    if nop_score is None:
        return Rejection(
            reason="sandbox_error", message=f"nop: {nop[0].outcome if nop else 'none'}"
        )
    if nop_score >= band_lo and nop_score > 0.0:
        return Rejection(reason="passing_nop", message=f"nop scores {nop_score:g}")
    for f, runs in zip(failures, fails, strict=True):
        s = _graded_score(runs[0]) if runs else None
        if s is None:
            return Rejection(reason="sandbox_error", message=f"failure case {f}: no grade")
        if s >= 1.0:
            return Rejection(reason="passing_failure", message=f"failure case {f} scores {s:g}")
    return None


def _verifier_budget(task_dir: Path) -> float | None:
    from crucible.tasks.loader import load_task

    try:
        return float(load_task(task_dir).config.verifier.timeout_sec)
    except Exception:
        return None
