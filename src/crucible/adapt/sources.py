"""Rows of a source: a local JSONL (or JSON list) or Parquet file, or a dataset name
loaded with the `datasets` library where a hub is reachable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from crucible.adapt.base import AdaptError

MAX_FILE_BYTES = 2 << 30


def load_rows(source: str, split: str = "test") -> list[dict[str, Any]]:
    """Every row of `source`: a file when the path exists, else a dataset name (its
    `split`); AdaptError saying what could not be read, and why."""
    path = Path(source)
    if path.exists():
        if not path.is_file():
            raise AdaptError(f"{source}: not a file")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise AdaptError(f"{source}: larger than {MAX_FILE_BYTES} bytes")
        if path.suffix == ".parquet":
            return _parquet(path)
        return _json_rows(path)
    if source.endswith((".jsonl", ".json", ".parquet")) or "/" not in source:
        raise AdaptError(f"{source}: no such file (a dataset name looks like OWNER/NAME)")
    return _dataset(source, split)


def _json_rows(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(errors="replace")
    if text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as exc:
            raise AdaptError(f"{path}: not JSON: {exc}") from exc
    else:
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise AdaptError(f"{path}:{n}: not a JSON line: {exc}") from exc
    if not all(isinstance(r, dict) for r in rows):
        raise AdaptError(f"{path}: every row must be a JSON object")
    return rows


def _parquet(path: Path) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise AdaptError("reading Parquet needs pyarrow (pip install pyarrow)") from exc
    try:
        return [dict(r) for r in pq.read_table(path).to_pylist()]
    except Exception as exc:  # pyarrow's errors are many: say which file and why
        raise AdaptError(f"{path}: not readable as Parquet: {type(exc).__name__}: {exc}") from exc


def _dataset(name: str, split: str) -> list[dict[str, Any]]:
    try:
        import datasets
    except ImportError as exc:
        raise AdaptError(
            f"{name}: no such file, and loading a dataset by name needs the datasets package"
        ) from exc
    try:
        loaded = datasets.load_dataset(name, split=split)
    except Exception as exc:  # offline, unknown name, no such split: all say why
        raise AdaptError(
            f"dataset {name!r} (split {split!r}) could not be loaded: {type(exc).__name__}: "
            f"{str(exc)[:300]}",
            hint="no hub reachable? download it elsewhere and pass the JSONL or Parquet file",
        ) from exc
    return [dict(r) for r in loaded]
