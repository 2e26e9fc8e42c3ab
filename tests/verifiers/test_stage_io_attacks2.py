"""More attacks on the io stage, each by a hostile submission in a real io sandbox: trading
a failed case for an excluded error with a forged "needs a GPU", crashing the host's
reading of the trace, Volume mount paths aimed at the sandbox's own mounts, the
writable root without cgroups, and reaching the reference's run from the submission's.
(test_stage_io_attacks.py has the first set and the helpers.)"""

from __future__ import annotations

import asyncio
import json
import os
import resource
from pathlib import Path

import pytest
from tests.verifiers.test_stage_io import GOOD, REFERENCE, io_task, run_io
from tests.verifiers.test_stage_io_attacks import LIMITS, hostile, hostile_run
from tests.verifiers.test_stage_io_modal import CLI_PATH, FAKE_CLI, cloud  # noqa: F401 (fixture)
from tests.verifiers.test_stages import submitted

import crucible.sandboxes.local.oneshot.run as oneshot
import crucible.verifiers.stages.io.run as iorun
import crucible.verifiers.stages.io.stage as io
from crucible.sandboxes.base import SandboxSpec
from crucible.sandboxes.local.bwrap import ROOT_BYTES, bwrap_features, find_bwrap
from crucible.sandboxes.local.cgroups import CgroupSupport
from crucible.sandboxes.local.provider import LocalProvider, LocalSandbox
from crucible.tasks.models import Task
from crucible.verifiers.pipeline import declared
from crucible.verifiers.stages.base import StageContext
from crucible.verifiers.stages.io import IoStage
from crucible.verifiers.stages.io.cases import REFERENCE_OUTPUTS
from crucible.verifiers.stages.io.trace import MAX_WARNINGS, host_trace

COMPUTE = 'xs = [float(a) for a in xs.split(",")]'
# the submission's own process appends to the runtime's event log, which the driver
# hands the host as the trace: "an input of add needed a GPU"
FORGE_GPU = (
    "from crucible.modalrt.context import emit\n"
    '    emit("input", function="add", via="remote", ok=False, needs_gpu=True)\n    '
)


def plain_task(root: Path, reference: str = REFERENCE) -> Task:
    """A task whose io stage never asks for a GPU."""
    return io_task(root, reference=reference, evidence="[]")


# -- a forged "needs a GPU": a failed case must not become an excluded error ----------------


async def test_a_forged_gpu_claim_does_not_excuse_a_wrong_answer(tmp_path: Path) -> None:
    """Before: any trace saying "needs a GPU" raised resources_unavailable (left out of
    the mean), so a wrong answer plus one forged event traded the 0 for a gap. Now the
    program's own events never reach the trace (the dispatching side writes it), and a
    real "needs a GPU" failure is the attempt's wherever the task does not need one."""
    wrong = GOOD.replace(COMPUTE, FORGE_GPU + COMPUTE).replace('"n": len(xs)', '"n": -1')
    res = await run_io(plain_task(tmp_path / "t"), tmp_path, wrong)
    assert res["components"] == {"pass_rate": 0.0, "all_pass": 0.0}
    case = res["details"]["cases"][0]
    assert "$.n: expected 2, got -1" in case["reason"] and "gpu_claim_refused" not in case
    # the honest form (a GPU function failing as CUDA code does here) is refused alike
    cuda = GOOD.replace("return sum(xs)", 'raise RuntimeError("CUDA driver not found")')
    res = await run_io(plain_task(tmp_path / "c"), tmp_path, cuda)
    assert (
        res["components"]["all_pass"] == 0.0 and "gpu_claim_refused" in res["details"]["cases"][0]
    )


