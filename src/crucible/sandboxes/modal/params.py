"""The modal provider's parameters (`--env-param key=value`, all strings) and
the translation of a SandboxSpec into Sandbox.create's terms: resources, the
GPU string, network allowlists, tags, and an env with Modal credentials
scrubbed out.

What Modal does with them (issue 18, defects 3, 6, 7, 10):
- `cpu` counts physical cores, one core being two vCPUs
  (https://modal.com/docs/guide/sandbox-resources), and a plain `memory` is
  a reservation with no limit (modal/_resources.py:33-36); so a task's cpus
  become cores = cpus / 2 and both go as (request, limit) pairs, which Modal
  enforces (modal/sandbox/_sandbox.py:240-248).
- a sandbox lives until its `timeout` (5 minutes if unset; at most 24 hours:
  https://modal.com/docs/guide/sandbox#timeouts). A SandboxSpec carries no
  time budget for the trial, so the default is the most Modal allows; every
  sandbox is terminated when its trial ends, and `crucible sandboxes cleanup`
  ends those a killed run left.
- env names must match [A-Za-z_][A-Za-z0-9_]* (modal/sandbox/_common.py:115-126);
  others are set per exec through `env` instead (see sandbox.py).
- tag rules are not documented: values are reduced to a conservative set
  (letters, digits, '.', '_', '-'; at most 63 characters), with a digest
  suffix whenever that changed them, so distinct names stay distinct.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from crucible.errors import ResourcesUnavailable, UnknownKey
from crucible.sandboxes.base import SandboxSpec
from crucible.sandboxes.overrides import parse_env

log = logging.getLogger(__name__)

KNOWN_GPU_TYPES = (
    "T4",
    "L4",
    "A10G",
    "A100",
    "A100-40GB",
    "A100-80GB",
    "L40S",
    "H100",
    "H100!",
    "H200",
    "B200",
)
MAX_GPUS = 8
SANDBOX_MAX_TIMEOUT = 24 * 3600
VCPUS_PER_CORE = 2
MIN_CORES = 0.125  # Modal's smallest request (https://modal.com/docs/guide/resources)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TAG_BAD = re.compile(r"[^A-Za-z0-9._-]+")
TAG_MAX = 63
_RESERVED_ENV_PREFIX = "MODAL_TOKEN"
TAG_JOB = "crucible.job"
TAG_TRIAL = "crucible.trial"
TAG_TASK = "crucible.task"
TAG_MANAGED = "crucible.managed"


def _parse_env(raw: str) -> dict[str, str]:
    return parse_env(raw, "modal env-param env")


# The names users of other harnesses know (AgentCompass's modal recipe), read as ours.
ALIASES = {"environment_name": "environment", "env_variables": "env"}


@dataclass
class ModalParams:
    app_name: str = "crucible"
    environment: str | None = None
    image: str | None = None  # a registry image for every trial
    named_image: str | None = None  # an image published on Modal by name, for every trial
    timeout: int = SANDBOX_MAX_TIMEOUT  # a sandbox's maximum lifetime, seconds
    idle_timeout: int | None = None
    cpu: float | None = None  # physical cores (= 2 vCPUs each); overrides spec.cpus
    memory: int | None = None  # MiB; overrides spec.memory_mb
    gpu: str | None = None  # overrides spec.gpus/gpu_types, e.g. "A100:2"
    region: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    create_rate: float = 5.0  # sandbox creations per second, never exceeded
    max_starting: int = 32  # creations in flight at once
    create_attempts: int = 6
    config: str | None = None  # a private TOML file holding token_id / token_secret

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return (*cls.__dataclass_fields__, *ALIASES)

    @classmethod
    def parse(cls, params: dict[str, str]) -> ModalParams:
        p = cls()
        for key in params:
            if key not in cls.__dataclass_fields__ and key not in ALIASES:
                raise UnknownKey("modal env-param", key, cls.names())
        for alias, name in ALIASES.items():
            if alias in params and name in params:
                raise ValueError(f"modal env-param: give {alias} or {name}, not both")
        params = {ALIASES.get(k, k): v for k, v in params.items()}
        if params.get("image") and params.get("named_image"):
            raise ValueError("modal env-param: give image or named_image, not both")

        def num(key: str, conv: Callable[[str], Any], lo: float, hi: float = math.inf) -> Any:
            raw = str(params[key]).strip()
            try:
                value = conv(raw)
            except ValueError:
                raise ValueError(f"modal env-param {key}: not a number: {raw!r}") from None
            if not (lo <= value <= hi):
                raise ValueError(f"modal env-param {key}: {value} is outside [{lo}, {hi}]")
            return value

        for key, raw in params.items():
            raw = str(raw)
            if key == "app_name":
                if not raw.strip():
                    raise ValueError("modal env-param app_name must not be empty")
                p.app_name = raw.strip()
            elif key in ("environment", "image", "named_image", "config"):
                setattr(p, key, raw.strip() or None)
            elif key == "gpu":
                p.gpu = raw.strip().upper() or None
            elif key == "timeout":
                p.timeout = num(key, int, 1, SANDBOX_MAX_TIMEOUT)
            elif key == "idle_timeout":
                p.idle_timeout = num(key, int, 1, SANDBOX_MAX_TIMEOUT)
            elif key == "cpu":
                p.cpu = num(key, float, 0.125, 64)
            elif key == "memory":
                p.memory = num(key, int, 128, 1 << 20)
            elif key == "region":
                regions = [r.strip() for r in raw.split(",") if r.strip()]
                p.region = regions or None
            elif key == "env":
                p.env = _parse_env(raw)
            elif key == "create_rate":
                p.create_rate = num(key, float, 0.01, 10_000)
            elif key == "max_starting":
                p.max_starting = num(key, int, 1, 100_000)
            elif key == "create_attempts":
                p.create_attempts = num(key, int, 1, 100)
        return p


def gpu_request(spec: SandboxSpec, override: str | None) -> str | None:
    """Modal's gpu string ("H100:1", "ANY:2") for a spec, or None for no GPU."""
    if override:
        return override
    if spec.gpus <= 0:
        return None
    if spec.gpus > MAX_GPUS:
        raise ResourcesUnavailable(
            f"task asks for {spec.gpus} GPUs; a Modal sandbox has at most {MAX_GPUS}"
        )
    types = [t.strip().upper() for t in (spec.gpu_types or []) if t.strip()]
    # Sandbox.create takes one GPU type, not a fallback list: the first listed wins.
    gpu_type = types[0] if types else "ANY"
    return f"{gpu_type}:{spec.gpus}"


