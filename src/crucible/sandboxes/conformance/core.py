"""The conformance suite's machinery: the check registry, the context each check
gets (a provider and spec overrides), and the runner.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from pydantic import BaseModel

from crucible.sandboxes.base import Provider, Sandbox, SandboxSpec


class CheckResult(BaseModel):
    name: str
    passed: bool
    detail: str = ""
    duration_sec: float = 0.0


class CheckFailed(Exception):
    pass


def expect(cond: bool, message: str) -> None:
    if not cond:
        raise CheckFailed(message)


class Ctx:
    def __init__(self, provider: Provider, overrides: dict[str, Any]) -> None:
        self.provider = provider
        self.overrides = overrides

    def spec(self, name: str, **kw: Any) -> SandboxSpec:
        base: dict[str, Any] = {
            "job_id": "conformance",
            "trial_id": name,
            "task_name": "conformance",
            "memory_mb": 512,
            "cpus": 1.0,
            "pids_limit": 256,
        }
        base.update(kw)
        # An image override names the image for checks that take one; a check that builds
        # its own Dockerfile (build_steps_isolated) must get that build, not the override.
        building = kw.get("dockerfile_dir") is not None
        base.update({k: v for k, v in self.overrides.items() if not (building and k == "image")})
        return SandboxSpec(**base)

    @contextlib.asynccontextmanager
    async def sandbox(self, name: str, **kw: Any) -> AsyncIterator[Sandbox]:
        sb = await self.provider.create(self.spec(name, **kw))
        try:
            yield sb
        finally:
            await sb.close()


Check = Callable[[Ctx], Awaitable[str]]
CHECKS: dict[str, Check] = {}


def check(name: str, into: dict[str, Check] = CHECKS) -> Callable[[Check], Check]:
    """Register a check as `name` in `into` (the providers' own suite by default)."""

    def deco(fn: Check) -> Check:
        into[name] = fn
        return fn

    return deco


async def _run_one(name: str, fn: Check, ctx: Ctx) -> CheckResult:
    t0 = time.monotonic()
    try:
        detail = await fn(ctx)
        passed = True
    except CheckFailed as exc:
        detail, passed = str(exc), False
    except Exception as exc:
        detail, passed = f"{type(exc).__name__}: {exc}", False
    return CheckResult(
        name=name, passed=passed, detail=detail, duration_sec=round(time.monotonic() - t0, 3)
    )


async def run_conformance(
    provider: Provider,
    *,
    only: list[str] | None = None,
    spec_overrides: dict[str, Any] | None = None,
    concurrency: int = 4,
    checks: Mapping[str, Check] | None = None,
) -> list[CheckResult]:
    """Run `checks` (the providers' own suite by default; all, or `only` these names)
    against `provider`."""
    suite = CHECKS if checks is None else checks
    names = list(suite) if not only else only
    unknown = [n for n in names if n not in suite]
    if unknown:
        raise KeyError(f"unknown check(s): {', '.join(unknown)}; known: {', '.join(suite)}")
    ctx = Ctx(provider, dict(spec_overrides or {}))
    sem = asyncio.Semaphore(max(1, concurrency))

    async def guarded(name: str) -> CheckResult:
        async with sem:
            return await _run_one(name, suite[name], ctx)

    return list(await asyncio.gather(*(guarded(n) for n in names)))
