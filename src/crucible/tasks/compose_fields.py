"""The field-level readers of a compose file (tasks/compose.py): Compose's interpolation,
durations, sizes, build, depends_on, healthcheck and resource limits, each checked and
turned into plain values, or refused by name (`ComposeInvalid`, a `TaskInvalid`)."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import Any

from crucible.errors import TaskInvalid
from crucible.tasks.hostvars import HostScope

log = logging.getLogger(__name__)

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


class ComposeInvalid(TaskInvalid):
    """A compose file crucible will not run: `detail` names the field and the reason."""

    def __init__(self, path: Path, detail: str) -> None:
        super().__init__(
            f"{path.parent.name}/{path.name}: {detail}",
            hint="crucible runs compose sidecars through the Engine API; see docs/concepts/tasks.md "
            "'Compose environments' for the fields it accepts",
        )
        self.detail = detail


def invalid(path: Path, where: str, why: str) -> ComposeInvalid:
    return ComposeInvalid(path, f"{where}: {why}")


# -- interpolation ------------------------------------------------------------------------


def interpolate(
    text: str,
    variables: Mapping[str, str],
    path: Path,
    where: str,
    host: HostScope | None = None,
) -> str:
    """Compose's interpolation: `variables` (the task's own names) first, then the host
    variables `host` allows; with no `host`, nothing of the host is read."""

    def one(m: re.Match[str]) -> str:
        if m.group("dollar"):
            return "$"
        if m.group("bad") is not None:
            raise invalid(path, where, f"invalid interpolation {m.group(0)!r}")
        name = m.group("braced") or m.group("bare")
        op, arg = m.group("op"), m.group("arg") or ""
        value = variables.get(name)
        if value is None and host is not None:
            value = host.read(name, path, where, default=op in ("-", ":-"))
        empty = value is None or (value == "" and op is not None and op.startswith(":"))
        if op in ("-", ":-"):
            return arg if empty else str(value)
        if op in ("?", ":?") and empty:
            if value is None and host is not None and name not in host.host.allowed:
                raise invalid(path, where, host.why_not(name))
            raise invalid(path, where, f"${{{name}}} is required: {arg or 'unset'}")
        if value is None:
            # Compose substitutes an empty string for a variable it has no value for, with a
            # warning, and Harbor runs the file through Compose: so does crucible (the read is
            # marked, and `tasks check` warns). Nothing of the host is read for it: the
            # allow-list still decides (tasks/hostvars.py), and an empty string tells nothing.
            if host is not None:
                host.emptied(name)
            log.warning(
                "%s: %s: ${%s} has no value: an empty string, as Compose gives",
                path.name,
                where,
                name,
            )
            return ""
        return value

    return _VAR.sub(one, text)


def resolve(
    value: Any,
    variables: Mapping[str, str],
    path: Path,
    where: str,
    host: HostScope | None = None,
) -> Any:
    if isinstance(value, str):
        return interpolate(value, variables, path, where, host)
    if isinstance(value, list):
        return [resolve(v, variables, path, f"{where}[{i}]", host) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: resolve(v, variables, path, f"{where}.{k}", host) for k, v in value.items()}
    return value


# -- fields -------------------------------------------------------------------------------


def text(value: Any, path: Path, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise invalid(path, where, "a string")
    return str(value)


def strings(value: Any, path: Path, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise invalid(path, where, "a string or a list of strings")
    return [text(v, path, f"{where}[{i}]") for i, v in enumerate(value)]


def pairs(
    value: Any,
    path: Path,
    where: str,
    inherit: Mapping[str, str],
    host: HostScope | None = None,
) -> dict[str, str]:
    """A list of KEY=VALUE or a mapping; a bare KEY takes `inherit`'s value, else the
    host's where `host` allows it (as Compose's, left out when there is none)."""
    if value is None:
        return {}
    items: list[tuple[str, Any]]
    if isinstance(value, dict):
        items = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, list):
        items = []
        for entry in value:
            key, sep, rest = text(entry, path, where).partition("=")
            items.append((key, rest if sep else None))
    else:
        raise invalid(path, where, "a list of KEY=VALUE or a mapping")
    out: dict[str, str] = {}
    for key, v in items:
        if v is None:
            if key in inherit:
                out[key] = inherit[key]
            elif (
                host is not None and (got := host.read(key, path, where, default=True)) is not None
            ):
                out[key] = got
            continue
        out[key] = ("true" if v else "false") if isinstance(v, bool) else text(v, path, where)
    return out


def build(value: Any, path: Path, env_dir: Path, where: str) -> Build:
    raw = {"context": value} if isinstance(value, str) else value
    if not isinstance(raw, dict):
        raise invalid(path, where, "a path or a mapping")
    for key in raw:
        if key not in _BUILD_FIELDS:
            raise invalid(path, f"{where}.{key}", "build field not supported")
    context = (env_dir / text(raw.get("context", "."), path, f"{where}.context")).resolve()
    # The context is sent to the engine: nothing of the host outside the task's environment/.
    if not context.is_relative_to(env_dir.resolve()) or not context.is_dir():
        raise invalid(path, f"{where}.context", "refused: a folder inside environment/ only")
    dockerfile = text(raw.get("dockerfile", "Dockerfile"), path, f"{where}.dockerfile")
    pure = PurePosixPath(dockerfile)
    if pure.is_absolute() or ".." in pure.parts or not (context / dockerfile).is_file():
        raise invalid(path, f"{where}.dockerfile", f"no {dockerfile!r} inside the context")
    target = raw.get("target")
    return Build(
        context=context,
        dockerfile=dockerfile,
        args=pairs(raw.get("args"), path, f"{where}.args", {}),
        target=None if target is None else text(target, path, f"{where}.target"),
    )


def depends(value: Any, path: Path, where: str) -> dict[str, Condition]:
    if value is None:
        return {}
    if isinstance(value, list):
        return {text(v, path, where): Condition.started for v in value}
    if not isinstance(value, dict):
        raise invalid(path, where, "a list of services or a mapping")
    out: dict[str, Condition] = {}
    for name, spec in value.items():
        spec = spec or {}
        if not isinstance(spec, dict) or any(k not in _DEPENDS_FIELDS for k in spec):
            raise invalid(path, f"{where}.{name}", f"fields: {sorted(_DEPENDS_FIELDS)}")
        try:
            out[str(name)] = Condition(spec.get("condition", Condition.started))
        except ValueError as e:
            raise invalid(path, f"{where}.{name}.condition", str(e)) from e
    return out


def health(value: Any, path: Path, where: str) -> Health:
    if not isinstance(value, dict) or any(k not in _HEALTH_FIELDS for k in value):
        raise invalid(path, where, f"a mapping with {sorted(_HEALTH_FIELDS)}")
    if value.get("disable"):
        return Health(test=["NONE"])
    test = value.get("test")
    if isinstance(test, str):
        test = ["CMD-SHELL", test]
    elif test is not None:
        test = strings(test, path, f"{where}.test")
        if not test or test[0] not in ("CMD", "CMD-SHELL", "NONE"):
            raise invalid(path, f"{where}.test", "starts with CMD, CMD-SHELL or NONE")
    retries = value.get("retries", 0)
    if not isinstance(retries, int) or retries < 0:
        raise invalid(path, f"{where}.retries", "a whole number")
    return Health(
        test=test,
        interval_ns=duration(value.get("interval"), path, f"{where}.interval"),
        timeout_ns=duration(value.get("timeout"), path, f"{where}.timeout"),
        start_period_ns=duration(value.get("start_period"), path, f"{where}.start_period"),
        retries=retries,
    )


def duration(value: Any, path: Path, where: str) -> int:
    if value is None:
        return 0
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value * 10**9)
    spelled = text(value, path, where).strip()
    parts = _DURATION.findall(spelled)
    if not parts or "".join(n + u for n, u in parts) != spelled:
        raise invalid(path, where, f"invalid duration {spelled!r} (e.g. '2s', '1m30s')")
    return int(sum(float(n) * _UNIT_NS[u] for n, u in parts))


def size_mb(value: Any, path: Path, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return max(1, value // 2**20)
    m = _SIZE.fullmatch(text(value, path, where).strip())
    if m is None:
        raise invalid(path, where, f"invalid size {value!r} (e.g. '512m', '1g')")
    return max(1, int(float(m.group(1)) * _SIZE_MB[m.group(2).lower()]))


@dataclass(frozen=True)
class Limits:
    memory_mb: int | None = None
    cpus: float | None = None
    pids: int | None = None


def limits(raw: dict[str, Any], path: Path, where: str) -> Limits:
    """mem_limit / cpus / pids_limit, or deploy.resources.limits (reservations ignored)."""
    declared: dict[str, Any] = {}
    deploy = raw.get("deploy")
    if deploy is not None:
        res = deploy.get("resources") if isinstance(deploy, dict) else None
        if not isinstance(deploy, dict) or set(deploy) - {"resources"}:
            raise invalid(path, f"{where}.deploy", "only deploy.resources is supported")
        if not isinstance(res, dict) or set(res) - {"limits", "reservations"}:
            raise invalid(path, f"{where}.deploy.resources", "limits and reservations only")
        declared = res.get("limits") or {}
        if not isinstance(declared, dict) or set(declared) - _DEPLOY_LIMITS:
            raise invalid(path, f"{where}.deploy.resources.limits", "cpus, memory, pids only")
    out = Limits()
    memory = raw.get("mem_limit", declared.get("memory"))
    if memory is not None:
        out = Limits(memory_mb=size_mb(memory, path, f"{where}.mem_limit"))
    cpus = raw.get("cpus", declared.get("cpus"))
    if cpus is not None:
        try:
            out = Limits(out.memory_mb, float(cpus))
        except (TypeError, ValueError) as e:
            raise invalid(path, f"{where}.cpus", "a number") from e
    pids = raw.get("pids_limit", declared.get("pids"))
    if pids is not None:
        if not isinstance(pids, int) or isinstance(pids, bool) or pids < 1:
            raise invalid(path, f"{where}.pids_limit", "a whole number above 0")
        out = Limits(out.memory_mb, out.cpus, pids)
    return out
