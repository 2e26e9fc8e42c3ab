"""`crucible serve --executor ray`: grades run on the fake cluster's nodes, and a grade
id is still graded exactly once (the service's idempotency is the head's, unchanged)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
from tests.helpers.serving import hello_item, write_task

from crucible.engine.request import RunRequest
from crucible.serve.server import ServeOptions, running_service


async def test_grades_on_the_cluster_are_idempotent(ray_cluster: Any, tmp_path: Path) -> None:
    task = write_task(tmp_path / "tasks", "hello")
    req = RunRequest(paths=[task], env="local", jobs_dir=tmp_path / "jobs", job_name="svc-ray",
                     concurrency=4, max_retries=0, executor="ray",
                     ray_address=ray_cluster.address)  # fmt: skip
    async with running_service(req, ServeOptions(port=0)) as r:
        headers = {"Authorization": f"Bearer {r.token}"}
        async with httpx.AsyncClient(base_url=r.url, headers=headers, timeout=120) as http:

            async def grade(*items: dict[str, Any]) -> list[dict[str, Any]]:
                got = await http.post("/v1/grade", json={"items": list(items), "wait_s": 120})
                return list(got.json()["results"])

            first = (await grade(hello_item("g1")))[0]
            again = (await grade(hello_item("g1")))[0]
            both = await asyncio.gather(grade(hello_item("g2")), grade(hello_item("g2")))
            dup = await grade(hello_item("g3"), hello_item("g3"))
    assert (first["reward"], again["reward"]) == (1.0, 1.0)
    assert (first["cached"], again["cached"]) == (False, True)
    assert sorted(b[0]["cached"] for b in both) == [False, True]  # in flight: one grade
    assert [d["cached"] for d in dup] == [False, True]
    trials = sorted((tmp_path / "jobs" / "svc-ray").glob("*/result.json"))
    assert len(trials) == 3  # g1, g2, g3: one trial each, however often asked
    nodes = {json.loads(t.read_text())["node"] for t in trials}
    assert None not in nodes  # each ran on a node of the cluster, which it names