async def test_a_gpu_claim_beside_a_gpu_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forged claim changes nothing, in a task that asks for gpu evidence too, with or
    without GPUs here (the host's own count is what is switched; the run itself gets no
    GPU); nor can the program say a GPU ran its inputs on a machine without one."""
    task = io_task(tmp_path / "t")  # require_evidence = ["gpu"]
    wrong = GOOD.replace(COMPUTE, FORGE_GPU + COMPUTE).replace('"n": len(xs)', '"n": -1')
    res = await run_io(task, tmp_path, wrong)
    assert res["components"]["all_pass"] == 0.0
    last = 'print(json.dumps({"sum": add.remote(xs) + 1e-12, "n": len(xs)}))'
    forged = FORGE_GPU.replace("needs_gpu=True", 'gpu_backing="gpu"')
    backed = GOOD.replace(last, last + "\n    " + forged)  # after the real input
    res = await run_io(task, tmp_path, backed)
    assert res["details"]["cases"][0]["gpu_backing"] == {"add": "cpu"}
    monkeypatch.setattr(io, "gpu_count", lambda: 1)
    res = await run_io(task, tmp_path, wrong)
    assert res["components"]["all_pass"] == 0.0
    assert "gpu_claim_refused" not in res["details"]["cases"][0]


# -- the trace's bytes: nesting that would crash the host's reading of it -------------------


async def test_a_deeply_nested_trace_event_is_dropped_not_a_crash(tmp_path: Path) -> None:
    """An event ~990 levels deep parsed fine in a worker thread, then the judge's summary
    (json.dumps on the event loop's deeper stack) raised RecursionError: the stage crashed."""
    deep = (  # written raw: the submission's own json could not nest it that deep either
        "from crucible.modalrt.context import config\n"
        '    nest = "[" * 985 + "]" * 985\n'
        '    line = \'{"kind": "function", "name": "add", "resources": {"gpu": %s}}\\n\' % nest\n'
        '    open(config().events_path, "a").write(line)\n'
        "    "
    )
    res = await run_io(io_task(tmp_path / "t"), tmp_path, GOOD.replace(COMPUTE, deep + COMPUTE))
    assert res["components"] == {"pass_rate": 1.0, "all_pass": 1.0}, res["reason"]


def test_trace_image_warnings_cannot_amplify_into_host_memory() -> None:
    """Each character of a string `image_warnings` became one warning string on the host:
    ~4 MiB of side channel (the cap) held ~4.2 million strings, ~400 MiB, per case. (The
    side channel is the driver's now, but the driver shares the program's sandbox: the
    host still reads it as hostile.)"""
    line = json.dumps(
        {"kind": "function", "name": "noop", "resources": {"image_warnings": "w" * 16000}}
    )
    raw = (line + "\n").encode() * 250
    trace = host_trace(raw, "/app/main.py", "main", 0)
    assert len(trace.image_warnings) <= 250 * MAX_WARNINGS  # was 4,000,000


async def test_hostile_output_fails_its_case_without_crashing_the_stage(tmp_path: Path) -> None:
    """An output nested past the parser's depth (RecursionError) and a number past any
    float (OverflowError) crashed the host's comparison: verifier_failed, every case lost."""
    hostile = GOOD.replace(
        'print(json.dumps({"sum": add.remote(xs) + 1e-12, "n": len(xs)}))',
        'add.remote(xs)\n    if len(xs) > 1:\n        print("[" * 5000 + "]" * 5000)\n'
        '    else:\n        print(json.dumps({"sum": 10**400, "n": 1}))',
    )
    res = await run_io(io_task(tmp_path / "t"), tmp_path, hostile)
    assert res["components"] == {"pass_rate": 0.0, "all_pass": 0.0}
    deep, huge = (c["reason"] for c in res["details"]["cases"])
    assert "nested too deeply" in deep
    assert huge.startswith("$.sum: expected 4.0, got 1000"), huge


@pytest.mark.skipif(
    resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 4096, reason="a hard fd limit under 4096"
)
async def test_a_submission_of_2000_files_is_graded_under_a_soft_fd_limit_of_1024(
    tmp_path: Path,
) -> None:
    """A folder submission may hold 2,000 files (the collection's cap), each an fd until
    bwrap copies it: under the common soft limit of 1,024 the run failed halfway, as a
    crash (verifier_failed) or a sandbox_failed, by how many files the attempt sent."""
    sub = submitted(tmp_path, GOOD)
    for i in range(2000):
        extra = tmp_path / "sub" / f"pkg{i % 8}" / f"m{i}.py"
        extra.parent.mkdir(exist_ok=True)
        extra.write_text("x = 1\n")
        sub.files[f"/app/pkg{i % 8}/m{i}.py"] = extra
    task = io_task(tmp_path / "t")
    (stage,) = declared(task)[1]
    assert isinstance(stage, IoStage)
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, limit[1]))
    try:
        res = await stage.run(StageContext(task, sub, {"reward": 1.0}))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, limit)
    assert res.components == {"pass_rate": 1.0, "all_pass": 1.0}, res.reason


