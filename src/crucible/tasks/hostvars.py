"""Which host variables a task may read: the operator's allow-list, never crucible's credentials.

Harbor fills `${VAR}` from the whole host environment. A task folder is untrusted input
(a setter model writes it; public repositories hand it over), so crucible reads only the
names the operator passes (`--task-env NAME`, `--task-env-file FILE`); any other name is
never read. Names that look like credentials (API keys, tokens, secrets, passwords, cloud
and crucible's own settings) cannot be allowed at all: allowing one is refused, saying why.

`HostEnv` takes the allowed values once, when the run starts; `HostScope` is one task's
view of it, recording every host variable the task names (`tasks check` lists them).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Matched on the upper-cased name. Credentials of crucible (CRUCIBLE_*, the judge's key,
# MODAL_*), of the model endpoints (*_API_KEY), and the usual cloud and CI secrets.
CREDENTIALS = (
    "*API_KEY*",
    "*APIKEY*",
    "*_KEY",
    "*ACCESS_KEY*",
    "*PRIVATE_KEY*",
    "TOKEN",
    "*_TOKEN*",
    "*SECRET*",
    "*PASSWORD*",
    "*PASSWD*",
    "*_PASS",
    "*_PWD",
    "*_PAT",  # personal access tokens (GITHUB_PAT, GH_PAT)
    "*_DSN",  # connection strings carry their password (SENTRY_DSN, PG_DSN)
    "*DATABASE_URL*",
    "*CREDENTIAL*",
    "*_AUTH",
    "*_AUTH_*",
    "MODAL_*",
    "CRUCIBLE_*",
    "AWS_*",
    "AZURE_*",
    "GOOGLE_*",
    "GCP_*",
    "SSH_*",
    "DOCKER_*",
    "KUBECONFIG",
    "NETRC",
)

Outcome = Literal["host", "default", "unset", "not-allowed", "credential"]


def credential_pattern(name: str) -> str | None:
    """The credential pattern `name` matches (it can never be allowed), or None."""
    upper = name.upper()
    return next((p for p in CREDENTIALS if fnmatch.fnmatchcase(upper, p)), None)


class HostRead(BaseModel):
    """One host variable a task names: where, and what the run gives it."""

    name: str
    file: Path
    line: int | None = None
    where: str  # the field: environment.env.X, services.db.environment...
    # host: the allowed host value; default: the task's default (the host is never read);
    # unset: allowed but the host has none; not-allowed / credential: never read.
    outcome: Outcome
    # A compose file's `${NAME}` without a default that got no value: Compose substitutes an
    # empty string (with a warning), and so does crucible there (task.toml's is an error).
    empty: bool = False

    def describe(self) -> str:
        said = {
            "host": "allowed, from the host",
            "default": "the task's default (the host is not read)",
            "unset": "allowed, but unset on the host",
            "not-allowed": "not allowed (never read)",
            "credential": "a credential (never read)",
        }[self.outcome]
        at = f"{self.file.name}:{self.line}" if self.line else self.file.name
        empty = ": an empty string, as Compose gives it" if self.empty else ""
        return f"{self.name}: {said}{empty} ({at} {self.where})"


class HostEnvRefused(ValueError):
    """An allow-list crucible will not take: a credential or a malformed name."""


class HostEnv:
    """The host variables this run allows tasks to read, with their values taken once."""

    def __init__(self, allowed: Iterable[str] = (), environ: Mapping[str, str] | None = None):
        names = sorted(set(allowed))
        for name in names:
            if not NAME.fullmatch(name):
                raise HostEnvRefused(f"--task-env {name!r}: not a variable name")
            if (pattern := credential_pattern(name)) is not None:
                raise HostEnvRefused(
                    f"--task-env {name}: it looks like a credential (matches {pattern}); "
                    "a task is untrusted input and never reads crucible's or the host's "
                    "credentials, allowed or not"
                )
        self.allowed = frozenset(names)
        env = environ or {}
        self.values = {n: env[n] for n in names if n in env}

    @classmethod
    def of(cls, values: Mapping[str, str]) -> HostEnv:
        """A view that allows exactly `values` (what a loaded task read, for the provider)."""
        out = cls()
        out.allowed, out.values = frozenset(values), dict(values)
        return out

    def scope(self) -> HostScope:
        return HostScope(self)


NO_HOST = HostEnv()


@dataclass
class HostScope:
    """One task's reads of the host: each name it asks for is recorded with its outcome."""

    host: HostEnv
    reads: list[HostRead] = field(default_factory=list)

    def read(
        self, name: str, file: Path, where: str, *, default: bool, line: int | None = None
    ) -> str | None:
        """The host value of `name` if the run allows it and the host has it, else None."""
        value = self.host.values.get(name) if name in self.host.allowed else None
        outcome: Outcome
        if value is not None:
            outcome = "host"
        elif default:
            outcome = "default"
        elif credential_pattern(name) is not None:
            outcome = "credential"
        else:
            outcome = "unset" if name in self.host.allowed else "not-allowed"
        self.reads.append(HostRead(name=name, file=file, line=line, where=where, outcome=outcome))
        return value

    def emptied(self, name: str) -> HostRead | None:
        """Mark the last read of `name` as given an empty string (Compose's rule)."""
        for read in reversed(self.reads):
            if read.name == name:
                read.empty = True
                return read
        return None

    def why_not(self, name: str) -> str:
        """Why `${name}` has no value (it was read and got None), for the task_invalid."""
        if (pattern := credential_pattern(name)) is not None:
            return (
                f"it names the host variable {name!r}, which looks like a credential "
                f"(matches {pattern}) and is never passed to a task"
            )
        if name in self.host.allowed:
            return (
                f"the host has no variable {name!r} and no default is given "
                f"(write ${{{name}:-default}} for one)"
            )
        return (
            f"it reads the host variable {name!r}, which this run does not allow "
            f"(pass --task-env {name} to allow it, or write ${{{name}:-default}})"
        )

    def used(self) -> dict[str, str]:
        """The allowed host values this task read: all a provider may see of the host."""
        return {r.name: self.host.values[r.name] for r in self.reads if r.outcome == "host"}


def read_names_file(path: Path) -> list[str]:
    """The names in a --task-env-file: one a line, `#` comments and blank lines skipped.

    Names only: a value in the file would be a secret on disk, and the value always comes
    from the host environment of the run."""
    names: list[str] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if not NAME.fullmatch(line):
            raise HostEnvRefused(
                f"{path}:{number}: {line!r} is not a variable name "
                "(one name a line; values come from the environment, never from this file)"
            )
        names.append(line)
    return names
