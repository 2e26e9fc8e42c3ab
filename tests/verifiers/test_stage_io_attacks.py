"""Attacks on the io stage, each run by a hostile submission in a real io sandbox (real
bwrap, real cgroups, a real listener on the host's loopback): what it may read, reach,
write and leave behind, and what happens when it exhausts its limits. The host must be
untouched, crucible must not crash, and the case must fail (the attempt's 0)."""

from __future__ import annotations

import asyncio
import contextlib
import glob
import json
import os
import re
import secrets
import socket
import sysconfig
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tests.verifiers.test_stage_io import GOOD, io_task, run_io

import crucible
import crucible.verifiers.stages.io.run as iorun
from crucible.sandboxes.hostnet import host_ipv4
from crucible.sandboxes.local import hostuid
from crucible.sandboxes.local.cgroups import detect
from crucible.sandboxes.local.oneshot import IO_UID_BASE, OneShotResult
from crucible.verifiers.stages.io.env import PYTHON, SRC, VERSION

ROOT = os.geteuid() == 0
LIMITS = iorun.Limits(timeout=60, memory_mb=512, pids=128, cpus=2.0, storage_mb=64,
                      output_cap=1 << 20)  # fmt: skip
# A Modal program whose entrypoint runs PROBE (with `report` to fill) and prints the
# report as its output.
HOSTILE = """import errno, json, os, socket, subprocess, sys, time
import modal

app = modal.App("hostile")


@app.function()
def noop() -> int:
    return 0


def attempt(fn):
    try:
        return ["ok", repr(fn())[:300]]
    except OSError as exc:
        return ["error", errno.errorcode.get(exc.errno or 0, type(exc).__name__)]
    except BaseException as exc:
        return ["error", type(exc).__name__]


@app.local_entrypoint()
def main() -> None:
    report = {}
PROBE
    print(json.dumps(report))
"""


def hostile(probe: str) -> str:
    body = "\n".join("    " + line for line in probe.strip().splitlines())
    return HOSTILE.replace("PROBE", body)


async def run_hostile(
    tmp: Path, probe: str, stdin: str = ""
) -> tuple[dict[str, Any], OneShotResult]:
    path = tmp / f"sub-{secrets.token_hex(3)}" / "main.py"
    path.parent.mkdir(parents=True)
    path.write_text(hostile(probe))
    job = {"mode": "program", "program": "/app/main.py", "entrypoint": "main", "args": []}
    ran = await iorun.run_submission({"/app/main.py": path}, job, stdin, {}, LIMITS)
    assert ran.code == 0, ran.stderr.decode()[-2000:]
    return json.loads(ran.stdout.decode().strip().splitlines()[-1]), ran


def hostile_run(tmp: Path, probe: str) -> tuple[dict[str, Any], OneShotResult]:
    return asyncio.run(run_hostile(tmp, probe))


# -- reading and reaching ------------------------------------------------------------


def test_nothing_of_the_host_is_readable_but_the_userland(tmp_path: Path) -> None:
    # world-readable on the host (a uid of the host could read it): only the mounts hide it
    secret_dir = Path(tempfile.mkdtemp(prefix="io-secret-"))
    secret_dir.chmod(0o755)
    secret = secret_dir / "token.txt"
    secret.write_text("host-secret")
    secret.chmod(0o644)
    site = sysconfig.get_paths()["purelib"]
    try:
        report, _ = hostile_run(
            tmp_path,
            f"""
report["root"] = attempt(lambda: os.listdir("/root"))
report["shadow"] = attempt(lambda: open("/etc/shadow").read())
report["secret"] = attempt(lambda: open({str(secret)!r}).read())
report["secret_dir"] = attempt(lambda: os.listdir({str(secret_dir)!r}))
report["host_site"] = attempt(lambda: os.listdir({site!r}))
report["top"] = sorted(os.listdir("/"))
report["etc"] = sorted(os.listdir("/etc"))
report["work"] = sorted(os.listdir("/work"))
report["env"] = sorted(os.environ)
""",
        )
    finally:
        secret.unlink()
        secret_dir.rmdir()
    for key in ("root", "shadow", "secret", "secret_dir", "host_site"):
        assert report[key] == ["error", "ENOENT"], (key, report[key])
    # the read-only root: the userland, the curated /etc, the runtime, the run's own tmpfs
    assert set(report["top"]) <= {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32",
                                  "etc", "proc", "dev", "tmp", "work", "opt"}  # fmt: skip
    assert "shadow" not in report["etc"] and "passwd" in report["etc"]
    assert report["work"] == ["src", "state"]  # its files and the runtime's state, no more
    assert not {"CRUCIBLE_SANDBOX_DIR", "PYTEST_CURRENT_TEST"} & set(report["env"])


