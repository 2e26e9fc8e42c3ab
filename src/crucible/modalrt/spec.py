"""What the runtime knows of one remote function: its resources, as the decorator set them.

A Resources value is the key of a container pool (with the class parameters), is
written to the trace, and decides how a worker starts (env, secrets, volumes, GPU).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

DEFAULT_TIMEOUT_S = 300


@dataclass(frozen=True)
class Resources:
    gpu: str | None = None
    cpu: float | None = None
    memory: int | None = None
    ephemeral_disk: int | None = None
    timeout: int = DEFAULT_TIMEOUT_S
    retries: int = 0
    max_containers: int | None = None
    max_inputs: int = 1  # @modal.concurrent
    batched: tuple[int, int] | None = None  # (max_batch_size, wait_ms)
    volumes: tuple[tuple[str, str], ...] = ()  # (mount path, volume name)
    secrets: tuple[str, ...] = ()  # names, for the trace
    env: tuple[tuple[str, str], ...] = ()  # secrets, image env and env=, merged
    schedule: str | None = None
    web: str | None = None  # fastapi | asgi | wsgi | server
    web_method: str | None = None
    web_port: int | None = None
    image: tuple[tuple[str, tuple[str, ...]], ...] = ()
    image_warnings: tuple[str, ...] = field(default=(), compare=False)

    def with_(self, **changes: Any) -> Resources:
        return replace(self, **changes)

    def summary(self) -> dict[str, Any]:
        """What the trace shows of these resources."""
        return {
            "gpu": self.gpu,
            "cpu": self.cpu,
            "memory": self.memory,
            "timeout": self.timeout,
            "retries": self.retries,
            "max_containers": self.max_containers,
            "max_inputs": self.max_inputs,
            "batched": list(self.batched) if self.batched else None,
            "volumes": {path: name for path, name in self.volumes},
            "secrets": list(self.secrets),
            "schedule": self.schedule,
            "web": self.web,
            "image": [{"op": op, "args": list(args)} for op, args in self.image],
            "image_warnings": list(self.image_warnings),
        }

    def to_wire(self) -> dict[str, Any]:
        """As JSON, for the dispatching side (broker.py), which starts the containers."""
        return asdict(self)

    @classmethod
    def from_wire(cls, data: Any) -> Resources:
        """From to_wire's JSON, sent by the program's process: checked field by field
        (ValueError when it is not a Resources)."""
        if not isinstance(data, dict) or set(data) - {f.name for f in fields(cls)}:
            raise ValueError("not a Resources")
        pairs = ("volumes", "env", "image")
        out: dict[str, Any] = {}
        for k, v in data.items():
            if k in pairs:
                v = tuple((str(a), tuple(map(str, b)) if k == "image" else str(b)) for a, b in v)
            elif k in ("secrets", "image_warnings"):
                v = tuple(str(x) for x in v)
            elif k == "batched" and v is not None:
                v = (int(v[0]), int(v[1]))
            elif k in ("timeout", "retries", "max_inputs") or (k == "max_containers" and v):
                v = int(v)
            out[k] = v
        res = cls(**out)
        if res.max_inputs < 1 or (res.gpu is not None and not isinstance(res.gpu, str)):
            raise ValueError("not a Resources")
        return res
