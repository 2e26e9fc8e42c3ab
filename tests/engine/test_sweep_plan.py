"""Planning a sweep: the arms an agent x model matrix and a sweep file make, and the
mistakes that must be refused before any sandbox starts."""

from __future__ import annotations

import pytest

from crucible.engine.request import RunRequest
from crucible.engine.sweep import SweepError, arm_request, plan_arms, read_sweep, record_sweep
from crucible.errors import UnknownKey
from crucible.records.sweep import SweepArm, SweepRecord


def test_command_line_agents_cross_models() -> None:
    arms, baseline = plan_arms(["terminal", "command"], ["m1", "m2"])
    assert [a.label for a in arms] == ["terminal/m1", "terminal/m2", "command/m1", "command/m2"]
    assert [a.model for a in arms] == ["m1", "m2", "m1", "m2"]
    assert baseline is None


def test_sweep_file_tables_carry_their_options() -> None:
    arms, baseline = plan_arms(
        [],
        [],
        {
            "baseline": "text/b",
            "agents": [
                "terminal",
                {"label": "text", "agent": "terminal", "agent_kwargs": {"tool_mode": "text"}},
            ],
            "models": ["a", {"name": "b", "model_base_url": "http://127.0.0.1:9/v1"}],
            "arm": [{"agent": "oracle"}],
        },
    )
    by = {a.label: a for a in arms}
    assert list(by) == ["terminal/a", "terminal/b", "text/a", "text/b", "oracle"]
    assert by["text/b"].agent_kwargs == {
        "tool_mode": "text",
        "model_base_url": "http://127.0.0.1:9/v1",
    }
    assert by["oracle"].model is None and baseline == "text/b"


@pytest.mark.parametrize(
    ("file", "error", "words"),
    [
        ({"agentz": ["x"]}, UnknownKey, "sweep file key 'agentz'"),
        ({"agents": [{"label": "x"}]}, SweepError, "table with `agent`"),
        (
            {"agents": ["terminal"], "models": [{"name": "m", "temprature": 1}]},
            UnknownKey,
            "temprature",
        ),
        ({"agents": ["a", {"agent": "b", "label": "a"}]}, SweepError, "share the label"),
        ({"agents": ["a"], "baseline": "zzz"}, SweepError, "baseline 'zzz' is not an arm"),
        ({"arm": [{"model": "m"}]}, SweepError, "needs an `agent`"),
    ],
)
def test_bad_sweeps_are_refused(file: dict, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=words.replace("(", r"\(").replace("[", r"\[")):
        plan_arms([], [], file)


def test_arm_request_keeps_the_sweeps_options_under_the_arms() -> None:
    base = RunRequest(agent_kwargs={"max_turns": 5, "model": "x"}, concurrency=3)
    arm = SweepArm(label="t/m", agent="terminal", model="m", agent_kwargs={"tool_mode": "text"})
    req = arm_request(base, arm, "s.t-m")
    assert req.agent == "terminal" and req.job_name == "s.t-m" and req.concurrency == 3
    assert req.agent_kwargs == {"max_turns": 5, "model": "m", "tool_mode": "text"}


def test_sweep_record_round_trip_and_hostile_ids(tmp_path) -> None:
    rec = SweepRecord(
        sweep_id="s",
        concurrency=2,
        baseline="a",
        arms=[SweepArm(label="a", agent="nop", job_id="s.a")],
    )
    record_sweep(tmp_path, rec)
    assert read_sweep(tmp_path, "s") == rec
    # a sweep id is a plain name: no path out of the sweeps folder, no link followed
    for ref in ("../s", "/etc/passwd", ".hidden", ""):
        assert read_sweep(tmp_path, ref) is None
    (tmp_path / ".sweeps" / "l.json").symlink_to(tmp_path / ".sweeps" / "s.json")
    assert read_sweep(tmp_path, "l") is None


async def test_sibling_jobs_share_one_budget(tmp_path) -> None:
    """Two arms of concurrency 4 each, under a sweep budget of 2: never more than 2
    sandboxes live across both, and every trial of both runs."""
    import asyncio

    from crucible.engine.launch import prepare_launch
    from crucible.engine.sweep import sibling_runners
    from crucible.sandboxes.simulated import SimulatedProvider
    from crucible.tasks.scaffold import scaffold_task

    for i in range(4):
        scaffold_task(f"t{i}", tmp_path / "tasks")
    shared = SimulatedProvider(start_latency=0.02)
    plans = []
    for name, agent in (("a", "oracle"), ("b", "nop")):
        req = RunRequest(paths=[tmp_path / "tasks"], agent=agent, env="simulated",
                         concurrency=4, attempts=2, jobs_dir=tmp_path / "jobs", job_name=name)  # fmt: skip
        plan = await prepare_launch(req)
        plan.provider = shared
        plans.append(plan)
    summaries = await asyncio.gather(*(r.run() for r in sibling_runners(plans, 2)))
    assert [s.n_done for s in summaries] == [8, 8]
    assert shared.created == 16 and shared.peak_live == 2


def test_the_example_sweep_file_plans_four_arms() -> None:
    import tomllib
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "sweep" / "sweep.toml"
    arms, baseline = plan_arms([], [], tomllib.loads(path.read_text()))
    assert [a.label for a in arms] == [
        "tools/solver",
        "tools/quitter",
        "text/solver",
        "text/quitter",
    ]
    assert baseline == "tools/solver"
