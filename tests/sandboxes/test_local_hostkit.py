"""The host kit (bash, dash, their loader and libraries for image mode) is made once
per runtime dir; first uses racing in one process (threads) all get a whole kit."""

from __future__ import annotations

import os
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from crucible.sandboxes.local.imagemode import host_kit


def test_racing_first_uses_in_one_process_all_get_a_whole_kit(tmp_path: Path) -> None:
    bash = shutil.which("bash")
    assert bash is not None
    start = threading.Barrier(8)

    def first_use() -> Path:
        start.wait()
        return host_kit(tmp_path, bash)

    with ThreadPoolExecutor(8) as pool:
        kits = list(pool.map(lambda _: first_use(), range(8)))
    assert len(set(kits)) == 1
    kit = kits[0]
    for name in ("bash", "sh", "ld.so", "apt.conf"):
        assert (kit / name).is_file(), name
    assert os.listdir(kit.parent) == [kit.name]  # no half-made kit left beside it
