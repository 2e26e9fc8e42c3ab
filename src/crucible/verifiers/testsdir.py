"""Several tests folders as the one /tests a grading gets: a multi-step task's tests/, then
the step's own over it (a name in both is the step's), as Harbor 0.25 uploads them one
after the other into /tests (src/harbor/verifier/verifier.py, `Verifier.verify`).

Merged on the host, in a temporary folder, so the sandbox gets one upload, as for a one-step
task: two archive uploads racing the reward folder's reset lost /tests/test.sh now and then
on docker. Task files are copied without following a link (a link is copied as a link, as
upload_dir copies one), and the task folder's size was bounded when it was loaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path


@contextlib.asynccontextmanager
async def one_tests_dir(sources: Sequence[Path]) -> AsyncIterator[Path]:
    """The folder to upload: the only source, or the sources merged in order."""
    if len(sources) == 1:
        yield sources[0]
        return
    tmp = await asyncio.to_thread(tempfile.mkdtemp, prefix="crucible-tests-")
    try:
        merged = Path(tmp) / "tests"
        await asyncio.to_thread(_merge, sources, merged)
        yield merged
    finally:
        await asyncio.to_thread(shutil.rmtree, tmp, True)


def _merge(sources: Sequence[Path], dst: Path) -> None:
    for source in sources:
        _over(source, dst)


def _over(src: Path, dst: Path) -> None:
    """`src`'s entries over `dst`'s (made if missing): a name in both ends up `src`'s."""
    if dst.is_symlink() or (dst.exists() and not dst.is_dir()):
        dst.unlink()
    dst.mkdir(exist_ok=True)
    shutil.copystat(src, dst, follow_symlinks=False)
    with os.scandir(src) as it:
        entries = list(it)
    for entry in entries:
        target = dst / entry.name
        if entry.is_dir(follow_symlinks=False):
            _over(Path(entry.path), target)
            continue
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.is_symlink() or target.exists():
            target.unlink()
        if entry.is_symlink():
            os.symlink(os.readlink(entry.path), target)
        elif entry.is_file(follow_symlinks=False):
            shutil.copy2(entry.path, target, follow_symlinks=False)
