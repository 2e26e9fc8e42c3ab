"""slime's custom rm and group rm (crucible.trainers.slime) against a real `crucible serve`.

slime does not install here. It is called the way slime calls it, from its source at
624b824a: `--custom-rm-path` is loaded by dotted path (slime.utils.misc.load_function:
import the module, take the attribute) and awaited as `rm(args, sample)` by
slime/rollout/rm_hub/__init__.py `async_rm`, or `rm(args, samples)` by
`batched_async_rm` under `--group-rm`. `SlimeSample` holds the fields of
slime/utils/types.py `Sample` that a reward model reads or writes.
"""

from __future__ import annotations

import importlib
import inspect
from argparse import Namespace
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.session_server import session_server
from tests.trainers.conftest import HELLO, RIGHT, RIGHT_FILES, WRONG_FILES, Service

from crucible.tasks.loader import load_task
from crucible.trainers import slime as adapter
from crucible.trainers.client import AsyncServiceClient, ServiceError


@dataclass
class SlimeSample:
    """slime/utils/types.py `Sample`: the fields a reward model sees and sets."""

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"

    group_index: int | None = None
    index: int | None = None
    prompt: str | list[dict[str, str]] = ""
    response: str = ""
    label: str | None = None
    reward: float | dict[str, Any] | None = None
    remove_sample: bool = False
    status: Status = Status.COMPLETED
    metadata: dict[str, Any] = field(default_factory=dict)


def load_function(path: str) -> Any:
    """slime.utils.misc.load_function: `module.attr` by import."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _args(**kw: Any) -> Namespace:
    base: dict[str, Any] = {"custom_rm_path": None, "group_rm": False}
    return Namespace(**{**base, "crucible_submission": "files", **kw})


def test_signatures_match_slimes_contract() -> None:
    """slime's tests/plugin_contracts/test_plugin_path_loading_contracts.py checks the
    first two parameter names of a custom rm; both are awaited."""
    rm = load_function("crucible.trainers.slime.rm")
    group = load_function("crucible.trainers.slime.group_rm")
    assert tuple(inspect.signature(rm).parameters)[:2] == ("args", "sample")
    assert tuple(inspect.signature(group).parameters)[:2] == ("args", "samples")
    assert inspect.iscoroutinefunction(rm) and inspect.iscoroutinefunction(group)
    sandbox = set(dir(adapter.CrucibleSandbox))
    assert {"__aenter__", "__aexit__", "exec", "write_file", "read_file"} <= sandbox
    exec_params = inspect.signature(adapter.CrucibleSandbox.exec).parameters
    assert list(exec_params)[1:] == ["cmd", "user", "env", "timeout", "check", "idempotent"]


async def test_rm_one_sample(served: Service) -> None:
    rm = load_function("crucible.trainers.slime.rm")
    right = SlimeSample(index=0, response=RIGHT_FILES, metadata={"task_id": "hello-file"})
    assert await rm(_args(), right) == 1.0
    assert right.remove_sample is False
    wrong = SlimeSample(index=1, response=WRONG_FILES, label="hello-file")
    assert await rm(_args(), wrong) == 0.0
    assert wrong.remove_sample is False


async def test_unscorable_marks_the_sample_for_removal(served: Service) -> None:
    rm = load_function("crucible.trainers.slime.rm")
    sample = SlimeSample(index=2, response=RIGHT_FILES, label="broken-build")
    assert await rm(_args(), sample) == 0.0
    assert sample.remove_sample is True


async def test_invalid_submission_counts_zero_and_trains(served: Service) -> None:
    rm = load_function("crucible.trainers.slime.rm")
    sample = SlimeSample(index=3, response="no files here", label="hello-file")
    assert await rm(_args(), sample) == 0.0
    assert sample.remove_sample is False  # the policy's fault: it trains on the 0


async def test_group_rm_in_order(served: Service) -> None:
    group_rm = load_function("crucible.trainers.slime.group_rm")
    meta = {"crucible": {"task_id": "hello-file"}}
    group = [
        SlimeSample(group_index=7, index=10, response=WRONG_FILES, metadata=meta),
        SlimeSample(group_index=7, index=11, response=RIGHT_FILES, metadata=meta),
        SlimeSample(group_index=7, index=12, response=RIGHT_FILES, label="broken-build"),
    ]
    rewards = await group_rm(_args(group_rm=True), group)
    assert rewards == [0.0, 1.0, 0.0]
    assert [s.remove_sample for s in group] == [False, False, True]
    # the same group again (a retried rollout) starts no sandbox
    assert await group_rm(_args(group_rm=True), group) == rewards
    again = served.trials()
    await group_rm(_args(group_rm=True), group)
    assert served.trials() == again


# -- the agent harness's sandbox, over a session -----------------------------------------
async def test_sandbox_contract_over_a_session(tmp_path: Path) -> None:
    """What slime's agent harness does with a Sandbox (slime/agent/sandbox.py): enter,
    exec, write_file, read_file, exit; plus crucible's grade of what it left."""
    with session_server(tmp_path, [load_task(HELLO)]) as srv:
        client = AsyncServiceClient(srv.url, srv.token)
        async with adapter.CrucibleSandbox("hello-file", client=client) as sb:
            assert sb.sandbox_id and sb.workdir == "/app"
            assert await sb.exec("echo hi; echo err >&2", timeout=30) == (0, "hi\n", "err\n")
            code, _, _ = await sb.exec("exit 3")
            assert code == 3
            with pytest.raises(RuntimeError, match="exit=3"):
                await sb.exec("exit 3", check=True)
            await sb.write_file("/app/hello.txt", RIGHT)
            assert await sb.read_file("/app/hello.txt") == RIGHT
            src = tmp_path / "from-host.txt"
            src.write_bytes(b"\x00bytes")
            await sb.write_file("/app/host.bin", src)
            assert await sb.exec("wc -c < /app/host.bin") == (0, "6\n", "")
            assert await sb.read_file("/app/missing.txt") == ""
            graded = await sb.grade()
            assert graded.status.value == "ok" and graded.reward == 1.0
            opened = sb.sandbox_id
        with pytest.raises(ServiceError) as gone:  # closed on exit
            await client.exec(opened, "true")
        assert gone.value.status == 404
        await client.aclose()
