"""Where a registry comes from: a local file, a folder of them, or a URL.

The default is Harbor's public registry (DEFAULT_REGISTRY_URL); `--registry` or
$CRUCIBLE_REGISTRY name another. A remote registry is read within MAX_REGISTRY_BYTES
and kept under the datasets folder, so a later command without network still finds
its datasets (with a warning). Only https is fetched, and http from the loopback.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from crucible.errors import ExitCode
from crucible.tasks.registry.errors import DatasetError
from crucible.tasks.registry.models import DatasetSpec, RegistryFile
from crucible.tasks.registry.names import DATASETS_DIR_ENV, DEFAULT_REGISTRY_URL, REGISTRY_ENV

MAX_REGISTRY_BYTES = 64 << 20
HTTP_TIMEOUT = 60.0
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def default_datasets_dir() -> Path:
    """$CRUCIBLE_DATASETS_DIR, else $XDG_CACHE_HOME/crucible/datasets (~/.cache/...)."""
    if os.environ.get(DATASETS_DIR_ENV):
        return Path(os.environ[DATASETS_DIR_ENV])
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "crucible" / "datasets"


@dataclass
class Registry:
    """The datasets of one registry. `local_root`: the folder a local registry lives in
    (tasks without git_url and local repository paths are relative to it); None when
    the registry came from the network, which may name neither."""

    origin: str
    local_root: Path | None
    datasets: list[DatasetSpec]
    warnings: list[str] = field(default_factory=list)

    def find(self, ref: str) -> DatasetSpec:
        """The dataset `NAME@VERSION` (or `NAME`, when it has one version)."""
        name, sep, version = ref.rpartition("@") if "@" in ref else (ref, "", "")
        if not name or (sep and not version):
            raise DatasetError(f"dataset {ref!r}: write NAME@VERSION", code=ExitCode.USAGE)
        same = [d for d in self.datasets if d.name == name]
        if not same:
            raise DatasetError(f"dataset {name!r} is not in the registry {self.origin}",
                               hint="`crucible datasets list` shows what it has",
                               code=ExitCode.NOT_FOUND)  # fmt: skip
        versions = ", ".join(sorted({d.version for d in same}))
        if not sep:
            if len(same) == 1:
                return same[0]
            raise DatasetError(f"dataset {name!r} has versions {versions}: name one, as {name}@VERSION",
                               code=ExitCode.USAGE)  # fmt: skip
        hits = [d for d in same if d.version == version]
        if not hits:
            raise DatasetError(f"dataset {name!r} has no version {version!r} (it has {versions})",
                               code=ExitCode.NOT_FOUND)  # fmt: skip
        if len(hits) > 1:
            raise DatasetError(f"the registry {self.origin} lists {ref} {len(hits)} times")
        return hits[0]


def load_registry(where: str | Path | None, datasets_dir: Path) -> Registry:
    """The registry at `where`: a path, a URL, or None for $CRUCIBLE_REGISTRY or the default."""
    spec = str(where) if where is not None else os.environ.get(REGISTRY_ENV) or DEFAULT_REGISTRY_URL
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", spec):
        if spec.lower().startswith("file://"):
            return _load_local(Path(urlsplit(spec).path))
        return _load_remote(spec, datasets_dir)
    return _load_local(Path(spec))


def _load_local(path: Path) -> Registry:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".json" and p.is_file())
        if not files:
            raise DatasetError(
                f"registry folder {path} holds no .json file", code=ExitCode.NOT_FOUND
            )
        datasets = [d for f in files for d in parse_registry(_read_capped(f), str(f))]
        return Registry(str(path), path.resolve(), datasets)
    if not path.exists():
        raise DatasetError(f"registry {path} does not exist", code=ExitCode.NOT_FOUND)
    return Registry(str(path), path.resolve().parent, parse_registry(_read_capped(path), str(path)))


def _read_capped(path: Path) -> bytes:
    with path.open("rb") as f:
        data = f.read(MAX_REGISTRY_BYTES + 1)
    if len(data) > MAX_REGISTRY_BYTES:
        raise DatasetError(f"registry {path} is over {MAX_REGISTRY_BYTES >> 20} MiB")
    return data


def _load_remote(url: str, datasets_dir: Path) -> Registry:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if not (scheme == "https" or (scheme == "http" and parts.hostname in _LOOPBACK)):
        raise DatasetError(f"registry URL {url!r}: only https is fetched (http from the loopback)",
                           code=ExitCode.USAGE)  # fmt: skip
    cached = datasets_dir / "registries" / (hashlib.sha256(url.encode()).hexdigest()[:16] + ".json")
    try:
        data = _download(url)
    except DatasetError as exc:
        if not cached.is_file():
            raise
        reg = Registry(url, None, parse_registry(_read_capped(cached), str(cached)))
        reg.warnings.append(f"{exc.message}; using the copy of {url} kept at {cached}")
        return reg
    datasets = parse_registry(data, url)  # validated before it replaces a good copy
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(data)
    tmp.replace(cached)
    return Registry(url, None, datasets)


def _download(url: str) -> bytes:
    import httpx

    try:
        with httpx.stream("GET", url, timeout=HTTP_TIMEOUT, follow_redirects=False) as resp:
            if resp.status_code != 200:
                raise DatasetError(
                    f"registry {url}: HTTP {resp.status_code}", code=ExitCode.BACKEND
                )
            chunks: list[bytes] = []
            size = 0
            for chunk in resp.iter_bytes():
                size += len(chunk)
                if size > MAX_REGISTRY_BYTES:
                    raise DatasetError(f"registry {url} is over {MAX_REGISTRY_BYTES >> 20} MiB")
                chunks.append(chunk)
            return b"".join(chunks)
    except httpx.HTTPError as exc:
        raise DatasetError(f"registry {url} could not be fetched: {exc}", code=ExitCode.BACKEND,
                           hint="without network, pass a local copy: --registry PATH") from exc  # fmt: skip


def parse_registry(data: bytes, origin: str) -> list[DatasetSpec]:
    """Validate registry JSON; a DatasetError names the file, the dataset and the bad field."""
    try:
        raw: Any = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"registry {origin} is not JSON: {exc}") from exc
    if isinstance(raw, dict) and "datasets" not in raw:
        raw = [raw]  # a file holding one dataset
    try:
        return RegistryFile.model_validate(
            {"datasets": raw} if isinstance(raw, list) else raw
        ).datasets
    except ValidationError as exc:
        lines = [f"  {_where(raw, err['loc'])}: {err['msg']}" for err in exc.errors()[:10]]
        more = f"\n  ... and {exc.error_count() - 10} more" if exc.error_count() > 10 else ""
        raise DatasetError(f"registry {origin} is invalid:\n" + "\n".join(lines) + more) from exc


def _where(raw: Any, loc: tuple[Any, ...]) -> str:
    """`datasets[0] (name@1.0).tasks[2].path` for a pydantic error location."""
    out = ""
    node = {"datasets": raw} if isinstance(raw, list) else raw
    for i, part in enumerate(loc):
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
        node = node[part] if isinstance(node, (list, dict)) and _has(node, part) else None
        if i == 1 and isinstance(node, dict) and isinstance(node.get("name"), str):
            version = node.get("version")
            at = f"@{version[:40]}" if isinstance(version, str) else ""
            out += f" ({node['name'][:80]}{at})"
    return out


def _has(node: list[Any] | dict[str, Any], key: Any) -> bool:
    if isinstance(node, list):
        return isinstance(key, int) and 0 <= key < len(node)
    return key in node
