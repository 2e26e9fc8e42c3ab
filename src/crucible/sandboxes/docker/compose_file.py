"""A task's environment/docker-compose.yaml, read and checked before anything is made.

Harbor merges the task's compose file over its own base one, whose `main`
service is the agent's container (built from environment/Dockerfile, or the
task's docker_image); every other service is a sidecar. crucible reads the same
file and keeps the same names, but it is no Compose implementation: it accepts
the service fields listed in `_SERVICE_FIELDS` and refuses every other one by
name (`TaskInvalid`), above all those that would reach the host (privileged,
capabilities, devices, host namespaces, bind mounts, published ports...).
`${VAR}`, `${VAR:-default}`, `${VAR-default}`, `${VAR:?err}`, `$VAR` and `$$` are
resolved as Compose does, from the host, the task's [environment].env and
Harbor's CONTEXT_DIR / MAIN_IMAGE_NAME / PREBUILT_IMAGE_NAME / CPUS / MEMORY; a
variable that is unset and has no default is task_invalid, as in env tables.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import Any

from crucible.errors import TaskInvalid

log = logging.getLogger(__name__)

MAIN = "main"
# Stand-ins for Harbor's image variables: main's image is the one crucible resolves.
MAIN_IMAGE_VAR = "crucible-compose-main-image"

# Fields that change nothing crucible has to enforce, accepted and ignored.
_IGNORED = frozenset(
    {"container_name", "pull_policy", "restart", "stdin_open", "tty", "expose", "stop_grace_period"}
)
# Fields applied to a sidecar (and, where main can take them, to main).
_SERVICE_FIELDS = frozenset(
    {
        "image",
        "build",
        "command",
        "entrypoint",
        "environment",
        "working_dir",
        "depends_on",
        "healthcheck",
        "user",
        "labels",
        "hostname",
        "init",
        "read_only",
        "tmpfs",
        "volumes",
        "mem_limit",
        "cpus",
        "pids_limit",
        "deploy",
    }
)
# Refused by name with the reason: each would give a container a hold on the host.
_HOST_FIELDS = {
    "privileged": "privileged containers",
    "cap_add": "added capabilities",
    "devices": "host devices",
    "device_cgroup_rules": "host devices",
    "gpus": "host devices",
    "network_mode": "the host's or another container's network",
    "networks": "networks other than the trial's own",
    "pid": "the host's process namespace",
    "ipc": "the host's IPC namespace",
    "uts": "the host's UTS namespace",
    "userns_mode": "the host's user namespace",
    "cgroup": "the host's cgroup namespace",
    "cgroup_parent": "a cgroup of the host's",
    "ports": "published ports (a sidecar is reachable on the trial's network only)",
    "security_opt": "changed security options",
    "volumes_from": "another container's volumes",
    "sysctls": "kernel parameters",
    "ulimits": "raised limits",
    "runtime": "another container runtime",
    "extra_hosts": "host-name overrides",
    "dns": "the host's resolvers",
    "logging": "log drivers (they may write to the host)",
    "env_file": "files read from the host",
    "secrets": "files read from the host",
    "configs": "files read from the host",
    "oom_kill_disable": "an unkillable container",
    "shm_size": "an uncapped shared-memory size",
}
_TOP_LEVEL = frozenset({"services", "version", "name"})
_BUILD_FIELDS = frozenset({"context", "dockerfile", "args", "target"})
_DEPENDS_FIELDS = frozenset({"condition", "restart", "required"})
_HEALTH_FIELDS = frozenset({"test", "interval", "timeout", "retries", "start_period", "disable"})
_DEPLOY_LIMITS = frozenset({"cpus", "memory", "pids"})

_VAR = re.compile(
    r"\$(?:(?P<dollar>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)"
    r"(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*)|(?P<bad>\{[^}]*\}?))"
)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_NS = {"ns": 1, "us": 10**3, "µs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9}
_UNIT_NS["h"] = 60 * _UNIT_NS["m"]
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([bkmg]?)b?", re.IGNORECASE)
_SIZE_MB = {"": 1 / 2**20, "b": 1 / 2**20, "k": 1 / 2**10, "m": 1, "g": 2**10}


class Condition(StrEnum):
    started = "service_started"
    healthy = "service_healthy"
    completed = "service_completed_successfully"


@dataclass(frozen=True)
class Build:
    context: Path
    dockerfile: str = "Dockerfile"
    args: dict[str, str] = field(default_factory=dict)
    target: str | None = None


@dataclass(frozen=True)
class Health:
    """Docker's Healthcheck: `test` None means the image's own; ["NONE"] turns it off."""

    test: list[str] | None
    interval_ns: int = 0
    timeout_ns: int = 0
    start_period_ns: int = 0
    retries: int = 0


@dataclass
class Service:
    name: str
    image: str | None = None
    build: Build | None = None
    command: list[str] | str | None = None
    entrypoint: list[str] | str | None = None
    environment: dict[str, str] = field(default_factory=dict)
    working_dir: str | None = None
    user: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    hostname: str | None = None
    init: bool | None = None
    read_only: bool = False
    tmpfs: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)  # anonymous volumes only
    depends_on: dict[str, Condition] = field(default_factory=dict)
    healthcheck: Health | None = None
    memory_mb: int | None = None
    cpus: float | None = None
    pids_limit: int | None = None


@dataclass(frozen=True)
class ComposeFile:
    path: Path
    main: Service
    sidecars: dict[str, Service]

    def start_order(self) -> list[str]:
        """Every service, main included, each after what it depends on (file order otherwise)."""
        services = {MAIN: self.main, **self.sidecars}
        done: list[str] = []
        visiting: set[str] = set()

        def visit(name: str) -> None:
            if name in done:
                return
            if name in visiting:
                raise _invalid(self.path, f"services.{name}.depends_on", "a dependency cycle")
            visiting.add(name)
            for dep in services[name].depends_on:
                visit(dep)
            visiting.discard(name)
            done.append(name)

        for name in services:
            visit(name)
        return done


def _invalid(path: Path, where: str, why: str) -> TaskInvalid:
    return TaskInvalid(
        f"{path.parent.name}/{path.name}: {where}: {why}",
        hint="crucible runs compose sidecars through the Engine API; see README "
        "'Harbor compatibility' for the fields it accepts",
    )


# -- interpolation ------------------------------------------------------------------------


def interpolate(text: str, variables: Mapping[str, str], path: Path, where: str) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group("dollar"):
            return "$"
        if m.group("bad") is not None:
            raise _invalid(path, where, f"invalid interpolation {m.group(0)!r}")
        name = m.group("braced") or m.group("bare")
        op, arg = m.group("op"), m.group("arg") or ""
        value = variables.get(name)
        empty = value is None or (value == "" and op is not None and op.startswith(":"))
        if op in ("-", ":-"):
            return arg if empty else str(value)
        if op in ("?", ":?") and empty:
            raise _invalid(path, where, f"${{{name}}} is required: {arg or 'unset'}")
        if value is None:
            raise _invalid(
                path,
                where,
                f"the host has no variable {name!r} and no default is given "
                f"(write ${{{name}:-default}} for one)",
            )
        return value

    return _VAR.sub(one, text)


def _resolve(value: Any, variables: Mapping[str, str], path: Path, where: str) -> Any:
    if isinstance(value, str):
        return interpolate(value, variables, path, where)
    if isinstance(value, list):
        return [_resolve(v, variables, path, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: _resolve(v, variables, path, f"{where}.{k}") for k, v in value.items()}
    return value


# -- reading ------------------------------------------------------------------------------


def load_compose(
    path: Path, variables: Mapping[str, str], *, main_image: str | None = None
) -> ComposeFile:
    """Read, interpolate and check `path`. `main_image`: the task's docker_image, if any."""
    import yaml

    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise _invalid(path, "file", f"cannot be read as YAML: {e}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("services"), dict):
        raise _invalid(path, "services", "a compose file is a mapping with a 'services' mapping")
    for key in doc:
        if not str(key).startswith("x-") and key not in _TOP_LEVEL:
            raise _invalid(path, str(key), "top-level key not supported (one network per trial)")
    env_dir = path.parent
    services: dict[str, Service] = {}
    for name, raw in doc["services"].items():
        name = str(name)
        if not re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*", name):
            raise _invalid(path, f"services.{name}", "invalid service name")
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise _invalid(path, f"services.{name}", "a service is a mapping")
        raw = _resolve(raw, variables, path, f"services.{name}")
        services[name] = _service(name, raw, path, env_dir, variables)
    main = services.pop(MAIN, None) or Service(MAIN)
    _check_main(main, path, env_dir, main_image)
    every = {MAIN, *services}
    for svc in (main, *services.values()):
        for dep in svc.depends_on:
            if dep not in every:
                raise _invalid(path, f"services.{svc.name}.depends_on", f"no service {dep!r}")
        if svc is not main and svc.image is None and svc.build is None:
            raise _invalid(path, f"services.{svc.name}", "a sidecar needs an image or a build")
    compose = ComposeFile(path, main, services)
    compose.start_order()  # a cycle is the task's fault: said now, before anything starts
    return compose


def _service(
    name: str, raw: dict[str, Any], path: Path, env_dir: Path, variables: Mapping[str, str]
) -> Service:
    where = f"services.{name}"
    for key in raw:
        if key in _HOST_FIELDS:
            raise _invalid(path, f"{where}.{key}", f"refused: {_HOST_FIELDS[key]}")
        if key not in _SERVICE_FIELDS and key not in _IGNORED and not str(key).startswith("x-"):
            raise _invalid(path, f"{where}.{key}", "field not supported")
    svc = Service(name)
    if "image" in raw:
        svc.image = _str(raw["image"], path, f"{where}.image")
    if "build" in raw:
        svc.build = _build(raw["build"], path, env_dir, f"{where}.build")
    for key in ("command", "entrypoint"):
        if raw.get(key) is not None:
            value = raw[key]
            if not isinstance(value, str | list):
                raise _invalid(path, f"{where}.{key}", "a string or a list")
            setattr(svc, key, value if isinstance(value, str) else [str(v) for v in value])
    svc.environment = _pairs(raw.get("environment"), path, f"{where}.environment", variables)
    svc.labels = _pairs(raw.get("labels"), path, f"{where}.labels", {})
    for key in ("working_dir", "user", "hostname"):
        if raw.get(key) is not None:
            setattr(svc, key, _str(raw[key], path, f"{where}.{key}"))
    if "init" in raw:
        svc.init = bool(raw["init"])
    svc.read_only = bool(raw.get("read_only", False))
    svc.tmpfs = _strings(raw.get("tmpfs"), path, f"{where}.tmpfs")
    for i, volume in enumerate(_strings(raw.get("volumes"), path, f"{where}.volumes")):
        # "/data" is an anonymous volume, removed with its container; "a:/b" binds a host
        # path or names a volume that outlives the trial.
        if ":" in volume or not volume.startswith("/"):
            raise _invalid(
                path, f"{where}.volumes[{i}]", f"refused: {volume!r} (bind mounts, named volumes)"
            )
        svc.volumes.append(volume)
    svc.depends_on = _depends(raw.get("depends_on"), path, f"{where}.depends_on")
    if "healthcheck" in raw:
        svc.healthcheck = _health(raw["healthcheck"], path, f"{where}.healthcheck")
    _limits(svc, raw, path, where)
    return svc


def _check_main(main: Service, path: Path, env_dir: Path, main_image: str | None) -> None:
    """Main is the task's own container: its image and its caps come from task.toml."""
    where = "services.main"
    if main.image is not None and main.image not in (MAIN_IMAGE_VAR, main_image):
        raise _invalid(
            path,
            f"{where}.image",
            "main runs the task's image (environment/Dockerfile or [environment].docker_image)",
        )
    if main.build is not None and (
        main.build.context.resolve() != env_dir.resolve()
        or main.build.dockerfile != "Dockerfile"
        or main.build.args
        or main.build.target
    ):
        raise _invalid(path, f"{where}.build", "main is built from environment/Dockerfile only")
    ignored = [k for k in ("command", "working_dir") if getattr(main, k) is not None]
    ignored += [k for k in ("memory_mb", "cpus", "pids_limit") if getattr(main, k) is not None]
    if ignored:
        log.warning(
            "%s: services.main %s ignored: main keeps crucible's keeper, the task's workdir "
            "and task.toml's limits",
            path,
            ", ".join(ignored),
        )


# -- fields -------------------------------------------------------------------------------


def _str(value: Any, path: Path, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise _invalid(path, where, "a string")
    return str(value)


def _strings(value: Any, path: Path, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise _invalid(path, where, "a string or a list of strings")
    return [_str(v, path, f"{where}[{i}]") for i, v in enumerate(value)]


def _pairs(value: Any, path: Path, where: str, inherit: Mapping[str, str]) -> dict[str, str]:
    """A list of KEY=VALUE or a mapping; a bare KEY takes the host's value, if it has one."""
    if value is None:
        return {}
    items: list[tuple[str, Any]]
    if isinstance(value, dict):
        items = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, list):
        items = []
        for entry in value:
            key, sep, rest = _str(entry, path, where).partition("=")
            items.append((key, rest if sep else None))
    else:
        raise _invalid(path, where, "a list of KEY=VALUE or a mapping")
    out: dict[str, str] = {}
    for key, v in items:
        if v is None:
            if key in inherit:
                out[key] = inherit[key]
            continue
        out[key] = ("true" if v else "false") if isinstance(v, bool) else _str(v, path, where)
    return out


def _build(value: Any, path: Path, env_dir: Path, where: str) -> Build:
    raw = {"context": value} if isinstance(value, str) else value
    if not isinstance(raw, dict):
        raise _invalid(path, where, "a path or a mapping")
    for key in raw:
        if key not in _BUILD_FIELDS:
            raise _invalid(path, f"{where}.{key}", "build field not supported")
    context = (env_dir / _str(raw.get("context", "."), path, f"{where}.context")).resolve()
    # The context is sent to the engine: nothing of the host outside the task's environment/.
    if not context.is_relative_to(env_dir.resolve()) or not context.is_dir():
        raise _invalid(path, f"{where}.context", "refused: a folder inside environment/ only")
    dockerfile = _str(raw.get("dockerfile", "Dockerfile"), path, f"{where}.dockerfile")
    pure = PurePosixPath(dockerfile)
    if pure.is_absolute() or ".." in pure.parts or not (context / dockerfile).is_file():
        raise _invalid(path, f"{where}.dockerfile", f"no {dockerfile!r} inside the context")
    target = raw.get("target")
    return Build(
        context=context,
        dockerfile=dockerfile,
        args=_pairs(raw.get("args"), path, f"{where}.args", {}),
        target=None if target is None else _str(target, path, f"{where}.target"),
    )


def _depends(value: Any, path: Path, where: str) -> dict[str, Condition]:
    if value is None:
        return {}
    if isinstance(value, list):
        return {_str(v, path, where): Condition.started for v in value}
    if not isinstance(value, dict):
        raise _invalid(path, where, "a list of services or a mapping")
    out: dict[str, Condition] = {}
    for name, spec in value.items():
        spec = spec or {}
        if not isinstance(spec, dict) or any(k not in _DEPENDS_FIELDS for k in spec):
            raise _invalid(path, f"{where}.{name}", f"fields: {sorted(_DEPENDS_FIELDS)}")
        try:
            out[str(name)] = Condition(spec.get("condition", Condition.started))
        except ValueError as e:
            raise _invalid(path, f"{where}.{name}.condition", str(e)) from e
    return out


def _health(value: Any, path: Path, where: str) -> Health:
    if not isinstance(value, dict) or any(k not in _HEALTH_FIELDS for k in value):
        raise _invalid(path, where, f"a mapping with {sorted(_HEALTH_FIELDS)}")
    if value.get("disable"):
        return Health(test=["NONE"])
    test = value.get("test")
    if isinstance(test, str):
        test = ["CMD-SHELL", test]
    elif test is not None:
        test = _strings(test, path, f"{where}.test")
        if not test or test[0] not in ("CMD", "CMD-SHELL", "NONE"):
            raise _invalid(path, f"{where}.test", "starts with CMD, CMD-SHELL or NONE")
    retries = value.get("retries", 0)
    if not isinstance(retries, int) or retries < 0:
        raise _invalid(path, f"{where}.retries", "a whole number")
    return Health(
        test=test,
        interval_ns=_duration(value.get("interval"), path, f"{where}.interval"),
        timeout_ns=_duration(value.get("timeout"), path, f"{where}.timeout"),
        start_period_ns=_duration(value.get("start_period"), path, f"{where}.start_period"),
        retries=retries,
    )


def _duration(value: Any, path: Path, where: str) -> int:
    if value is None:
        return 0
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value * 10**9)
    text = _str(value, path, where).strip()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise _invalid(path, where, f"invalid duration {text!r} (e.g. '2s', '1m30s')")
    return int(sum(float(n) * _UNIT_NS[u] for n, u in parts))


def _size_mb(value: Any, path: Path, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return max(1, value // 2**20)
    m = _SIZE.fullmatch(_str(value, path, where).strip())
    if m is None:
        raise _invalid(path, where, f"invalid size {value!r} (e.g. '512m', '1g')")
    return max(1, int(float(m.group(1)) * _SIZE_MB[m.group(2).lower()]))


def _limits(svc: Service, raw: dict[str, Any], path: Path, where: str) -> None:
    limits: dict[str, Any] = {}
    deploy = raw.get("deploy")
    if deploy is not None:
        res = deploy.get("resources") if isinstance(deploy, dict) else None
        if not isinstance(deploy, dict) or set(deploy) - {"resources"}:
            raise _invalid(path, f"{where}.deploy", "only deploy.resources is supported")
        if not isinstance(res, dict) or set(res) - {"limits", "reservations"}:
            raise _invalid(path, f"{where}.deploy.resources", "limits and reservations only")
        limits = res.get("limits") or {}
        if not isinstance(limits, dict) or set(limits) - _DEPLOY_LIMITS:
            raise _invalid(path, f"{where}.deploy.resources.limits", "cpus, memory, pids only")
    memory = raw.get("mem_limit", limits.get("memory"))
    if memory is not None:
        svc.memory_mb = _size_mb(memory, path, f"{where}.mem_limit")
    cpus = raw.get("cpus", limits.get("cpus"))
    if cpus is not None:
        try:
            svc.cpus = float(cpus)
        except (TypeError, ValueError) as e:
            raise _invalid(path, f"{where}.cpus", "a number") from e
    pids = raw.get("pids_limit", limits.get("pids"))
    if pids is not None:
        if not isinstance(pids, int) or isinstance(pids, bool) or pids < 1:
            raise _invalid(path, f"{where}.pids_limit", "a whole number above 0")
        svc.pids_limit = pids
