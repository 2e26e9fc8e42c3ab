"""Where the io stage runs programs: on the host, in a fresh folder, as a host uid of its
own, with a scrubbed environment and a timeout. No bubblewrap yet (see README "I/O
equivalence"): a task must opt in (`run_on_host = true`) before a submission runs here.

What holds: the program never runs as root (when crucible is root, each run gets its own
unprivileged uid and no supplementary groups, so it can write only its run folder and
what the world may write); it sees no host secret from crucible's environment (only
PATH, LANG, HOME = its folder, the runtime's own variables); it is killed with every
process of its uid when it ends or times out. What does not: it shares the host's
network and can read what the world may read.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from crucible.errors import SandboxFailed

# Host uids for io runs when crucible is root: above the local provider's slot range
# (hostuid.UID_BASE + 2**30), one per run, so leftovers are found by uid alone.
IO_UID_BASE = 0x6000_0000
_SEQ = itertools.count()
SRC = str(Path(__file__).resolve().parents[3])  # crucible's own package, for the runtime
KEEP_ENV = ("PATH", "LANG", "LC_ALL", "TZ")


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str
    timed_out: bool


def _world_readable(path: str) -> bool:
    """Can a uid with no privilege reach and run `path` (every folder above it o+x)?"""
    real = Path(os.path.realpath(path))
    try:
        if not real.stat().st_mode & 0o005:
            return False
        return all(p.stat().st_mode & 0o001 for p in real.parents)
    except OSError:
        return False


def interpreter() -> str:
    """This Python, or one of the same version that an unprivileged uid may run."""
    if os.geteuid() != 0 or _world_readable(sys.executable):
        return sys.executable
    name = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for folder in ("/usr/local/bin", "/usr/bin", "/bin"):
        cand = os.path.join(folder, name)
        if os.path.isfile(cand) and _world_readable(cand):
            return cand
    raise SandboxFailed(
        f"io stage: no {name} that an unprivileged uid can run (this one is {sys.executable})",
        hint="install the same Python version system-wide, or run crucible as a plain user",
    )


def python_path() -> str:
    """crucible's source and this interpreter's site-packages, for the other interpreter."""
    dirs = [SRC, *site.getsitepackages()]
    return os.pathsep.join(d for d in dirs if os.path.isdir(d))


class RunDir:
    """A fresh folder for one run, owned by the run's uid; removed with its processes."""

    def __init__(self) -> None:
        # Under the temp folder, not ~ (root's home is closed to the run's uid).
        base = Path(tempfile.gettempdir()) / "crucible-io"
        base.mkdir(mode=0o711, parents=True, exist_ok=True)
        self.path = Path(tempfile.mkdtemp(prefix="io-", dir=base))
        self.owner: tuple[int, int] | None = None
        if os.geteuid() == 0:
            uid = IO_UID_BASE + (((os.getpid() & 0xFFFFF) << 8) | (next(_SEQ) & 0xFF))
            self.owner = (uid, uid)

    def give(self) -> None:
        """Hand the folder (and what was copied in) to the run's uid."""
        if self.owner is None:
            return
        for root, dirs, files in os.walk(self.path):
            for name in [*dirs, *files]:
                os.chown(os.path.join(root, name), *self.owner, follow_symlinks=False)
        os.chown(self.path, *self.owner)

    def env(self, extra: Mapping[str, str]) -> dict[str, str]:
        keep = {k: os.environ[k] for k in KEEP_ENV if k in os.environ}
        return {
            **keep,
            "HOME": str(self.path),
            "TMPDIR": str(self.path),
            "PYTHONPATH": python_path(),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            **extra,
        }

    def run(
        self, argv: Sequence[str], env: Mapping[str, str], stdin: str, cwd: Path, timeout: float
    ) -> Ran:
        prefix: list[str] = []
        if self.owner is not None:
            uid, gid = self.owner
            setpriv = shutil.which("setpriv") or "setpriv"
            prefix = [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]
        # Output goes to files of ours, not pipes: a process the program leaves behind
        # would hold a pipe open, and reading it would wait for that process.
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            try:
                proc = subprocess.Popen(
                    [*prefix, *argv],
                    env=dict(env),
                    cwd=cwd,
                    stdin=subprocess.PIPE,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
            except OSError as exc:
                raise SandboxFailed(f"io stage: could not start {argv[0]}: {exc}") from exc
            timed_out = False
            try:
                proc.communicate(stdin.encode(), timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
            _killpg(proc.pid)  # the program, and workers left behind in its session
            self._kill_uid()  # and any that left the session
            proc.wait()
            return Ran(proc.returncode, _tail(out, 200_000), _tail(err, 20_000), timed_out)

    def _kill_uid(self) -> None:
        """Every process of this run's uid (one that left the session): SIGKILL, until none."""
        if self.owner is None:
            return
        for _ in range(50):
            pids = _pids_of(self.owner[0])
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)  # kills are asynchronous: look again

    def close(self) -> None:
        self._kill_uid()
        shutil.rmtree(self.path, ignore_errors=True)


def _tail(f: IO[bytes], limit: int) -> str:
    size = f.seek(0, os.SEEK_END)
    f.seek(max(0, size - limit))
    return f.read().decode(errors="replace")


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _pids_of(uid: int) -> list[int]:
    out: list[int] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            st = os.stat(entry.path)
        except OSError:
            continue
        if st.st_uid == uid:
            out.append(int(entry.name))
    return out
