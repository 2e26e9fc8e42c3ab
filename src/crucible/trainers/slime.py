"""slime reward models and an agent-harness sandbox over a running `crucible serve`.

slime (THUDM/slime; it does not install here, so these shapes are checked against its
source at 624b824a) calls a custom reward model named by `--custom-rm-path`:
- `await rm(args, sample, **kwargs)` for one sample (slime/rollout/rm_hub/__init__.py
  `async_rm`), and
- `await rm(args, samples, **kwargs)` for a whole group when `--group-rm` is set
  (`batched_async_rm`, called from slime/rollout/sglang_rollout.py
  `generate_and_rm_group`), which must return one reward per sample;
slime's own contract test checks the first two parameter names, ("args", "sample") and
("args", "samples") (tests/plugin_contracts/test_plugin_path_loading_contracts.py).
A `Sample` (slime/utils/types.py) carries `prompt`, `response`, `label`, `metadata`,
`index`, `group_index`, `status`, `reward` and `remove_sample`; a sample that must not
train is marked `remove_sample = True` with reward 0.0, as slime's own coding agent does
for an infrastructure abort (examples/coding_agent_rl/generate.py `_abort_result`).

So: `unscorable` (or still pending at `wait_s`) returns 0.0 and sets
`sample.remove_sample`; `ok` and `invalid` return the reward. The task comes from
`sample.metadata` (`task_id`/`task_hash` as `crucible dataset export` writes them) or
`sample.label`. Options are read from slime's `args` when present:
`crucible_submission` (text|files|patch), `crucible_wait_s`, `crucible_salt`,
`crucible_url`, `crucible_token`; URL and token otherwise from CRUCIBLE_SERVE_URL/TOKEN.

    --custom-rm-path crucible.trainers.slime.rm          # or .group_rm with --group-rm

`CrucibleSandbox` is slime's agent sandbox contract (slime/agent/sandbox.py `Sandbox`:
`sandbox_id`, async context manager, `exec(cmd, *, user, env, timeout, check,
idempotent) -> (exit_code, stdout, stderr)`, `write_file(path, content, *, user)`,
`read_file(path, *, user) -> str`) over a crucible session, plus `grade()`.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import TracebackType
from typing import Any

from crucible.records.serve import GradeItem, GradeResult, GradeStatus
from crucible.trainers.client import DEFAULT_WAIT_S, AsyncServiceClient, ServiceError
from crucible.trainers.common import async_client, find_task, grade_async, prepare

ExecResult = tuple[int, str, str]


def _opt(args: Any, name: str, default: Any) -> Any:
    value = getattr(args, f"crucible_{name}", None)
    return default if value is None else value


def _prompt_text(prompt: Any) -> str:
    return prompt if isinstance(prompt, str) else json.dumps(prompt, default=str)[:4000]


def _prepare(args: Any, sample: Any) -> GradeItem | GradeResult:
    task = find_task(getattr(sample, "metadata", None), getattr(sample, "label", None))
    salt = str(_opt(args, "salt", ""))
    meta = {"trainer": "slime", "index": getattr(sample, "index", None)}
    group = getattr(sample, "group_index", None)
    return prepare(task, sample.response or "", _opt(args, "submission", "text"), salt,
                   meta, None if group is None else str(group))  # fmt: skip


def apply(sample: Any, result: GradeResult) -> float:
    """The reward slime stores for this grade; an unscorable one marks the sample
    for removal (slime drops it from training) and counts 0.0."""
    if result.status in (GradeStatus.unscorable, GradeStatus.pending) or result.reward is None:
        sample.remove_sample = True
        return 0.0
    return float(result.reward)


async def _grade(args: Any, samples: list[Any]) -> list[float]:
    client = async_client(_opt(args, "url", None), _opt(args, "token", None))
    prepared = [_prepare(args, s) for s in samples]
    results = await grade_async(client, prepared, float(_opt(args, "wait_s", DEFAULT_WAIT_S)))
    return [apply(s, r) for s, r in zip(samples, results, strict=True)]


async def rm(args: Any, sample: Any, **kwargs: Any) -> float:
    """slime's custom rm for one sample (`--custom-rm-path crucible.trainers.slime.rm`)."""
    return (await _grade(args, [sample]))[0]


async def group_rm(args: Any, samples: list[Any], **kwargs: Any) -> list[float]:
    """slime's group rm (`--group-rm --custom-rm-path crucible.trainers.slime.group_rm`):
    the group in one request, one reward per sample in order."""
    return await _grade(args, list(samples))


class CrucibleSandbox:
    """slime's agent `Sandbox` over a crucible session on `task`.

    Commands run as the sandbox's own user: `user` is part of slime's contract and is
    accepted, but a crucible session has one user (a local sandbox holds no root).
    `grade()` grades the session's sandbox as a trial's is graded after its agent phase.
    """

    def __init__(self, task: str, *, task_hash: str | None = None,
                 client: AsyncServiceClient | None = None,
                 idle_timeout_s: float | None = None) -> None:  # fmt: skip
        self.task, self.task_hash = task, task_hash
        self.idle_timeout_s = idle_timeout_s
        self._client = client
        self.sandbox_id = ""
        self.workdir = ""

    @property
    def client(self) -> AsyncServiceClient:
        if self._client is None:
            self._client = async_client()
        return self._client

    async def __aenter__(self) -> CrucibleSandbox:
        info = await self.client.open_session(self.task, task_hash=self.task_hash,
                                              idle_timeout_s=self.idle_timeout_s)  # fmt: skip
        self.sandbox_id, self.workdir = info.id, info.workdir
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:  # fmt: skip
        if self.sandbox_id:
            await self.client.close_session(self.sandbox_id)

    async def exec(self, cmd: str, *, user: str = "root", env: dict[str, str] | None = None,
                   timeout: int = 120, check: bool = False,
                   idempotent: bool = True) -> ExecResult:  # fmt: skip
        got = await self.client.exec(self.sandbox_id, cmd, timeout_s=float(timeout), env=env)
        if check and got.exit_code != 0:
            raise RuntimeError(f"crucible exec failed (exit={got.exit_code}): {cmd[:120]}\n"
                               f"{got.stderr[:400]}")  # fmt: skip
        return got.exit_code, got.stdout, got.stderr

    async def write_file(self, sandbox_path: str, content: str | bytes | Path, *,
                         user: str = "root") -> None:  # fmt: skip
        data = await asyncio.to_thread(content.read_bytes) if isinstance(content, Path) else content
        await self.client.upload(self.sandbox_id, sandbox_path, data)

    async def read_file(self, sandbox_path: str, *, user: str = "root") -> str:
        """The file's text; "" when it does not exist, as slime's E2B backend answers."""
        try:
            data = await self.client.download(self.sandbox_id, sandbox_path)
        except ServiceError as exc:
            if exc.status == 404:
                return ""
            raise
        return data.decode(errors="replace")

    async def grade(self, grade_id: str | None = None) -> GradeResult:
        return await self.client.grade_session(self.sandbox_id, grade_id)