def network_kwargs(spec: SandboxSpec) -> dict[str, Any]:
    """block_network, or outbound allowlists split into CIDRs and domains."""
    if spec.network == "public":
        return {}
    if spec.network == "none" or not spec.allowed_hosts:
        return {"block_network": True}
    cidrs: list[str] = []
    domains: list[str] = []
    for host in spec.allowed_hosts:
        host = host.strip()
        try:
            cidrs.append(str(ipaddress.ip_network(host, strict=False)))
        except ValueError:
            domains.append(host)
    return {"outbound_cidr_allowlist": cidrs, "outbound_domain_allowlist": domains}


def tag_value(raw: str) -> str:
    """A tag value every plausible rule accepts; stable, and distinct for distinct inputs."""
    clean = _TAG_BAD.sub("-", raw).strip("-.") or "x"
    if clean == raw and len(raw) <= TAG_MAX:
        return raw
    digest = hashlib.sha256(raw.encode()).hexdigest()[:10]
    return f"{clean[: TAG_MAX - 11]}-{digest}"


def job_tags(job_id: str) -> dict[str, str]:
    """The tags that select one job's sandboxes (cleanup)."""
    return {TAG_JOB: tag_value(job_id)}


def split_env(env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(names Modal accepts, names it refuses); the second are set per exec via `env`."""
    ok = {k: v for k, v in env.items() if ENV_NAME.match(k)}
    return ok, {k: v for k, v in env.items() if k not in ok}


def resources(spec: SandboxSpec, p: ModalParams) -> dict[str, Any]:
    """cpu and memory as (request, limit): the task's numbers are caps, as on local and docker."""
    cores = p.cpu if p.cpu is not None else max(MIN_CORES, spec.cpus / VCPUS_PER_CORE)
    memory = p.memory if p.memory is not None else int(spec.memory_mb)
    return {"cpu": (float(cores), float(cores)), "memory": (memory, memory)}


def scrub_env(env: dict[str, str], secrets: set[str]) -> dict[str, str]:
    """Never let Modal credentials into a sandbox, whatever asked for them."""
    out: dict[str, str] = {}
    for key, value in env.items():
        if key.upper().startswith(_RESERVED_ENV_PREFIX) or (value and value in secrets):
            log.warning("dropped env var %s: Modal credentials never enter a sandbox", key)
            continue
        out[key] = value
    return out


def create_kwargs(
    spec: SandboxSpec,
    p: ModalParams,
    *,
    image: Any,
    app: Any,
    client: Any,
    secrets: set[str],
) -> dict[str, Any]:
    """Sandbox.create's keyword arguments for one trial."""
    env, _ = split_env(scrub_env({**spec.env, **p.env}, secrets))
    kwargs: dict[str, Any] = {
        "app": app,
        "image": image,
        "tags": {
            TAG_MANAGED: "1",
            **job_tags(spec.job_id),
            TAG_TRIAL: tag_value(spec.trial_id),
            TAG_TASK: tag_value(spec.task_name),
        },
        "env": env or None,
        "timeout": p.timeout,
        "workdir": spec.workdir,
        **resources(spec, p),
        "client": client,
    }
    gpu = gpu_request(spec, p.gpu)
    if gpu is not None:
        kwargs["gpu"] = gpu
    if p.idle_timeout is not None:
        kwargs["idle_timeout"] = p.idle_timeout
    if p.region:
        kwargs["region"] = p.region[0] if len(p.region) == 1 else p.region
    kwargs.update(network_kwargs(spec))
    return kwargs