@pytest.mark.skipif(
    resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 4096, reason="a hard fd limit under 4096"
)
async def test_a_local_sandbox_made_past_fd_1023_is_still_seen_alive(tmp_path: Path) -> None:
    """With the soft limit raised (above), a trial's sandbox made while many fds are open
    gets a pidfd past 1023, which select() refuses: its liveness check, asked whenever
    grading fails, raised ValueError instead of saying whose fault that was."""
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, limit[1]))
    held = [os.open("/dev/null", os.O_RDONLY) for _ in range(1100)]
    provider = LocalProvider()
    try:
        await provider.preflight()
        box = await provider.create(SandboxSpec(job_id="fds", memory_mb=256, pids_limit=64))
        assert isinstance(box, LocalSandbox)
        try:
            assert box._init_fd > 1023  # the premise
            assert await box.alive()
        finally:
            await box.close()
        assert not await box.alive()
    finally:
        await provider.aclose()
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, limit)


# -- Volume mount paths: links on the run's own root, never anything of the host -----------

VOLUMES = """import json, os
import modal

app = modal.App("volumes")
PATHS = ["/work", "/work/state", "/proc/self", "/", "/bin/x", "/lib64/ld", "/usr/lib/x",
         "/etc/x", "data", "../../x", "/tmp/v", "/dev/shm/v", "/work/src/app/main.py"]
fns = {}
for i, p in enumerate(PATHS):
    def f(p=p) -> str:
        return os.path.realpath("/" + p.strip("/"))
    f.__name__ = f.__qualname__ = f"f{i}"
    vol = modal.Volume.from_name(f"v{i}", create_if_missing=True)
    fns[p] = app.function(volumes={p: vol}, serialized=True)(f)


@app.local_entrypoint()
def main() -> None:
    report = {}
    for p, fn in fns.items():
        try:
            report[p] = ["ok", fn.remote()]
        except Exception as exc:
            report[p] = ["error", type(exc).__name__]
    report["top"] = sorted(os.listdir("/"))
    report["bin"] = os.readlink("/bin")
    print(json.dumps(report))
"""


def test_volume_mount_paths_stay_in_the_runs_own_root(tmp_path: Path) -> None:
    host_top, host_work = sorted(os.listdir("/")), sorted(os.listdir("/work"))
    path = tmp_path / "sub" / "main.py"
    path.parent.mkdir(parents=True)
    path.write_text(VOLUMES)
    job = {"mode": "program", "program": "/app/main.py", "entrypoint": "main", "args": []}
    ran = asyncio.run(iorun.run_submission({"/app/main.py": path}, job, "", {}, LIMITS))
    assert ran.code == 0, ran.stderr.decode()[-2000:]
    report = json.loads(ran.stdout.decode().strip().splitlines()[-1])
    # a path that exists (its own mounts, /proc, the root) or lies on a read-only mount: refused
    for p in ("/work", "/work/state", "/proc/self", "/", "/bin/x", "/lib64/ld", "/usr/lib/x",
              "/etc/x", "/work/src/app/main.py"):  # fmt: skip
        assert report[p] == ["error", "MountError"], (p, report[p])
    # relative and `..` paths are made absolute; every link leads into the run's state
    for p in ("data", "../../x", "/tmp/v", "/dev/shm/v"):
        assert report[p][0] == "ok" and report[p][1].startswith("/work/state/volumes/"), p
    assert {"data", "x"} <= set(report["top"]) and report["bin"] == "usr/bin"
    # the host's root and /work are as they were; a later run starts from a bare root
    assert sorted(os.listdir("/")) == host_top and sorted(os.listdir("/work")) == host_work
    later, _ = hostile_run(tmp_path, 'report["top"] = sorted(os.listdir("/"))')
    assert not {"data", "x"} & set(later["top"])


