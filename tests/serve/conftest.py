"""The grading service on loopback, for real: uvicorn on 127.0.0.1 (a free port), the
local (bubblewrap) provider, and tasks written into the test's tmp_path. `serving(...)`
starts one in the test's event loop and yields a tests/helpers/serving.py `Served`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.helpers.serving import Served, Serving, count_creates

from crucible.engine.request import RunRequest
from crucible.serve.server import ServeOptions, running_service


@pytest.fixture
def serving(tmp_path: Path) -> Serving:
    @asynccontextmanager
    async def start(
        tasks: list[Path], *, job: str = "svc", concurrency: int = 4, max_retries: int = 0,
        trial_timeout: float | None = None,
        **opts: Any,
    ) -> AsyncIterator[Served]:  # fmt: skip
        req = RunRequest(paths=tasks, env="local", jobs_dir=tmp_path / "jobs", job_name=job,
                         concurrency=concurrency, max_retries=max_retries,
                         trial_timeout=trial_timeout)  # fmt: skip
        async with running_service(req, ServeOptions(port=0, **opts)) as r:
            r.service.options.retry_base_sec = 0.01  # the backoff is not what is tested
            served = Served(r.url, r.token, r.service, httpx.AsyncClient(
                base_url=r.url, headers={"Authorization": f"Bearer {r.token}"},
                timeout=httpx.Timeout(30.0, read=None)), r)  # fmt: skip
            count_creates(r.service, served.creates)
            try:
                yield served
            finally:
                await served.http.aclose()

    return start
