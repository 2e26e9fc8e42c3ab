"""A task's environment/docker-compose.yaml, read and checked before anything is made:
when the task is loaded (`check_compose`: `tasks check` and the launch say what is wrong),
and again by the docker provider, which runs what it reads (sandboxes/docker/compose.py).

Harbor merges the task's compose file over its own base one, whose `main`
service is the agent's container (built from environment/Dockerfile, or the
task's docker_image); every other service is a sidecar. crucible reads the same
file and keeps the same names, but it is no Compose implementation: it accepts
the service fields listed in `_SERVICE_FIELDS` and refuses every other one by
name (`TaskInvalid`), above all those that would reach the host (privileged,
capabilities, devices, host namespaces, bind mounts, published ports...).
`${VAR}`, `${VAR:-default}`, `${VAR-default}`, `${VAR:?err}`, `$VAR` and `$$` are
resolved as Compose does, from the task's [environment].env, Harbor's CONTEXT_DIR /
MAIN_IMAGE_NAME / PREBUILT_IMAGE_NAME / CPUS / MEMORY, and then only the host
variables the operator allows (tasks/hostvars.py; Harbor reads the whole host): a
variable that is unset, or not allowed, and has no default is an empty string, as Compose
gives it (with a warning; task.toml's env tables refuse it), `${VAR:?err}` is task_invalid,
and a bare `environment: [NAME]` entry not allowed is left out. The file is
read without following a link, and a build context that holds a link out of it is
refused (tasks/taskfs.py).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crucible.tasks.compose_fields import (
    Build,
    ComposeInvalid,
    Condition,
    Health,
    build,
    depends,
    health,
    invalid,
    limits,
    pairs,
    resolve,
    strings,
    text,
)
from crucible.tasks.hostvars import HostScope
from crucible.tasks.models import EnvironmentSection
from crucible.tasks.shape import parse_refused, shape_problem
from crucible.tasks.taskfs import TaskFileRefused, context_problems, read_task_bytes

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
                raise invalid(self.path, f"services.{name}.depends_on", "a dependency cycle")
            visiting.add(name)
            for dep in services[name].depends_on:
                visit(dep)
            visiting.discard(name)
            done.append(name)

        for name in services:
            visit(name)
        return done


# -- reading ------------------------------------------------------------------------------


def compose_variables(
    env: Mapping[str, str], *, env_dir: Path, cpus: float, memory_mb: int, image: str | None
) -> dict[str, str]:
    """The task's own names `${VAR}` sees: its env, then Harbor's. The host's come after
    these, and only those allowed (the `HostScope` given to `load_compose`)."""
    out = dict(env)
    out.update(
        CONTEXT_DIR=str(env_dir.resolve()),
        MAIN_IMAGE_NAME=MAIN_IMAGE_VAR,
        CPUS=f"{cpus:g}",
        MEMORY=f"{memory_mb}M",
    )
    if image:
        out["PREBUILT_IMAGE_NAME"] = image
    else:
        out.pop("PREBUILT_IMAGE_NAME", None)
    return out


def check_compose(path: Path, env: EnvironmentSection, host: HostScope | None = None) -> str | None:
    """What is wrong with a task's compose file (its field and why), or None: `tasks check`
    says it, and the launch refuses the task, before any sandbox is made."""
    variables = compose_variables(
        env.env, env_dir=path.parent, cpus=env.cpus, memory_mb=env.memory_mb, image=env.docker_image
    )
    try:
        load_compose(path, variables, main_image=env.docker_image, host=host)
    except ComposeInvalid as e:
        return e.detail
    return None


def load_compose(
    path: Path,
    variables: Mapping[str, str],
    *,
    main_image: str | None = None,
    host: HostScope | None = None,
) -> ComposeFile:
    """Read, interpolate and check `path`. `main_image`: the task's docker_image, if any;
    `host`: the host variables the task may read (None: none)."""
    import yaml

    try:
        text = read_task_bytes(path.parent, path.name).decode("utf-8")
    except TaskFileRefused as e:
        raise invalid(path, "file", e.why) from e
    except (OSError, UnicodeDecodeError) as e:
        raise invalid(path, "file", f"cannot be read: {e}") from e
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise invalid(path, "file", f"cannot be read as YAML: {e}") from e
    except RecursionError as e:
        raise invalid(path, "file", parse_refused(e)) from e
    if (why := shape_problem(doc)) is not None:
        raise invalid(path, "file", why)
    try:
        return _compose(path, doc, variables, main_image, host)
    finally:
        if host is not None:
            _point_at_lines(host, path, text)


def _point_at_lines(host: HostScope, path: Path, text: str) -> None:
    """Give each host read of this file the first line that names the variable."""
    lines = text.splitlines()
    for read in host.reads:
        if read.file == path and read.line is None:
            word = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(read.name)}(?![A-Za-z0-9_])")
            read.line = next((i for i, t in enumerate(lines, 1) if word.search(t)), None)


def _compose(
    path: Path,
    doc: Any,
    variables: Mapping[str, str],
    main_image: str | None,
    host: HostScope | None,
) -> ComposeFile:
    if not isinstance(doc, dict) or not isinstance(doc.get("services"), dict):
        raise invalid(path, "services", "a compose file is a mapping with a 'services' mapping")
    for key in doc:
        if not str(key).startswith("x-") and key not in _TOP_LEVEL:
            raise invalid(path, str(key), "top-level key not supported (one network per trial)")
    env_dir = path.parent
    services: dict[str, Service] = {}
    for name, raw in doc["services"].items():
        name = str(name)
        if not re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*", name):
            raise invalid(path, f"services.{name}", "invalid service name")
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise invalid(path, f"services.{name}", "a service is a mapping")
        raw = resolve(raw, variables, path, f"services.{name}", host)
        services[name] = _service(name, raw, path, env_dir, variables, host)
    main = services.pop(MAIN, None) or Service(MAIN)
    _check_main(main, path, env_dir, main_image)
    every = {MAIN, *services}
    for svc in (main, *services.values()):
        for dep in svc.depends_on:
            if dep not in every:
                raise invalid(path, f"services.{svc.name}.depends_on", f"no service {dep!r}")
        if svc is not main and svc.image is None and svc.build is None:
            raise invalid(path, f"services.{svc.name}", "a sidecar needs an image or a build")
    compose = ComposeFile(path, main, services)
    compose.start_order()  # a cycle is the task's fault: said now, before anything starts
    return compose


def _service(
    name: str,
    raw: dict[str, Any],
    path: Path,
    env_dir: Path,
    variables: Mapping[str, str],
    host: HostScope | None,
) -> Service:
    where = f"services.{name}"
    for key in raw:
        if key in _HOST_FIELDS:
            raise invalid(path, f"{where}.{key}", f"refused: {_HOST_FIELDS[key]}")
        if key not in _SERVICE_FIELDS and key not in _IGNORED and not str(key).startswith("x-"):
            raise invalid(path, f"{where}.{key}", "field not supported")
    svc = Service(name)
    if "image" in raw:
        svc.image = text(raw["image"], path, f"{where}.image")
        if not svc.image.strip():  # docker would refuse it ("invalid reference format")
            raise invalid(path, f"{where}.image", "an empty image name")
    if "build" in raw:
        svc.build = build(raw["build"], path, env_dir, f"{where}.build")
        for entry, why in context_problems(svc.build.context)[:1]:
            raise invalid(path, f"{where}.build.context", f"refused: {entry}: {why}")
    for key in ("command", "entrypoint"):
        if raw.get(key) is not None:
            value = raw[key]
            if not isinstance(value, str | list):
                raise invalid(path, f"{where}.{key}", "a string or a list")
            setattr(svc, key, value if isinstance(value, str) else [str(v) for v in value])
    svc.environment = pairs(raw.get("environment"), path, f"{where}.environment", variables, host)
    svc.labels = pairs(raw.get("labels"), path, f"{where}.labels", {})
    for key in ("working_dir", "user", "hostname"):
        if raw.get(key) is not None:
            setattr(svc, key, text(raw[key], path, f"{where}.{key}"))
    if "init" in raw:
        svc.init = bool(raw["init"])
    svc.read_only = bool(raw.get("read_only", False))
    svc.tmpfs = strings(raw.get("tmpfs"), path, f"{where}.tmpfs")
    for i, volume in enumerate(strings(raw.get("volumes"), path, f"{where}.volumes")):
        # "/data" is an anonymous volume, removed with its container; "a:/b" binds a host
        # path or names a volume that outlives the trial.
        if ":" in volume or not volume.startswith("/"):
            raise invalid(
                path, f"{where}.volumes[{i}]", f"refused: {volume!r} (bind mounts, named volumes)"
            )
        svc.volumes.append(volume)
    svc.depends_on = depends(raw.get("depends_on"), path, f"{where}.depends_on")
    if "healthcheck" in raw:
        svc.healthcheck = health(raw["healthcheck"], path, f"{where}.healthcheck")
    caps = limits(raw, path, where)
    svc.memory_mb, svc.cpus, svc.pids_limit = caps.memory_mb, caps.cpus, caps.pids
    return svc


def _check_main(main: Service, path: Path, env_dir: Path, main_image: str | None) -> None:
    """Main is the task's own container: its image and its caps come from task.toml."""
    where = "services.main"
    if main.image is not None and main.image not in (MAIN_IMAGE_VAR, main_image):
        raise invalid(
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
        raise invalid(path, f"{where}.build", "main is built from environment/Dockerfile only")
    ignored = [k for k in ("command", "working_dir") if getattr(main, k) is not None]
    ignored += [k for k in ("memory_mb", "cpus", "pids_limit") if getattr(main, k) is not None]
    if ignored:
        log.warning(
            "%s: services.main %s ignored: main keeps crucible's keeper, the task's workdir "
            "and task.toml's limits",
            path,
            ", ".join(ignored),
        )
