"""The generation loop end to end on tiny tasks: local sandboxes, scripted setter and solver."""

from __future__ import annotations

import asyncio
import json
import tomllib
from collections.abc import Callable

from crucible.generate.loop import GenConfig, Generator
from tests.generate.scripted import Solver, propose, task_files
from tests.helpers.fake_openai import FakeOpenAI


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
