"""A local build on a host with cgroups in hybrid mode (v1 controllers, and a cgroup2
hierarchy with controllers of its own at /sys/fs/cgroup/unified): rootless crun refuses
every RUN step there ("cgroups in hybrid mode not supported"), so the build's own mount
namespace drops that mount (buildiso.run_build), and the host keeps it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crucible.sandboxes.local import buildiso

UNIFIED = Path(buildiso._HYBRID)  # the mount a build drops


def _hybrid_mounts(mountinfo: str) -> list[str]:
    return [ln for ln in mountinfo.splitlines() if f" {UNIFIED} " in ln and " - cgroup2 " in ln]


def _host_is_hybrid() -> bool:
    try:
        return bool(_hybrid_mounts(Path("/proc/self/mountinfo").read_text())) and bool(
            (UNIFIED / "cgroup.controllers").read_text().split()
        )
    except OSError:
        return False


@pytest.mark.skipif(os.geteuid() != 0, reason="the build's namespaces are made by root")
@pytest.mark.skipif(not _host_is_hybrid(), reason="this host's cgroups are not in hybrid mode")
async def test_a_build_never_sees_a_hybrid_hosts_cgroup2_mount(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    rc = await buildiso.run_build(["cat", "/proc/self/mountinfo"], False, log, 30)
    inside = log.read_text()
    assert rc == 0, inside
    assert " / / " in inside and not _hybrid_mounts(inside), inside  # it ran; no cgroup2 there
    assert _host_is_hybrid()  # the host's own mount is untouched