async def test_the_hosts_loopback_is_not_reachable(tmp_path: Path) -> None:
    # Listeners of the test's own, on the host's loopback and on each of this machine's
    # addresses: no probe ever names another machine's address.
    listeners = []
    for addr in ["127.0.0.1", *host_ipv4()]:
        listener = socket.socket()
        listener.bind((addr, 0))
        listener.listen(8)
        listener.setblocking(False)
        listeners.append(listener)
    port = listeners[0].getsockname()[1]
    others = [s.getsockname() for s in listeners[1:]]
    try:
        report, _ = await run_hostile(
            tmp_path,
            f"""
report["host"] = attempt(lambda: socket.create_connection(("127.0.0.1", {port}), timeout=5))
report["out"] = [attempt(lambda: socket.create_connection(a, timeout=5)) for a in {others!r}]
report["ifaces"] = [name for _, name in socket.if_nameindex()]
""",
        )
        for listener in listeners:
            with pytest.raises(BlockingIOError):
                listener.accept()  # nothing ever connected to the host's listeners
    finally:
        for listener in listeners:
            listener.close()
    assert report["host"] == ["error", "ECONNREFUSED"]  # its own loopback
    assert all(r[0] == "error" for r in report["out"])
    assert report["ifaces"] == ["lo"]


# -- writing and planting ------------------------------------------------------------


def test_the_runtime_environment_is_read_only_and_nothing_carries_over(
    tmp_path: Path,
) -> None:
    pkg = f"{SRC}/crucible/planted.py"
    site = f"{PYTHON}/lib/{VERSION}/site-packages/sitecustomize.py"
    stdlib = f"{PYTHON}/lib/{VERSION}/json/__init__.py"
    first, _ = hostile_run(
        tmp_path,
        f"""
report["pkg"] = attempt(lambda: open({pkg!r}, "w").write("x"))
report["site"] = attempt(lambda: open({site!r}, "w").write("raise SystemExit(7)"))
report["stdlib"] = attempt(lambda: open({stdlib!r}, "a").write("x"))
report["tmp"] = attempt(lambda: open("/tmp/sitecustomize.py", "w").write("raise SystemExit(7)"))
report["work"] = attempt(lambda: open("/work/planted.py", "w").write("x"))
report["usr"] = attempt(lambda: open("/usr/lib/planted", "w").write("x"))
report["etc"] = attempt(lambda: open("/etc/planted", "w").write("x"))
report["usr_swap"] = attempt(lambda: os.rename("/usr", "/usr-old"))
report["root_dir"] = attempt(lambda: os.mkdir("/planted"))
report["bin_link"] = attempt(lambda: (os.unlink("/bin"), os.symlink("/work", "/bin")))
""",
    )
    for key in ("pkg", "site", "stdlib", "usr", "etc"):
        # read-only mounts (and files of an owner it does not map)
        assert first[key] in (["error", "EROFS"], ["error", "EACCES"]), (key, first[key])
    assert first["usr_swap"] == ["error", "EBUSY"]  # a mount point stays where it is
    assert first["tmp"][0] == first["work"][0] == "ok"  # its own tmpfs...
    # the submission's root is its own too (for Volume links)
    assert first["root_dir"][0] == first["bin_link"][0] == "ok"
    second, _ = hostile_run(
        tmp_path,
        """
seen = ("/tmp/sitecustomize.py", "/work/planted.py", "/planted")
report["seen"] = [p for p in seen if os.path.exists(p)]
report["bin"] = os.readlink("/bin")
report["sitecustomize"] = attempt(lambda: __import__("sitecustomize").__file__)
""",
    )
    assert second["seen"] == []  # ...which the next run never sees
    assert second["bin"] == "usr/bin"
    assert second["sitecustomize"] == ["error", "ModuleNotFoundError"]
    host_pkg = Path(crucible.__file__).parent
    assert not (host_pkg / "planted.py").exists()
    assert not Path(sysconfig.get_paths()["purelib"], "sitecustomize.py").exists()
    assert not Path("/planted").exists() and os.readlink("/bin") == "usr/bin"


# -- processes -----------------------------------------------------------------------


def _procs_with(marker: str) -> list[int]:
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if marker.encode() in Path(entry.path, "cmdline").read_bytes():
                    out.append(int(entry.name))
            except OSError:
                continue
    return out