# -- without cgroups: the writable root and the run's other limits still hold --------------

SIZED = (b := find_bwrap()) is not None and "--size" in bwrap_features(b.path)


@pytest.mark.skipif(not SIZED, reason="this bwrap cannot size a tmpfs (--size, 0.10+)")
def test_without_cgroups_the_writable_root_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(oneshot, "detect", lambda: CgroupSupport("none"))
    report, ran = hostile_run(
        tmp_path,
        """
def fill(path):
    n = 0
    try:
        with open(path, "wb") as f:
            for _ in range(512):
                f.write(b"x" * (1 << 20))
                f.flush()
                n += 1 << 20
    except OSError as exc:
        return [n, errno.errorcode.get(exc.errno or 0)]
    return [n, "ok"]
report["root"] = fill("/hog")
report["tmp"] = fill("/tmp/hog")
report["shm"] = fill("/dev/shm/hog")
report["memory"] = attempt(lambda: len(bytearray(1 << 30)))
""",
    )
    assert ran.host_uid != 0 or os.geteuid() != 0
    assert report["root"][0] <= ROOT_BYTES and report["root"][1] == "ENOSPC"
    assert report["tmp"][0] <= 64 << 20 and report["tmp"][1] == "ENOSPC"  # storage_mb
    assert report["shm"][0] <= 64 << 20 and report["shm"][1] == "ENOSPC"
    assert report["memory"] == ["error", "MemoryError"]  # ulimit -v: 512 MB


