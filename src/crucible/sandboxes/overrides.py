"""Provider parameters by name that every provider reads the same way (`--env-param`):
`cpu`, `memory`, `timeout` and `env_variables`, over what a task's task.toml asks.

They are the operator's, never a task's: `cpu` (cores) and `memory` (MiB) replace the
task's resources for every sandbox of the run, `env_variables` (`{"K": "v"}` JSON or
`K=v;K2=v2`) adds variables (the task's own win, as in Harbor), and `timeout` is a
sandbox's longest life in seconds: past it the sandbox is ended. Its life runs from the
moment it is ready, so what ran out is the attempt's time (its agent phase and its
grading): once the agent has started, that end counts against the attempt (0), never as
a lost sandbox an agent could reach by stalling (engine/grading/blame.py). The modal
provider reads the same names in its own params (sandboxes/modal/params.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from dataclasses import dataclass, field
from typing import Any

from crucible.sandboxes.base import Sandbox, SandboxSpec

log = logging.getLogger(__name__)

NAMES = ("cpu", "memory", "timeout", "env_variables")
MAX_TIMEOUT = 7 * 24 * 3600
_ENDING: set[asyncio.Future[None]] = set()  # closes under way (a task must be referenced)


def parse_env(raw: str, what: str) -> dict[str, str]:
    """`{"K": "v"}` (JSON) or `K=v;K2=v2`."""
    raw = raw.strip()
    if not raw:
        return {}
    if raw.startswith("{"):
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{what}: invalid JSON: {exc}") from None
        if not isinstance(data, dict) or not all(
            isinstance(v, str | int | float) for v in data.values()
        ):
            raise ValueError(f"{what}: JSON must be an object of strings")
        return {str(k): str(v) for k, v in data.items()}
    out: dict[str, str] = {}
    for item in raw.split(";"):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{what}: expected K=v;K2=v2, got {item!r}")
        out[key.strip()] = value
    return out


def _number(provider: str, key: str, raw: str, conv: type, lo: float, hi: float) -> Any:
    try:
        value = conv(str(raw).strip())
    except ValueError:
        raise ValueError(f"{provider} env-param {key}: not a number: {raw!r}") from None
    if not (lo <= value <= hi):
        raise ValueError(f"{provider} env-param {key}: {value} is outside [{lo}, {hi}]")
    return value


@dataclass
class SpecOverrides:
    cpu: float | None = None
    memory: int | None = None
    timeout: int | None = None
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, provider: str, params: dict[str, str | None]) -> SpecOverrides:
        """From the provider's keyword arguments of these names (None: not given)."""
        o = cls()
        if (raw := params.get("cpu")) is not None:
            o.cpu = _number(provider, "cpu", raw, float, 0.01, 1024)
        if (raw := params.get("memory")) is not None:
            o.memory = _number(provider, "memory", raw, int, 16, 1 << 22)
        if (raw := params.get("timeout")) is not None:
            o.timeout = _number(provider, "timeout", raw, int, 1, MAX_TIMEOUT)
        if (raw := params.get("env_variables")) is not None:
            o.env = parse_env(raw, f"{provider} env-param env_variables")
        return o

    def apply(self, spec: SandboxSpec) -> SandboxSpec:
        update: dict[str, Any] = {}
        if self.cpu is not None:
            update["cpus"] = self.cpu
        if self.memory is not None:
            update["memory_mb"] = self.memory
        if self.env:
            update["env"] = {**self.env, **spec.env}  # the task's own win
        return spec.model_copy(update=update) if update else spec

    def watch(self, sandbox: Sandbox) -> None:
        """End `sandbox` once it has lived `timeout` seconds (no reference is kept)."""
        if self.timeout is None:
            return
        ref = weakref.ref(sandbox)
        seconds = self.timeout

        def expire() -> None:
            box = ref()
            if box is not None:
                log.warning("sandbox reached its timeout (%ss): ending it", seconds)
                box.lifetime_ended = f"it reached its timeout of {seconds}s (--env-param timeout)"
                ending = asyncio.ensure_future(box.close())
                _ENDING.add(ending)
                ending.add_done_callback(_ENDING.discard)

        asyncio.get_running_loop().call_later(seconds, expire)
