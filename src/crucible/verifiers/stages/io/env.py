"""The Python environment inside an io sandbox: this very interpreter, its libraries and
crucible's package, read-only at fixed sandbox paths.

Mechanism. The io runs need the offline Modal runtime (crucible.modalrt and what it
imports) and the libraries the programs import (numpy, polars... installed in crucible's
venv). They run as an unprivileged host uid, and crucible's interpreter may live where
that uid cannot walk (here /root/.pyenv, /root being 0700). So the io sandbox binds,
read-only:
- PYTHON (/opt/crucible/python)      <- sys.base_prefix: the interpreter and its stdlib;
- PYTHON/lib/pythonX.Y/site-packages <- the venv's site-packages, over the base's own, so
  the interpreter finds it as its site folder (its .pth files are processed as usual);
- SRC/crucible (/opt/crucible/src)   <- crucible's own package (PYTHONPATH=SRC).
When crucible runs as root, sandboxes/local/oneshot/run.py stages those binds through a
private mount namespace of its own (bwrap, running as the run's uid, could not reach
the sources by path); otherwise bwrap binds them directly.

Why this way: it is the same binary, so the same version and ABI by construction (a
system python3.11 of another patch level would not be, and numpy's wheels are built
for this one); nothing is copied (the venv is ~650 MB); a task's program sees exactly
the libraries crucible has. Alternatives rejected: bwrap --ro-bind-fd (it resolves the
fd back to its path, which the run's uid cannot walk); copying the environment to a
world-readable cache (slow, stale after a pip install); passing an fd of the host
folder into the sandbox (`..` from it climbs out to the host's root).

The interpreter is linked with RUNPATH = its host prefix's lib (a pyenv build), which
does not exist inside: LD_LIBRARY_PATH points at PYTHON/lib instead, for every process
of the run. Everything here is read-only inside (the mounts are), and the work folder
is a fresh tmpfs per run, so a submission can neither change crucible's package or
site-packages nor plant a module that a later run imports.
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from crucible.errors import SandboxFailed

PYTHON = "/opt/crucible/python"
SRC = "/opt/crucible/src"
EXTRA_SITE = "/opt/crucible/site"  # a platlib apart from purelib, when there is one
WORKDIR = "/work"
VERSION = f"python{sys.version_info.major}.{sys.version_info.minor}"


@dataclass(frozen=True)
class PyEnv:
    python: str  # the interpreter's path inside
    binds: dict[str, str]  # sandbox path -> host folder (read-only, in this order)
    env: dict[str, str]  # the base environment of every io run


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


@functools.cache
def pyenv() -> PyEnv:
    """The binds and environment for this interpreter; SandboxFailed when it cannot work."""
    base = Path(os.path.realpath(sys.base_prefix))
    exe = base / "bin" / VERSION
    if not exe.is_file():
        raise SandboxFailed(f"io sandbox: no {exe} under the interpreter's prefix {base}")
    binds = {PYTHON: str(base)}
    extra: list[str] = []
    paths = sysconfig.get_paths()
    purelib = Path(os.path.realpath(paths["purelib"]))
    platlib = Path(os.path.realpath(paths["platlib"]))
    site_inside = f"{PYTHON}/lib/{VERSION}/site-packages"
    if not _inside(purelib, base):  # a venv: its site folder replaces the base's
        if not (base / "lib" / VERSION / "site-packages").is_dir():
            raise SandboxFailed(f"io sandbox: {base} has no lib/{VERSION}/site-packages")
        binds[site_inside] = str(purelib)
    if platlib != purelib and not _inside(platlib, base):
        binds[EXTRA_SITE] = str(platlib)
        extra.append(EXTRA_SITE)
    import crucible

    binds[f"{SRC}/crucible"] = str(Path(crucible.__file__).resolve().parent)
    env = {
        "PATH": f"{PYTHON}/bin:/usr/local/bin:/usr/bin:/bin",
        "LD_LIBRARY_PATH": f"{PYTHON}/lib",
        "PYTHONPATH": os.pathsep.join([SRC, *extra]),
        "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",  # read-only anyway; no failed writes per import
        "PYTHONUNBUFFERED": "1",
        "HOME": WORKDIR,
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
    }
    return PyEnv(python=f"{PYTHON}/bin/{VERSION}", binds=binds, env=env)
