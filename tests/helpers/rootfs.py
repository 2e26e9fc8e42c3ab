"""A rootfs cache of a test module's own, for image-mode tests."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def private_rootfs_dir(prefix: str) -> Iterator[Path]:
    """A fresh CRUCIBLE_ROOTFS_DIR for the block, removed after it. Not under pytest's
    0700 base dir: the image uid (hostuid.IMAGE_UID, when we are root) must search every
    directory on the way to the trees."""
    d = Path("/tmp") / f"{prefix}-{secrets.token_hex(8)}"
    d.mkdir(mode=0o711)
    old = os.environ.get("CRUCIBLE_ROOTFS_DIR")
    os.environ["CRUCIBLE_ROOTFS_DIR"] = str(d)
    try:
        yield d
    finally:
        if old is None:
            os.environ.pop("CRUCIBLE_ROOTFS_DIR", None)
        else:
            os.environ["CRUCIBLE_ROOTFS_DIR"] = old
        shutil.rmtree(d, ignore_errors=True)
