"""An installed agent's native log as ATIF, chosen by its template; the one call installed.py makes."""

from __future__ import annotations

from pathlib import Path

from crucible.export.atif.claude_code import claude_code_to_atif
from crucible.export.atif.codex import codex_to_atif
from crucible.export.atif.common import Atif, write_atif

CONVERTERS = {"claude-code": claude_code_to_atif, "codex": codex_to_atif}


def installed_to_atif(template: str | None, log_text: str) -> Atif | None:
    convert = CONVERTERS.get(template or "")
    return convert(log_text) if convert else None


def write_installed_atif(template: str | None, log_text: str, logs_dir: Path) -> Path | None:
    """Write agent/trajectory.atif.json from the agent's JSONL; None when there is nothing to write."""
    try:
        doc = installed_to_atif(template, log_text)
        return write_atif(doc, logs_dir) if doc is not None else None
    except (OSError, ValueError):
        return None
