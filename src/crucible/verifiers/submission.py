"""The submission: the files a task declares (`[metadata.crucible] submission`), collected
from the agent's sandbox for host-side stages.

Collected like logs (sandboxes/collect/): after every sandbox process is killed, the
folder that holds each declared path is copied without following a link, within caps
of its own, into <trial>/sandbox/submission/; only the declared paths are then read,
as text, from crucible's own copy. A path that ends in "/" declares a folder (its
*.py files); a relative path is under the task's workdir. What is missing, a link or
cut short by a cap is noted, never followed or read: a host stage sees it as absent.

Every host stage reads a Python file's text through `sources()`: decoded as Python
decodes it, or refused (source.py), so the gate, the io stage and the judge all read
the program that runs.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from pathlib import Path

from crucible.records.text import storable_text
from crucible.sandboxes.base import Sandbox
from crucible.sandboxes.collect.collector import Budget, Sink, collect
from crucible.sandboxes.collect.manifest import Collected, Limits, Note
from crucible.store.layout import SANDBOX_DIR
from crucible.verifiers.source import UndecodableSource, python_text

SUBMISSION_DIR = "submission"  # under <trial>/sandbox/
# Room for a program, not for a data set: a submission past these is cut (and noted).
LIMITS = Limits(
    total_bytes=8 << 20,
    file_bytes=1 << 20,
    entries=2_000,
    dir_entries=1_000,
    depth=8,
    stream_bytes=32 << 20,
)
TEXT_CHARS = 200_000  # characters of one file a stage reads


@dataclass
class Submission:
    """Declared paths -> the host copies a stage may read (regular files only)."""

    files: dict[str, Path] = field(default_factory=dict)  # sandbox path -> host file
    missing: list[str] = field(default_factory=list)  # declared, not collected as a file
    notes: list[str] = field(default_factory=list)  # links, caps, errors met collecting
    # Declared code that is there but was not read whole ("path: why"): a .py file cut by a
    # cap or that is a link (Python runs it all the same), a declared folder whose copy
    # stopped short or failed. A stage that must see the code it judges refuses on these.
    unseen: list[str] = field(default_factory=list)
    _sources: dict[str, str] | None = field(default=None, init=False, repr=False, compare=False)

    def python_files(self) -> dict[str, Path]:
        return {k: v for k, v in self.files.items() if k.endswith(".py")}

    def sources(self) -> dict[str, str]:
        """Each submitted Python file's text as Python decodes it (read once). Raises
        UndecodableSource (verifier_failed, counted 0) naming every file that Python
        would not decode as UTF-8: no host stage reads another text than the one that runs."""
        if self._sources is None:
            out: dict[str, str] = {}
            refused: list[UndecodableSource] = []
            for name, path in self.python_files().items():
                try:
                    out[name] = python_text(path.read_bytes(), name)
                except UndecodableSource as exc:
                    refused.append(exc)
            if refused:
                message = "; ".join(e.message for e in refused)[:1000]
                raise UndecodableSource(message, hint=refused[0].hint)
            self._sources = out
        return dict(self._sources)

    def texts(self, limit: int = TEXT_CHARS) -> dict[str, str]:
        """Every file's text, at most `limit` characters each: Python files as sources()
        reads them, others as UTF-8 (bytes that are not shown as U+FFFD)."""
        code = self.sources()
        out: dict[str, str] = {}
        for name, path in self.files.items():
            if name in code:
                out[name] = code[name][:limit]
                continue
            with path.open("rb") as f:
                out[name] = f.read(limit * 4).decode("utf-8", "replace")[:limit]
        return out


def declared_paths(entries: list[str], workdir: str) -> list[str]:
    """Absolute, normalised sandbox paths (a trailing "/" kept: a folder)."""
    out: list[str] = []
    for raw in entries:
        folder = raw.endswith("/")
        path = posixpath.normpath(posixpath.join(workdir, raw))
        out.append(path.rstrip("/") + "/" if folder and path != "/" else path)
    return out


def _folder_of(path: str) -> str:
    return path.rstrip("/") if path.endswith("/") else posixpath.dirname(path)


async def collect_submission(sandbox: Sandbox, paths: list[str], trial_dir: Path) -> Submission:
    """Kill every process, then collect the folders holding `paths` (declared_paths())."""
    await sandbox.kill_all()
    sub = Submission()
    base = trial_dir / SANDBOX_DIR / SUBMISSION_DIR
    budget = Budget.of(LIMITS)
    hosts: dict[str, Path] = {}
    cut: set[str] = set()  # files a cap cut short: half a program is not the submission
    records: list[Collected] = []
    # Outermost folders first: a folder already collected covers those inside it.
    for folder in sorted({_folder_of(p) for p in paths}, key=lambda f: (f.count("/"), f)):
        if any(folder == h or folder.startswith(h.rstrip("/") + "/") for h in hosts):
            continue
        dst = base / (folder.strip("/") or "root")
        sink = Sink(folder, dst, budget, shown=str(dst.relative_to(trial_dir)))
        record = await collect(sandbox, folder, sink)
        hosts[folder] = dst
        if record.error:
            sub.notes.append(f"{folder}: {record.error}")
        if record.truncated:
            sub.notes.append(f"{folder}: cut short by a cap")
        sub.notes += [f"{n.path}: {n.type} not copied ({n.reason})" for n in record.notes[:20]]
        cut |= {n.path for n in record.notes if n.truncated and n.type == "file"}
        records.append(record)
    for path in paths:
        host = _host_path(path.rstrip("/"), hosts)
        if path.endswith("/"):
            found = sorted(p for p in host.rglob("*.py") if _regular(p)) if host else []
            for p in found:
                # a name that is not UTF-8 is stored (and placed for a stage) escaped
                rel = storable_text(p.relative_to(host).as_posix())  # type: ignore[arg-type]
                name = posixpath.join(path, rel)
                if name not in cut:
                    sub.files[name] = p
            if not found:
                sub.missing.append(path)
        elif host is not None and _regular(host) and path not in cut:
            sub.files[path] = host
        else:
            sub.missing.append(path)
    sub.unseen = [why for path in paths for why in _unseen(path, records, path in sub.files)]
    return sub


def _unseen(path: str, records: list[Collected], read: bool) -> list[str]:
    """What of declared `path` is there but was not read whole ("where: why"); `read`: the
    declared file was read."""
    out: list[str] = []
    for record in records:
        if not (path.rstrip("/") + "/").startswith(record.src.rstrip("/") + "/"):
            continue  # collected for another declared path
        if (record.error or record.notes_dropped) and (path.endswith("/") or not read):
            out.append(f"{path}: {record.error or 'more entries left out than are listed'}")
        out += [f"{n.path}: {n.type} {n.reason}" for n in record.notes if _hides(n, path, read)]
    return out


def _hides(note: Note, path: str, read: bool) -> bool:
    """Whether `note` (an entry not copied as it was) leaves declared code unread: the file
    itself, or a declared folder's .py file (cut, a link Python follows, a special file),
    or a walk that stopped inside or above what was declared (anything may be past it)."""
    above = path.startswith(note.path.rstrip("/") + "/")
    stopped = note.truncated and note.type != "file"
    if path.endswith("/"):
        inside = (note.path + "/").startswith(path)
        return inside if note.path.endswith(".py") else stopped and (inside or above)
    return note.path == path or (not read and stopped and above)


def _host_path(path: str, hosts: dict[str, Path]) -> Path | None:
    for folder, dst in hosts.items():
        if path == folder:
            return dst
        prefix = folder.rstrip("/") + "/"
        if path.startswith(prefix):
            return dst.joinpath(*path[len(prefix) :].split("/"))
    return None


def _regular(path: Path) -> bool:
    # crucible's own copy holds only folders and regular files; checked all the same.
    return path.is_file() and not path.is_symlink()
