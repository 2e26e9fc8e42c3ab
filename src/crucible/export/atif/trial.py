"""A finished trial's ATIF document, whatever its agent left: the written ATIF file, else the
terminal agent's record converted, else an installed agent's stdout converted.

Trial folders hold untrusted output: files are read only when they are
regular files (not links) under the cap, and anything unreadable or invalid
gives None rather than an error. The viewer and `crucible runs trace
--format atif` both read trajectories through here.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

from pydantic import ValidationError

from crucible.export.atif.common import ATIF_FILE, Atif
from crucible.export.atif.installed import installed_to_atif
from crucible.export.atif.native import native_to_atif
from crucible.records.trajectory import TRAJECTORY_LOG, Trajectory, load_trajectory
from crucible.records.trial import TrialResult
from crucible.store.layout import AGENT_DIR, TRAJECTORY_FILE

READ_CAP = 16 * 1024 * 1024
STDOUT_FILE = "stdout.txt"  # an installed agent's output (agents/installed.py)


def _regular(path: Path) -> bool:
    """A regular file (not a link) under the cap."""
    try:
        st = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size <= READ_CAP


def _read(path: Path) -> str | None:
    if not _regular(path):
        return None
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def trial_atif(tdir: Path, result: TrialResult | None = None) -> tuple[Atif, str] | None:
    """(the document, where it came from: 'atif' | 'native' | a template name), or None."""
    agent = tdir / AGENT_DIR
    if agent.is_symlink() or not agent.is_dir():
        return None
    if (text := _read(agent / ATIF_FILE)) is not None:
        try:
            return Atif.model_validate_json(text), "atif"
        except (ValidationError, ValueError):
            pass  # fall through: rebuild it from what the agent left
    log = agent / TRAJECTORY_LOG
    if _regular(log):  # crucible's own record
        try:
            return native_to_atif(load_trajectory(log)), "native"
        except (OSError, ValidationError, ValueError):
            pass
    if (text := _read(agent / TRAJECTORY_FILE)) is not None:
        try:
            return native_to_atif(Trajectory.model_validate_json(text)), "native"
        except (ValidationError, ValueError):
            pass
    template = None
    if result is not None and result.agent_result is not None:
        value = result.agent_result.metadata.get("template")
        template = value if isinstance(value, str) else None
    if template and (text := _read(agent / STDOUT_FILE)) is not None:
        try:
            doc = installed_to_atif(template, text)
        except ValueError:
            doc = None
        if doc is not None:
            return doc, template
    return None


def atif_json(doc: Atif) -> str:
    return json.dumps(doc.to_json_dict(), indent=1)
