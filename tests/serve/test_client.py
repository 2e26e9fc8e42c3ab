"""trainers/client.py against the real service: the paths and shapes the adapters use."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.helpers.serving import Serving, hello_item, write_task

from crucible.records.serve import GradeStatus
from crucible.trainers.client import AsyncServiceClient, ServiceClient, ServiceError


async def test_the_clients_grade_poll_and_see_refusals(tmp_path: Path, serving: Serving):
    async with serving([write_task(tmp_path / "tasks", "hello")]) as s:
        async with AsyncServiceClient(s.url, s.token) as client:
            results = await client.grade([hello_item("a1"), hello_item("a0", "no\n")])
            assert [(r.status, r.reward) for r in results] == [
                (GradeStatus.ok, 1.0), (GradeStatus.ok, 0.0)]  # fmt: skip
            with pytest.raises(ServiceError) as err:
                await client.grade([hello_item("a1", "changed\n")])
            assert err.value.status == 409

        def blocking() -> tuple[dict, list]:
            with ServiceClient(s.url, s.token) as c:
                return c.health(), c.grade([hello_item("a1"), hello_item("b1")])

        health, results = await asyncio.to_thread(blocking)
        assert health["status"] == "ok"
        assert [(r.id, r.cached, r.reward) for r in results] == [
            ("a1", True, 1.0), ("b1", False, 1.0)]  # fmt: skip

        def wrong_token() -> None:
            with ServiceClient(s.url, "w" * 43) as c:
                c.grade([hello_item("x")])

        with pytest.raises(ServiceError) as err:
            await asyncio.to_thread(wrong_token)
        assert err.value.status == 401
