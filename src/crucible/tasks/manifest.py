"""Reading a dataset manifest (crucible-dataset.json) and the task folders it lists, safely:
each listed folder must lie below the manifest's folder, reached without links.

CurateError is the error of the dataset curation commands (split, mix) as a whole.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from crucible.errors import ExitCode
from crucible.records.dataset_manifest import DatasetManifest

MAX_MANIFEST_BYTES = 64 * 1024 * 1024


class CurateError(Exception):
    """A split or mix refused or failed; `code` is the exit code, `error` its stable name."""

    def __init__(self, code: int, error: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.code, self.error, self.message, self.hint = code, error, message, hint


def read_manifest(path: Path) -> DatasetManifest:
    """The manifest at `path` (CurateError when it cannot be read or is not one)."""
    try:
        if path.is_symlink():
            raise CurateError(ExitCode.USAGE, "usage", f"{path}: a symbolic link, not read")
        if path.stat().st_size > MAX_MANIFEST_BYTES:
            raise CurateError(
                ExitCode.USAGE, "usage", f"{path}: larger than {MAX_MANIFEST_BYTES} bytes"
            )
        return DatasetManifest.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise CurateError(ExitCode.NOT_FOUND, "not_found", f"{path}: {exc.strerror}") from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise CurateError(ExitCode.USAGE, "usage",
                          f"{path}: not a dataset manifest ({where}: {first['msg']})") from exc  # fmt: skip


def manifest_task_dirs(path: Path) -> list[tuple[Path, str]]:
    """The task folders a manifest lists and their recorded digests; each must lie below the
    manifest's folder, reached without links."""
    manifest = read_manifest(path)
    base = path.parent.resolve()
    out: list[tuple[Path, str]] = []
    for entry in manifest.tasks:
        rel = Path(entry.path)
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            raise CurateError(ExitCode.USAGE, "usage",
                              f"{path}: task path {entry.path!r} leaves the dataset folder")  # fmt: skip
        task_dir = path.parent / rel
        walk = path.parent
        for part in rel.parts:
            walk = walk / part
            if walk.is_symlink():
                raise CurateError(ExitCode.USAGE, "usage",
                                  f"{path}: task path {entry.path!r} goes through a link")  # fmt: skip
        if not task_dir.resolve().is_relative_to(base):
            raise CurateError(ExitCode.USAGE, "usage",
                              f"{path}: task path {entry.path!r} leaves the dataset folder")  # fmt: skip
        out.append((task_dir, entry.digest))
    return out
