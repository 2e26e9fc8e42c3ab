"""Attacks on the host from inside real image-backed local sandboxes (imagemode.py).

Image mode must hold what host mode holds (test_local_host_safety.py) except the
read-only layout: no process of the sandbox is the host's root (when we are root,
its bwrap runs as hostuid.IMAGE_UID, the owner of the image tree and of the
sandbox's writable layer), the global /proc knobs are covered, and grading's
host-side reset creates what it makes as that owner. The root itself stays
writable (it is the sandbox's private overlay layer).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.sandboxes.test_local_host_safety import _read, assert_all_run_as

from crucible.sandboxes.base import SandboxSpec
from crucible.sandboxes.local import hostuid
from crucible.sandboxes.local.provider import LocalProvider, LocalSandbox
from crucible.verifiers.script import REWARD_DIR, TESTS_DIR, prepare_grading, run_verifier

CORE_PATTERN = "/proc/sys/kernel/core_pattern"


@pytest.fixture
async def sb(buildah: None) -> AsyncIterator[LocalSandbox]:
    p = LocalProvider(userland="image", image_tool="buildah")  # the base image, no Dockerfile
    await p.preflight()
    spec = SandboxSpec(job_id=f"test-ihs-{uuid.uuid4().hex[:8]}", memory_mb=256, pids_limit=128)
    box = await p.create(spec)
    assert isinstance(box, LocalSandbox) and box.image is not None
    yield box
    await box.close()
    await p.aclose()


async def test_image_sandbox_never_runs_as_host_root(sb: LocalSandbox) -> None:
    uid, gid = sb.host_owner
    if os.geteuid() == 0:
        assert (uid, gid) == (hostuid.IMAGE_UID, hostuid.IMAGE_UID)
    assert sb.image is not None
    # The image tree and the writable layer belong to that uid: it is root inside.
    assert {os.stat(layer).st_uid for layer in sb.image.rootfs.layers} == {uid}
    assert os.stat(sb.image.layers / "upper").st_uid == uid
    bg = await sb.exec("nohup sleep 300 >/dev/null 2>&1 & echo $!", timeout=10)
    assert bg.ok
    inside = await sb.exec("id -u; echo x > /etc/agent-was-here && echo wrote-etc", timeout=10)
    assert inside.stdout.split() == ["0", "wrote-etc"]  # root in its own layer, as on docker
    assert_all_run_as(sb, uid, gid)


async def test_image_sandbox_cannot_write_host_kernel_settings(sb: LocalSandbox) -> None:
    before = _read(CORE_PATTERN)
    r = await sb.exec(
        f'v=$(cat {CORE_PATTERN}) && printf "%s\\n" "$v" > {CORE_PATTERN} && echo WROTE; '
        "(exec 3>>/proc/sysrq-trigger) 2>/dev/null && echo TRIGGER; "
        "grep -E ' /proc/(sys|sysrq-trigger) ' /proc/self/mounts",
        timeout=10,
    )
    assert "WROTE" not in r.stdout and "TRIGGER" not in r.stdout, r
    covers = r.stdout.splitlines()
    assert covers and all(" ro," in line or " ro " in line for line in covers), r.stdout
    assert _read(CORE_PATTERN) == before


async def test_image_grading_resets_as_the_sandbox_owner(sb: LocalSandbox, tmp_path: Path) -> None:
    """The agent plants files (one dir locked) in /tests and the reward folder; grading's
    host-side reset empties both and makes what it makes as the sandbox's owner, so the
    tests and the verifier (root inside) own them."""
    plant = (
        f"mkdir -p {TESTS_DIR}/locked {REWARD_DIR} && echo x > {TESTS_DIR}/locked/conftest.py"
        f" && chmod 000 {TESTS_DIR}/locked && echo 1 > {REWARD_DIR}/reward.txt"
        f" && rm -rf {REWARD_DIR} && ln -s /tmp {REWARD_DIR}"
    )
    assert (await sb.exec(plant, timeout=10)).ok
    (tmp_path / "test.sh").write_text(
        f'echo "tests: $(ls -A {TESTS_DIR} | tr "\\n" " ")"; ls -A {REWARD_DIR}; '
        f"stat -c '%u %U' {TESTS_DIR}/test.sh {REWARD_DIR}; echo 0.5 > {REWARD_DIR}/reward.txt\n"
    )
    await sb.kill_all()
    staged = await prepare_grading(sb, tmp_path)
    r = await run_verifier(sb, staged, timeout_sec=30)
    assert r.exit_code == 0, r
    assert r.stdout.splitlines() == ["tests: test.sh ", "0 root", "0 root"], r
    uid = sb.host_owner[0]
    root = f"/proc/{sb.init_pid}/root"
    for path in (f"{root}{TESTS_DIR}", f"{root}{TESTS_DIR}/test.sh", f"{root}{REWARD_DIR}"):
        assert os.stat(path, follow_symlinks=False).st_uid == uid, path