@pytest.mark.skipif(not ROOT, reason="the per-run host uid is for crucible run as root")
def test_processes_run_unprivileged_and_none_outlives_the_run(tmp_path: Path) -> None:
    marker = f"iosb-orphan-{secrets.token_hex(4)}"
    probe = f"""
subprocess.Popen(["/bin/sh", "-c", "sleep 600; : {marker}"], start_new_session=True)
deadline = time.monotonic() + 50  # timing-ok: the hostile program inside the sandbox
while not os.path.exists("/tmp/go") and time.monotonic() < deadline:  # timing-ok: inside
    time.sleep(0.05)  # timing-ok: the hostile program polls for its release
report["go"] = os.path.exists("/tmp/go")
"""
    box: dict[str, Any] = {}
    run = threading.Thread(target=lambda: box.update(r=hostile_run(tmp_path, probe)))
    run.start()
    while not (found := _procs_with(marker)) and run.is_alive():
        time.sleep(0.05)  # timing-ok: polls the host until the orphan shows up (bounded by the run)
    assert found, "the orphan never appeared"
    pid = found[0]
    status = Path(f"/proc/{pid}/status").read_text()
    uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
    groups = next(line for line in status.splitlines() if line.startswith("Groups:")).split()[1:]
    with hostuid.files_as((int(uids[0]), int(uids[0]))):  # a tmpfs of its user namespace
        Path(f"/proc/{pid}/root/tmp/go").write_text("")  # let the entrypoint end
    run.join()
    report, ran = box["r"]
    assert report["go"] is True
    assert all(int(u) >= IO_UID_BASE for u in uids) and groups == []
    assert ran.host_uid == int(uids[0])
    assert _procs_with(marker) == []  # the orphan left the session; it is gone anyway
    # nothing of its uid runs; bwrap's pid 1 may stay a zombie until the host's init reaps it
    assert not [p for p in _pids_of(ran.host_uid) if "State:\tZ" not in _status(p)]


