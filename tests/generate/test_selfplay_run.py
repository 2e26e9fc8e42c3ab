"""The done-when run: a scripted self-play run of 30 proposals over five categories ends with
every category covered, every accepted task proven with its runs on disk, the report's
figures, and `crucible run` with the oracle scoring 1.0 on every accepted task."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.generate.loop import GenConfig, Generator
from crucible.generate.setter import SetterSpec
from crucible.generate.solver import SolverSpec
from tests.generate.scripted import CATEGORIES, Curriculum
from tests.helpers.fake_openai import FakeOpenAI


@pytest.mark.slow
def test_scripted_selfplay_run_covers_every_category_with_proven_tasks(tmp_path: Path) -> None:
    cur = Curriculum()
    out = tmp_path / "gen"
    with FakeOpenAI([cur] * 100) as setter, FakeOpenAI([cur.solver] * 1000) as solver:
        cfg = GenConfig(
            out=out,
            setter=SetterSpec("gpt-4.1-mini", setter.url, None),
            solver=SolverSpec("terminal", {"model": "gpt-4.1-mini",
                                           "model_base_url": solver.url, "max_retries": 0}),
            categories=list(CATEGORIES), max_tasks=30, max_proposals=30, k=2,
            jobs_dir=tmp_path / "jobs",
        )  # fmt: skip
        state = asyncio.run(Generator(cfg).run())
    assert state.stop_reason == "max_proposals"
    res = CliRunner().invoke(app, ["generate", "report", str(out), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["proposed"] == 30
    assert all(n >= 1 for n in report["coverage"].values()), report["coverage"]
    assert set(report["rejected"]) >= {"leaked_solution", "passing_nop", "passing_failure",
                                       "duplicate", "failing_oracle"}  # fmt: skip
    assert report["hardening"]["add_contract"]["in_band"] >= 1
    assert report["valid"] > report["accepted"] == report["in_band"] > 0
    accepted = [p for p in state.proposals if p.outcome == "accepted"]
    assert len(accepted) == report["accepted"]
    for p in accepted:
        assert lo_hi(p.pass_at_1, state.band)
        jobs = out / "proposals" / p.name / "jobs"
        for job, n in (("oracle", 3), ("nop", 1), ("fail-wrong", 1), ("solve", 2)):
            assert len(list(jobs.glob(f"{job}/*/result.json"))) == n, (p.name, job)
    run = CliRunner().invoke(app, ["run", str(out / "tasks"), "--agent", "oracle", "--env",
                                   "local", "--jobs-dir", str(tmp_path / "oracle"), "--json"])  # fmt: skip
    assert run.exit_code == 0, run.output
    summary = json.loads(run.stdout)
    assert (summary["n_trials"], summary["mean_reward"]) == (len(accepted), 1.0)


def lo_hi(x: float | None, band: tuple[float, float]) -> bool:
    return x is not None and band[0] <= x <= band[1]
