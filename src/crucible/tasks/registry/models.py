"""Harbor's dataset registry format, validated: it comes from the network, so it is untrusted.

A registry is a JSON list of datasets. Each dataset has a `name`, a `version`, a
`description` and `tasks`; each task a `name`, a `git_url`, a `git_commit_id` and a
`path` inside that repository (Harbor's field names, kept as they are). A task without
`git_url` lives beside a local registry file (never a remote one, see pull.py).
Unknown fields are ignored, so a newer registry still reads.

What is refused, with the field named: a task path that is absolute, empty, climbs
(`..`), or names `.git`; a commit that is not a full hex id or HEAD (a short id cannot
be fetched, a branch moves); a URL of a scheme other than https, ssh (or scp-like
`user@host:path`) and file, or one that could be read as a git option.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

# Printable, single-line, bounded: names and versions are shown and matched, nothing more.
Label = Annotated[
    str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")
]
UrlKind = Literal["https", "ssh", "file"]

_HEX_ID = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
MAX_PATH = 1024


def url_kind(url: str) -> UrlKind:
    """The transport a git URL uses; ValueError when crucible does not fetch from it."""
    if not url or len(url) > 4096 or any(c.isspace() or ord(c) < 0x20 or c == "\x7f" for c in url):
        raise ValueError(
            "a git URL must be non-empty, at most 4096 characters, without spaces or control characters"
        )
    if url.startswith("-"):
        raise ValueError(f"git URL {url!r} starts with '-' (it would be read as an option)")
    scheme, sep, rest = url.partition("://")
    if sep:
        scheme = scheme.lower()
        if scheme == "https":
            return "https"
        if scheme in ("ssh", "git+ssh", "ssh+git"):
            if rest.lstrip("/").split("@")[-1].startswith("-"):
                raise ValueError(f"git URL {url!r}: a host starting with '-' is refused")
            return "ssh"
        if scheme == "file":
            return "file"
        raise ValueError(
            f"git URL {url!r}: scheme {scheme!r} is not fetched (use https, ssh or file)"
        )
    if "::" in url:  # git's transport::address syntax (ext::, fd::, ...)
        raise ValueError(f"git URL {url!r}: a transport::address URL is refused")
    colon, slash = url.find(":"), url.find("/")
    if colon > 0 and (slash < 0 or colon < slash):  # git reads this as scp-like ssh
        if url[:colon].rpartition("@")[2].startswith("-"):
            raise ValueError(f"git URL {url!r}: a host starting with '-' is refused")
        return "ssh"
    return "file"  # a local path


def task_path(value: str) -> PurePosixPath:
    """A path inside a repository: relative, no `..`, no `.git`; ValueError otherwise."""
    if not value or len(value) > MAX_PATH or "\\" in value or any(ord(c) < 0x20 for c in value):
        raise ValueError(
            f"task path {value!r} must be 1-{MAX_PATH} characters, '/'-separated, no control characters"
        )
    pure = PurePosixPath(value)
    if pure.is_absolute():
        raise ValueError(f"task path {value!r} is absolute: it must be inside the repository")
    parts = [p for p in pure.parts if p != "."]
    if any(p == ".." for p in parts):
        raise ValueError(f"task path {value!r} climbs out of the repository ('..')")
    if not parts:
        raise ValueError(
            f"task path {value!r} names the repository itself, not a task folder in it"
        )
    if any(p.lower() == ".git" for p in parts):
        raise ValueError(f"task path {value!r} goes through .git")
    return PurePosixPath(*parts)


class RegistryTask(BaseModel):
    """One task of a dataset: a folder at `path` in `git_url` at `git_commit_id`."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: Label
    git_url: str | None = None
    # A full commit id; None or "HEAD" mean the default branch's head, resolved once at pull.
    git_commit_id: str | None = None
    path: str

    @field_validator("git_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None:
            url_kind(v)
        return v

    @field_validator("git_commit_id")
    @classmethod
    def _commit(cls, v: str | None) -> str | None:
        if v is None or v.upper() == "HEAD":
            return None
        low = v.strip().lower()
        if not _HEX_ID.match(low):
            raise ValueError(
                f"git_commit_id {v!r} must be a full commit id (40 or 64 hex digits) or HEAD"
            )
        return low

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        return str(task_path(v))

    @property
    def kind(self) -> UrlKind | None:
        return None if self.git_url is None else url_kind(self.git_url)


class DatasetSpec(BaseModel):
    """A named, versioned list of tasks."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: Label
    version: Label
    description: str = Field(default="", max_length=10_000)
    tasks: list[RegistryTask] = Field(max_length=100_000)

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"


class RegistryFile(BaseModel):
    """The whole file: Harbor's is a bare JSON list (`{"datasets": [...]}` is read too)."""

    model_config = ConfigDict(extra="ignore")

    datasets: list[DatasetSpec] = Field(max_length=100_000)
