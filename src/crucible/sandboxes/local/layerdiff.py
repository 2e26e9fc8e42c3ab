"""The changes an image-mode sandbox made, read from its overlay's upper layer (the
sandbox's to shape, so never through a link) against the image's tree (its lower layers,
read as the overlay shows them: layers.LayerStack).

A file in the upper layer is added, or modified when the image has one there; a whiteout
(a 0/0 character device) is a removed file of the image; an opaque directory (made anew
over the image's) is a modified one. Folders themselves are not changes (what they hold
is). Classified by sandboxes/tamper.py.
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Callable
from pathlib import Path

from crucible.records.tamper import ChangeKind, SystemChange, TamperRecord
from crucible.sandboxes import tamper
from crucible.sandboxes.local.layers import LayerStack


def changes(
    upper: Path,
    lower: LayerStack,
    own: list[str],
    skip: set[str],
    homes: tuple[str, ...] = (),
    path_dirs: tuple[str, ...] = tamper.PATH_DIRS,
) -> TamperRecord:
    """What `upper` holds outside the agent's own places (`own`: its workdir;
    tamper.OWN_PLACES), leaving out `skip` (mount points bwrap made, crucible's own files).
    In `homes` (HOME) only the image's own code modified or removed is recorded
    (tamper.kept_in_home), walked only where the image has the folder. Walked through
    directory fds (os.fwalk), never through a link, and the image is looked up the same way.
    `path_dirs`: the PATH grading searches (tamper.grading_path), for a shadowed command."""
    found: list[SystemChange] = []
    seen = 0
    mine = tamper.places(own)
    home = tamper.places([h for h in homes if not mine(h)]) if homes else (lambda _: False)

    @functools.cache  # an added package asks after the same few names once per file
    def in_image(path: str) -> bool:
        return lower.lstat(path) is not None

    def classify(
        path: str,
        kind: ChangeKind,
        mode: int | None,
        exists: Callable[[str], bool] | None = None,
        was: int | None = None,
    ) -> SystemChange:
        return tamper.classify(path, kind, mode, exists, was=was, path_dirs=path_dirs)

    for dirpath, dirnames, filenames, dirfd in os.fwalk(upper, follow_symlinks=False):
        relpath = os.path.relpath(dirpath, upper)
        base = "" if relpath == "." else "/" + relpath
        was = lower.lstat(base) if base else None
        has_dir = not base or (was is not None and stat.S_ISDIR(was.st_mode))
        seen += _folder(
            base, dirnames, filenames, dirfd, lower if has_dir else None, mine, skip, in_image, found,
            home, classify,
        )  # fmt: skip
        if seen >= tamper.WALK_CAP:
            return tamper.record(found, walk_cut=True)
    return tamper.record(found)


def _folder(
    base: str,
    dirnames: list[str],
    filenames: list[str],
    dirfd: int,
    image_dir: LayerStack | None,
    mine: Callable[[str], bool],
    skip: set[str],
    in_image: Callable[[str], bool],
    found: list[SystemChange],
    home: Callable[[str], bool],
    classify: Callable[..., SystemChange],
) -> int:
    """The changes of one folder of the upper layer (`image_dir`: the image, None when it
    has no such folder); prunes `dirnames` to the folders to walk. Returns entries seen."""

    def image(name: str) -> os.stat_result | None:
        return None if image_dir is None else image_dir.lstat(f"{base}/{name}")

    keep = []
    mark = len(found)
    for d in dirnames:
        path = f"{base}/{d}"
        if mine(path):
            continue
        if home(path) and image(d) is None:  # nothing of the image's in a folder it lacks
            continue
        st = os.lstat(d, dir_fd=dirfd)
        if stat.S_ISLNK(st.st_mode):
            filenames.append(d)  # a link where a directory was, or a new one
            continue
        keep.append(d)
        was = image(d)
        if was is not None and not stat.S_ISDIR(was.st_mode):
            found.append(classify(path, "modified", was.st_mode))
        elif was is not None and _opaque(dirfd, d):  # judged by its place
            found.append(classify(path, "modified", None))
    dirnames[:] = keep
    for name in filenames:
        path = f"{base}/{name}"
        if path in skip or mine(path):
            continue
        st = os.lstat(name, dir_fd=dirfd)
        was = image(name)
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:  # a whiteout
            if was is not None:
                found.append(classify(path, "removed", was.st_mode))
        elif was is None:
            found.append(classify(path, "added", st.st_mode, in_image))
        else:
            found.append(classify(path, "modified", st.st_mode, was=was.st_mode))
    # In HOME, only the image's own code, changed.
    found[mark:] = [c for c in found[mark:] if not home(c.path) or tamper.kept_in_home(c)]
    return len(filenames) + len(dirnames)


def _opaque(dirfd: int, name: str) -> bool:
    """An overlay directory made anew over the image's (its old contents hidden)."""
    for attr in ("user.overlay.opaque", "trusted.overlay.opaque"):
        try:
            if os.getxattr(f"/proc/self/fd/{dirfd}/{name}", attr, follow_symlinks=False) == b"y":
                return True
        except OSError:
            continue
    return False
