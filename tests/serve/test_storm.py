"""The retry storm: trainers' clients retry aggressively (slime 10 times, OpenRLHF 5), so
each of 200 items sent 10 times at once must start exactly 200 sandboxes."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from tests.helpers.serving import Serving, hello_item, write_task

from crucible.serve.store import GRADES_DIR

N_ITEMS = 200
N_SENDS = 10


async def test_200_items_sent_10_times_at_once_start_200_sandboxes(
    tmp_path: Path, serving: Serving
):
    task = write_task(tmp_path / "tasks", "hello")
    async with serving([task], concurrency=8) as s:
        items = [hello_item(f"storm-{i}", "Hello, crucible!\n" if i % 3 else "no\n")
                 for i in range(N_ITEMS)]  # fmt: skip
        rng = random.Random(26)
        sends = []
        for _ in range(N_SENDS):  # each send: every item, in its own order, in 4 requests
            order = rng.sample(items, len(items))
            sends += [order[k::4] for k in range(4)]
        got = await asyncio.gather(*(s.grade(*batch, wait_s=600) for batch in sends))
        assert all(r.status_code == 200 for r in got), [r.text for r in got if r.status_code != 200]
        by_id: dict[str, list[dict]] = {}
        for batch, resp in zip(sends, got, strict=True):
            results = resp.json()["results"]
            assert [r["id"] for r in results] == [i["id"] for i in batch]  # input order
            for r in results:
                by_id.setdefault(r["id"], []).append(r)
        assert len(by_id) == N_ITEMS
        for i in range(N_ITEMS):
            answers = by_id[f"storm-{i}"]
            assert len(answers) == N_SENDS
            assert {(a["status"], a["reward"], a["trial"]) for a in answers} == {
                ("ok", 0.0 if i % 3 == 0 else 1.0, answers[0]["trial"])
            }
            assert sum(not a["cached"] for a in answers) == 1  # one started it; the rest waited
        assert len(s.creates) == N_ITEMS
        job_dir = s.service.job_dir
        assert len(list(job_dir.glob("grade__*/result.json"))) == N_ITEMS
        assert len(list((job_dir / GRADES_DIR).glob("*.json"))) == N_ITEMS
        assert s.service.metrics.trials_started == N_ITEMS
        assert s.service.metrics.sandboxes_started == N_ITEMS