def _status(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "State:\tZ (gone)"


def _pids_of(uid: int) -> list[int]:
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if os.stat(entry.path).st_uid == uid:
                    out.append(int(entry.name))
            except OSError:
                continue
    return out


# -- limits, through the stage: the case fails, the host and crucible go on ---------------

FORK_BOMB = GOOD.replace(
    'xs = [float(a) for a in xs.split(",")]',
    "import os\n    while True:\n        try:\n            os.fork()\n        except OSError:\n            pass",
)
MEMORY_HOG = GOOD.replace(
    'xs = [float(a) for a in xs.split(",")]', 'hog = [b"x" * (64 << 20) for _ in range(64)]'
)
FLOOD = GOOD.replace(
    'xs = [float(a) for a in xs.split(",")]',
    "import sys\n    for _ in range(100):\n        sys.stdout.write('x' * (1 << 20))",
)
ROOT_HOG = GOOD.replace(
    'xs = [float(a) for a in xs.split(",")]',
    'hog = open("/hog", "wb")\n    for _ in range(64):\n        hog.write(b"x" * (8 << 20))',
)
LIMITED = "memory_mb = 256\npids_limit = 64\noutput_limit_kb = 1024\n"


def _io_pids() -> list[int]:
    """pids.current of this process's io runs (cgroup v1 layout; [] elsewhere)."""
    out = []
    for f in glob.glob(f"/sys/fs/cgroup/pids/crucible/crucible-io.{os.getpid()}-*/x/pids.current"):
        with contextlib.suppress(OSError, ValueError):
            out.append(int(Path(f).read_text()))
    return out


def test_fork_bomb_fails_its_case_within_the_pids_limit(tmp_path: Path) -> None:
    task = io_task(tmp_path / "t", extra=LIMITED, timeout=8)
    box: dict[str, Any] = {}
    run = threading.Thread(
        target=lambda: box.update(r=asyncio.run(run_io(task, tmp_path, FORK_BOMB)))
    )
    run.start()
    peak = 0
    while run.is_alive():  # the run's process count, seen from the host, while it lasts
        peak = max([peak, *_io_pids()])
        time.sleep(0.05)  # timing-ok: samples the process count while the run lasts
    run.join()
    res = box["r"]
    assert res["components"] == {"pass_rate": 0.0, "all_pass": 0.0}
    assert "timed out after 8.0s" in res["reason"]
    # pids_limit held whenever a sample saw the run; how full a sample found it depends
    # on the machine's load, so no lower bound is asserted
    assert peak <= 64
    # and the next run is fine
    res = asyncio.run(run_io(io_task(tmp_path / "g"), tmp_path, GOOD))
    assert res["components"]["all_pass"] == 1.0, res["reason"]


# Forks (each child waits, its other files closed) until refused or 100 are alive, then
# prints how many it got: the count is the output, read back from the case's reason.
FORK_COUNT = GOOD.replace(
    'xs = [float(a) for a in xs.split(",")]',
    """import os
    r, w = os.pipe()
    n = 0
    while n < 100:
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            for fd in range(1024):
                if fd != r:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            os.read(r, 1)  # until the parent's end closes
            os._exit(0)
        n += 1
    print(json.dumps({"sum": n, "n": 0}))
    return""",
)


async def test_forks_stop_at_the_pids_limit(tmp_path: Path) -> None:
    """The pids bound without sampling: the run itself counts the processes it got."""
    res = await run_io(io_task(tmp_path / "t", extra=LIMITED), tmp_path, FORK_COUNT)
    reasons = [c["reason"] for c in res["details"]["cases"]]
    got = [
        int(m.group(1))
        for r in reasons
        if (m := re.search(r"\$\.sum: expected [\d.]+, got (\d+)", r))
    ]
    assert len(got) == 2, reasons  # each case ran to its print
    assert all(0 < n < 64 for n in got), got  # pids_limit = 64, the runtime's own included


async def test_memory_hog_fails_its_case_out_of_memory(tmp_path: Path) -> None:
    res = await run_io(io_task(tmp_path / "t", extra=LIMITED), tmp_path, MEMORY_HOG)
    assert res["components"] == {"pass_rate": 0.0, "all_pass": 0.0}
    reasons = [c["reason"] for c in res["details"]["cases"]]
    assert all("ran out of memory (256 MB)" in r for r in reasons), reasons


@pytest.mark.skipif(not detect().usable, reason="no memory cgroup to charge the root's pages to")
def test_filling_the_writable_root_fails_its_case_out_of_memory(tmp_path: Path) -> None:
    """512 MiB written to the submission's root (256 MB allowed): the root is sized (1 MiB,
    where bwrap has --size) and its pages are charged to the run's memory cgroup, so the
    write or the run fails, the case fails, and nothing is left."""
    res = asyncio.run(run_io(io_task(tmp_path / "t", extra=LIMITED), tmp_path, ROOT_HOG))
    assert res["components"] == {"pass_rate": 0.0, "all_pass": 0.0}
    reasons = [c["reason"] for c in res["details"]["cases"]]
    bounded = ("ran out of memory (256 MB)", "No space left on device")
    assert all(any(b in r for b in bounded) for r in reasons), reasons
    assert not Path("/hog").exists()


async def test_a_100_mib_flood_is_cut_and_fails_its_case(tmp_path: Path) -> None:
    res = await run_io(io_task(tmp_path / "t", extra=LIMITED), tmp_path, FLOOD)
    assert res["components"] == {"pass_rate": 0.0, "all_pass": 0.0}
    assert "output too large (over 1024 KiB on stdout)" in res["reason"]


async def test_the_reference_and_expected_output_are_not_in_the_submissions_sandbox(
    tmp_path: Path,
) -> None:
    """The reference prints a token only it knows; a submission that finds the reference
    (or its output) anywhere it can read would print the expected output and pass."""
    token = secrets.token_hex(8)
    reference = f'import json\nprint(json.dumps({{"sum": 0, "n": 0, "t": "{token}"}}))\n'
    seek = """import json, os, re
    found = None
    for top in ("/work", "/tmp", "/opt/crucible/src", "/etc", "/dev/shm"):
        for root, _, files in os.walk(top):
            for name in files:
                try:
                    text = open(os.path.join(root, name), errors="ignore").read(1 << 20)
                except OSError:
                    continue
                hit = re.search("TOKEN_PREFIX[0-9a-f]{10}", text)
                found = hit.group(0) if hit else found
    print(json.dumps({"sum": 0, "n": 0, "t": found}))"""
    probe = GOOD.replace(
        'xs = [float(a) for a in xs.split(",")]\n    print("logging before the result")\n'
        '    print(json.dumps({"sum": add.remote(xs) + 1e-12, "n": len(xs)}))',
        seek.replace("TOKEN_PREFIX", token[:6]),
    )
    assert probe != GOOD
    res = await run_io(io_task(tmp_path / "t", reference=reference), tmp_path, probe)
    assert res["components"]["all_pass"] == 0.0
    # the outputs differ (had it found the token, only the missing GPU evidence would)
    assert f"$.t: expected '{token}', got null" in res["reason"], res["reason"]
