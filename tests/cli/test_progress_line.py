"""The live progress line of `crucible run` (cli/progress.py) on a real job: running,
queued and done counts, the slowest running trial's phase and an ETA; on cancel the bar
stays at the trials that finished, and cancelled trials are counted as cancelled (in the
summary, `runs get` and `report`), never as done or as infrastructure left out."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.helpers.jobs import JobFactory
from tests.helpers.wait import await_until
from typer.testing import CliRunner

from crucible.agents.oracle import OracleAgent
from crucible.cli.main import app
from crucible.cli.progress import LiveProgress
from crucible.engine.job import JobRunner
from crucible.engine.plan import make_job_config
from crucible.sandboxes.simulated import SimulatedProvider
from crucible.tasks.dataset import discover_tasks
from crucible.tasks.scaffold import scaffold_task

cli = CliRunner()


async def test_the_line_counts_running_queued_done_and_names_the_slow_phase(
    tmp_path: Path,
) -> None:
    for i in range(4):
        scaffold_task(f"t{i}", tmp_path / "tasks")
    tasks, invalid = discover_tasks([tmp_path / "tasks"])
    assert not invalid
    cfg = make_job_config(job_id="j", tasks=tasks, agent="oracle", env="simulated",
                          attempts=1, concurrency=2, dataset=[str(tmp_path / "tasks")])  # fmt: skip
    # Every sandbox after the first hangs while it starts: 1 done, 2 stuck in setup, 1 queued.
    runner = JobRunner(cfg, tasks, SimulatedProvider(hang_after=1), OracleAgent(), tmp_path / "j")
    now = [0.0]
    progress = LiveProgress(runner, clock=lambda: now[0])
    completed: list[int] = []
    progress.attach(lambda: completed.append(progress.done))
    job = asyncio.ensure_future(runner.run())

    def settled() -> bool:
        phases = [t.phase for t in runner.live.values()]
        return progress.done == 1 and phases == ["environment_setup"] * 2

    await await_until(settled, "one trial done and two starting")
    stuck = min(runner.live.values(), key=lambda t: t.since)
    now[0] = stuck.since + 95.0
    line = progress.line()
    assert line.startswith("running 2 | queued 1 | done 1 | mean 1.000 | errors 0"), line
    assert f"slowest {stuck.trial_name}: setup 1m35s" in line, line
    assert line.endswith("| ETA " + progress.eta(now[0])) and "ETA -" not in line, line

    runner.cancel()  # Ctrl-C
    summary = await job
    assert progress.done == 1 and completed[-1] == 1  # the bar does not jump to 4/4
    assert progress.line().startswith("running 0 | queued 0 | done 1 | cancelled 3"), (
        progress.line()
    )
    assert (summary.n_done, summary.n_cancelled, summary.n_excluded) == (1, 3, 0)

    got = cli.invoke(app, ["runs", "get", "j", "--jobs-dir", str(tmp_path / "j")])
    assert got.exit_code == 0, got.output
    assert "progress 1/4 (25%), 3 cancelled" in got.output, got.output


def test_report_counts_cancelled_trials_apart(make_job: JobFactory) -> None:
    job = make_job("c", {"t1": [1.0, "cancelled"], "t2": [0.0, "cancelled"]})
    out = cli.invoke(app, ["report", str(job), "-f", "markdown"])
    assert out.exit_code == 0, out.output
    row = next(ln for ln in out.output.splitlines() if ln.startswith("| c "))
    assert "(2 cancelled)" in row and "left out" not in row, row
    data = json.loads(cli.invoke(app, ["report", str(job), "--json", "--errors-as", "zero"]).output)
    overall = data["jobs"][0]["overall"]
    assert overall["n_cancelled"] == 2 and overall["n_excluded"] == 0 and overall["n_errors"] == 0
    assert overall["rewards"]["reward"]["mean"] == 0.5  # a cancelled trial is not a 0