def test_without_cgroups_the_runs_memory_is_its_processes_sum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ulimit -v` bounds each process, not the run: 4 processes of 400 MB each held
    1.6 GB under memory_mb = 512. The host's watchdog (oneshotmem.py) ends the run."""
    monkeypatch.setattr(oneshot, "detect", lambda: CgroupSupport("none"))
    path = tmp_path / "sub" / "main.py"
    path.parent.mkdir(parents=True)
    path.write_text(
        hostile("""
import multiprocessing as mp
def hold(q):
    b = bytearray(400 << 20)  # under ulimit -v (512 MB), and touched: resident
    for i in range(0, len(b), 4096):
        b[i] = 1
    q.put(len(b))
    time.sleep(30)  # timing-ok: holds its memory until it is ended
ctx = mp.get_context("fork")
q = ctx.Queue()
for _ in range(4):
    ctx.Process(target=hold, args=(q,)).start()
report["held_mb"] = sum(q.get(timeout=60) for _ in range(4)) >> 20
""")
    )
    job = {"mode": "program", "program": "/app/main.py", "entrypoint": "main", "args": []}
    ran = asyncio.run(iorun.run_submission({"/app/main.py": path}, job, "", {}, LIMITS))
    assert ran.oom_kills == 1 and ran.code != 0 and b"held_mb" not in ran.stdout
    assert not ran.timed_out


# -- the reference's run: nothing of the submission's reaches it --------------------------

VIEW = """import json, os
seen = {d: sorted(os.listdir(d)) for d in ("/tmp", "/dev/shm")}
seen["top"] = sorted(os.listdir("/"))
seen["procs"] = len([p for p in os.listdir("/proc") if p.isdigit()])
print(json.dumps(seen))
"""
POISON = """import os, subprocess
    for d in ("/tmp", "/dev/shm", "/"):
        open(os.path.join(d, "poison"), "w").write("x")
    subprocess.Popen(["sleep", "600"], start_new_session=True)
    subprocess.Popen(["sh", "-c", "while :; do kill -9 -1; done"], start_new_session=True)
    print(json.dumps({"tmp": [], "shm": [], "top": [], "procs": 0}))
    return
    """


async def test_the_reference_never_sees_the_submissions_run(tmp_path: Path) -> None:
    """The reference runs before each case's submission, in a sandbox of its own: case 0's
    submission plants files and leaves processes (one killing all it can see); case 1's
    reference still sees a bare sandbox, so the task is not made invalid."""
    REFERENCE_OUTPUTS.clear()
    task = plain_task(tmp_path / "t", reference=VIEW)
    res = await run_io(task, tmp_path, GOOD.replace(COMPUTE, POISON + COMPUTE))
    assert res["components"]["all_pass"] == 0.0  # graded: a failed case, not task_invalid
    views = [json.loads(v) for v in REFERENCE_OUTPUTS._data.values()]
    assert len(views) == 2 and views[0] == views[1]
    assert "poison" not in views[1]["top"] and views[1]["/tmp"] == views[1]["/dev/shm"] == []


# -- real Modal (the SDK stand-in): a sandbox the submission ends is its own doing --------

ENDS_ITS_SANDBOX = """import os, subprocess, sys, time
    watcher = '''import os, time
def cmdlines():
    for p in os.listdir("/proc"):
        try:
            yield int(p), open(f"/proc/{p}/cmdline", "rb").read()
        except (OSError, ValueError):
            pass
while not any(b"kept " + b"appearing" in c for p, c in cmdlines() if p != os.getpid()):
    time.sleep(0.002)  # timing-ok: the attack program polls for the clean-up exec, in its sandbox
for p, c in cmdlines():  # then end the sandbox: its entrypoint, `sleep infinity`
    if c.startswith(b"sleep\\\\0infinity"):
        os.kill(p, 9)
'''
    # unmarked (the clean-up kills what carries the exec's marker), in a session of its own
    env = {k: v for k, v in os.environ.items() if k != "CRUCIBLE_EXEC"}
    subprocess.Popen([sys.executable, "-c", watcher], env=env, start_new_session=True)
    while True:
        time.sleep(1)  # timing-ok: the attack program waits for its timeout, in its sandbox
    """


@pytest.mark.usefixtures("cloud")  # the stand-in behind the provider, the io token set
async def test_a_submission_that_ends_its_modal_sandbox_fails_its_case(tmp_path: Path) -> None:
    """At the exec's timeout Modal kills only its direct process; a watcher it left kills
    the sandbox's entrypoint as the host's clean-up of that exec runs, which then failed:
    SandboxFailed, infrastructure, left out of the mean, instead of the attempt's 0."""
    task = io_task(tmp_path / "task", extra='program = "/app/main.py"\n', timeout=3)
    (stage,) = declared(task)[1]
    assert isinstance(stage, IoStage)
    sub = submitted(tmp_path, GOOD.replace(COMPUTE, ENDS_ITS_SANDBOX + COMPUTE))
    sub.files[CLI_PATH] = tmp_path / "sub" / "fake_modal.py"
    sub.files[CLI_PATH].write_text(FAKE_CLI)
    res = (await stage.run(StageContext(task, sub, {"reward": 1.0}))).model_dump(mode="json")
    assert res["components"] == {"pass_rate": 0.0, "all_pass": 0.0}
    reasons = [c["reason"] for c in res["details"]["cases"]]
    assert all("the Modal sandbox ended during the run" in r for r in reasons), reasons
