"""A container outlives the thread that started it: workers are started from the pool's
spawner thread, not from the caller's, since a worker dies with the thread that started it
(PR_SET_PDEATHSIG is per thread). Before, a container started from a thread that had ended
(an executor's, a web request's handler) was killed under its next input: "the container
exited with code -9", about one call in two."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from crucible.modalrt.serve import serve_program
from tests.modalrt.conftest import PROGRAMS


def test_a_container_started_from_an_ended_thread_serves_the_next_inputs(modal_run: Any) -> None:
    run = modal_run("thread_callers.py", "--rounds", "10")
    assert run.code == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == ('{"containers": 1, "calls": 20, "failures": []}')
    assert run.fn("pid")["remote_inputs"] == 20


def test_a_web_endpoint_keeps_its_container_between_requests(
    state: Path, runtime_env: dict[str, str]
) -> None:
    with serve_program(PROGRAMS / "thread_callers.py", state_dir=state, env=runtime_env) as served:
        base = served.urls["web"]
        # one connection a request: each is handled in a thread of its own, which ends
        answers = [httpx.get(base, timeout=60) for _ in range(8)]
    assert [a.status_code for a in answers] == [200] * 8, [a.text for a in answers]
    assert len({a.json()["pid"] for a in answers}) == 1
    assert served.trace is not None
    (web,) = [f for f in served.trace.functions if f.name == "web"]
    assert web.inputs_by_call == {"web": 8}
