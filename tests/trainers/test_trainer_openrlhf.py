"""OpenRLHF's remote reward model: `python -m crucible.trainers.openrlhf` in front of a
real `crucible serve`, posted to as OpenRLHF 0.11 posts.

OpenRLHF does not install here. `post_as_openrlhf` sends what its source at 3c3be62
sends (openrlhf/utils/agent.py `SingleTurnAgentExecutor._fetch_rewards_via_http`):
aiohttp, JSON `{"query", "prompts", "labels"}`, no headers of its own, 180 s timeout,
`raise_for_status`, and reads `rewards`/`scores`/`extra_logs` as `execute` does.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from tests.trainers.conftest import RIGHT, ROOT, WRONG_FILES, Service

from crucible.trainers import openrlhf as adapter
from crucible.webauth.token import new_token, write_token_file

PROMPT = "<|im_start|>user\nWrite the file.<|im_end|>\n<|im_start|>assistant\n"
RIGHT_Q = PROMPT + json.dumps({"/app/hello.txt": RIGHT}) + "<|im_end|>"


async def post_as_openrlhf(url: str, queries: list[str], prompts: list[str],
                           labels: list[Any]) -> dict[str, Any]:  # fmt: skip
    payload = {"query": queries, "prompts": prompts, "labels": labels}
    timeout = aiohttp.ClientTimeout(total=180)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async with session.post(url, json=payload) as response:
            response.raise_for_status()
            got: dict[str, Any] = await response.json()
    return got


async def status_of(url: str, body: Any, headers: dict[str, str] | None = None) -> int:
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json=body, headers=headers) as response:
            return response.status


@pytest.fixture(scope="module")
def proxy(service: Service, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The standalone proxy as a user starts it; yields OpenRLHF's remote_rm_url."""
    root = tmp_path_factory.mktemp("openrlhf")
    token_file = root / "token"
    write_token_file(token_file, new_token())
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "CRUCIBLE_SERVE_TOKEN": service.token}
    cmd = [sys.executable, "-m", "crucible.trainers.openrlhf", "--port", "0",
           "--token-file", str(token_file), "--service-url", service.url,
           "--submission", "files", "--unscorable-value", "-0.5",
           "--max-body-mb", "1"]  # fmt: skip
    with (root / "proxy.log").open("w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("remote_rm_url: "):
            proc.wait()
            pytest.fail(f"the proxy did not start:\n{(root / 'proxy.log').read_text()}")
        yield line.removeprefix("remote_rm_url: ").strip()
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_response_text_cuts_the_prompt_and_eos() -> None:
    assert adapter.response_text(RIGHT_Q, PROMPT) == json.dumps({"/app/hello.txt": RIGHT})
    assert adapter.response_text("abc</s>  ", None) == "abc"


async def test_rewards_in_openrlhfs_shape(service: Service, proxy: str) -> None:
    queries = [RIGHT_Q, PROMPT + WRONG_FILES, RIGHT_Q, PROMPT + "no json"]
    labels = ["hello-file", json.dumps({"task_id": "hello-file"}), "broken-build", "hello-file"]
    got = await post_as_openrlhf(proxy, queries, [PROMPT] * 4, labels)
    assert got["rewards"] == [1.0, 0.0, -0.5, 0.0]  # unscorable: the user's value, never None
    assert got["scores"] == got["rewards"]
    assert got["extra_logs"] == {"crucible_unscorable": [0.0, 0.0, 1.0, 0.0],
                                 "crucible_invalid": [0.0, 0.0, 0.0, 1.0]}  # fmt: skip


async def test_retries_start_no_second_sandbox(service: Service, proxy: str) -> None:
    """OpenRLHF tries 5 times; every try (here all at once) is the same grade."""
    body = ([PROMPT + json.dumps({"/app/hello.txt": "retry\n"})], [PROMPT], ["hello-file"])
    before = set(service.trials())
    answers = await asyncio.gather(*(post_as_openrlhf(proxy, *body) for _ in range(5)))
    assert all(a == answers[0] for a in answers)
    assert len(set(service.trials()) - before) == 1


# -- attack: the endpoint is on loopback, where every local sandbox and user can post ------
async def test_token_is_required(proxy: str) -> None:
    base, _, token = proxy.partition("?token=")
    body = {"query": [RIGHT_Q], "prompts": [PROMPT], "labels": ["hello-file"]}
    assert await status_of(base, body) == 401
    for wrong in (token[:-1], token + "x", token[:-1] + ("A" if token[-1] != "A" else "B"), ""):
        assert await status_of(f"{base}?token={wrong}", body) == 401
    assert await status_of(base, body, {"Authorization": "Bearer nope"}) == 401
    assert await status_of(base, body, {"Authorization": f"Bearer {token}"}) == 200


async def test_malformed_bodies_are_4xx(proxy: str) -> None:
    assert await status_of(proxy, {"query": "not a list"}) == 422
    assert await status_of(proxy, {"query": ["a", "b"], "labels": ["hello-file"]}) == 422
    assert await status_of(proxy, {"query": ["a"], "labels": [None]}) == 422
    assert (
        await status_of(
            proxy, {"query": [RIGHT_Q], "prompts": [PROMPT], "labels": ["no-such-task"]}
        )
        == 404
    )


def test_refuses_a_public_bind_without_insecure() -> None:
    with pytest.raises(SystemExit):
        adapter.main(["--host", "0.0.0.0", "--service-url", "http://127.0.0.1:9"])


async def test_oversized_and_undeclared_bodies_are_refused(service: Service, proxy: str) -> None:
    before = set(service.trials())
    big = {"query": [PROMPT + json.dumps({"/app/hello.txt": "x" * (2 << 20)})],
           "prompts": [PROMPT], "labels": ["hello-file"]}  # fmt: skip
    assert await status_of(proxy, big) == 413

    async def chunks() -> Any:
        yield json.dumps(
            {"query": [RIGHT_Q], "prompts": [PROMPT], "labels": ["hello-file"]}
        ).encode()

    async with aiohttp.ClientSession() as session:  # chunked: no Content-Length
        async with session.post(proxy, data=chunks()) as response:
            assert response.status == 411
    assert set(service.trials()) == before


async def test_reward_func_file_as_openrlhf_loads_it(served: Service) -> None:
    """A remote_rm_url ending in .py: OpenRLHF imports the file by location, takes its
    `reward_func` and runs it in a thread per chunk (agent.py `_fetch_rewards_via_func`)."""
    path = ROOT / "examples" / "trainers" / "openrlhf_reward_func.py"
    spec = importlib.util.spec_from_file_location("reward_func", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    chunks = [([RIGHT_Q], [PROMPT], ["hello-file"]), ([PROMPT + "{}"], [PROMPT], ["hello-file"]),
              ([RIGHT_Q], [PROMPT], ["broken-build"])]  # fmt: skip
    got = await asyncio.gather(*(asyncio.to_thread(module.reward_func, *c) for c in chunks))
    assert [g["rewards"] for g in got] == [[1.0], [0.0], [0.0]]
    assert [g["extra_logs"]["crucible_unscorable"] for g in got] == [[0.0], [0.0], [1.0]]
    assert [g["extra_logs"]["crucible_invalid"] for g in got] == [[0.0], [1.0], [0.0]]
