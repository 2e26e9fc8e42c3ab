"""Attacks on the io stage's evidence and blame (issue 24), each by a hostile submission in
a real io sandbox: a trace forged by the program itself, and a forged "no CUDA here"
that would trade a failed case for an excluded error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.verifiers.test_stage_io import GOOD, io_task, run_io
from tests.verifiers.test_stage_io_attacks import LIMITS

from crucible.errors import ResourcesUnavailable
from crucible.tasks.loader import load_task
from crucible.tasks.models import Task
from crucible.verifiers.stages.io import run as iorun
from crucible.verifiers.stages.io.trace import host_trace

# A port that does no Modal work: it computes the answer in its local entrypoint and
# writes the trace an honest run would leave, through every channel it can find: the
# runtime's emit(), the run's events.jsonl, fd 3, and fd 3 of every process it can see
# (the driver that holds the side channel is its parent).
FORGED = """import json, os
import modal
from crucible.modalrt.context import config, emit

app = modal.App("adder")


@app.function(gpu="T4")
def add(xs: list) -> float:
    return sum(xs)


EVENTS = [
    {"kind": "function", "name": "add", "type": "function", "resources": {"gpu": "T4"}},
    {"kind": "input", "function": "add", "via": "map", "ok": True, "gpu": "T4",
     "gpu_backing": "gpu", "container": 7, "duration_s": 0.1},
]


def forge() -> list:
    reached = []
    for e in EVENTS:
        emit(**e)
    reached.append("emit")
    lines = "".join(json.dumps(e) + "\\n" for e in EVENTS).encode()
    with open(config().events_path, "ab") as log:
        log.write(lines)
    reached.append("events.jsonl")
    try:
        os.write(3, lines)
        reached.append("fd 3")
    except OSError:
        pass
    pids = sorted({os.getppid(), 1, *(int(p) for p in os.listdir("/proc") if p.isdigit())})
    for pid in pids:
        try:
            fd = os.open(f"/proc/{pid}/fd/3", os.O_WRONLY | os.O_APPEND)
        except OSError:
            continue
        try:
            os.write(fd, lines)
            reached.append(f"/proc/{pid}/fd/3")
        except OSError:
            pass
        finally:
            os.close(fd)
    return reached


@app.local_entrypoint()
def main(xs: str) -> None:
    xs = [float(a) for a in xs.split(",")]
    print("reached: " + " ".join(forge()))
    print(json.dumps({"sum": sum(xs) + 1e-12, "n": len(xs)}))
"""
CUDA_MISSING = (
    'raise RuntimeError("CUDA driver initialization failed: Found no NVIDIA driver on your system")'
)


async def test_a_trace_the_program_forges_itself_gains_nothing(tmp_path: Path) -> None:
    """Before: the runtime's event log was the program's own (same uid, same sandbox): its
    emit() calls became the host's trace, and this port, which never calls its function,
    passed every case with gpu evidence (1.0). After: the trace is the dispatching side's,
    which saw no input: 0."""
    res = await run_io(io_task(tmp_path / "t"), tmp_path, FORGED)
    assert res["components"] == {"pass_rate": 0.0, "all_pass": 0.0}, res["reason"]
    assert "did not exercise gpu" in res["reason"]
    case = res["details"]["cases"][0]
    assert case["remote_inputs"] == {} and case["evidence"] == {}
    # the channels it wrote to: its own log only; fd 3 (the driver's) was out of its reach
    job = {"mode": "program", "program": "/app/main.py", "entrypoint": "main",
           "args": ["--xs", "1,2"]}  # fmt: skip
    path = tmp_path / "sub" / "main.py"
    ran = await iorun.run_submission({"/app/main.py": path}, job, "", {}, LIMITS)
    assert ran.code == 0, ran.stderr.decode()[-2000:]
    reached = next(x for x in ran.stdout.decode().splitlines() if x.startswith("reached: "))
    assert reached.split()[1:] == ["emit", "events.jsonl"]
    trace = host_trace(ran.side, "/app/main.py", "main", ran.code)
    assert trace.functions == [] and trace.status == "ok"


async def test_the_honest_port_is_traced_by_the_dispatching_side(tmp_path: Path) -> None:
    """The same port calling its function: the broker's record shows the input, in a
    container of its own (not the runner's pid), with the GPU request it was started with."""
    job = {"mode": "program", "program": "/app/main.py", "entrypoint": "main",
           "args": ["--xs", "1,2"]}  # fmt: skip
    path = tmp_path / "sub" / "main.py"
    path.parent.mkdir(parents=True)
    path.write_text(GOOD.replace('print("logging before the result")', "list(add.map([xs]))"))
    ran = await iorun.run_submission({"/app/main.py": path}, job, "", {}, LIMITS)
    assert ran.code == 0, ran.stderr.decode()[-2000:]
    events = [json.loads(line) for line in ran.side.splitlines()]
    inputs = [e for e in events if e["kind"] == "input"]
    assert sorted(e["via"] for e in inputs) == ["map", "remote"]
    assert all(e["ok"] and e["gpu"] == "T4" and isinstance(e["container"], int) for e in inputs)
    assert events[-1] == {"kind": "end", "exit_code": 0}


def gpu_task(root: Path) -> Task:
    """io_task, whose environment asks for a GPU."""
    io_task(root)
    toml = (root / "task.toml").read_text()
    (root / "task.toml").write_text(toml.replace("[environment]\n", "[environment]\ngpus = 1\n"))
    return load_task(root)


async def test_a_forged_cuda_failure_counts_zero_where_the_reference_needs_no_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: a GPU function that just raised "no NVIDIA driver" on a grader without a
    GPU made the case resources_unavailable (left out of the mean) in a task that asks
    for gpu evidence, although the reference runs on the CPU. After: whether grading needs
    a GPU is the task's (its environment) and its reference's, decided before the run:
    here neither, so the case is the attempt's failure, counted 0."""
    monkeypatch.setattr(iorun, "gpu_count", lambda: 0)  # a grader without GPUs
    monkeypatch.setattr("crucible.verifiers.stages.io.stage.gpu_count", lambda: 0)
    task = io_task(tmp_path / "t")  # require_evidence = ["gpu"], environment: no GPU
    res = await run_io(task, tmp_path, GOOD.replace("return sum(xs)", CUDA_MISSING))
    assert res["components"] == {"pass_rate": 0.0, "all_pass": 0.0}
    assert res["verdict"] == "fail"  # counted: a score of 0, not an excluded error
    assert "NVIDIA" in res["reason"] or "needs a GPU" in res["reason"], res["reason"]


async def test_only_the_task_and_its_reference_make_a_gpu_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exclusion stays for what the task itself needs: a task whose environment asks
    for a GPU, or whose reference fails for want of CUDA, on a grader without one, is
    resources_unavailable before the submission runs (a correct program cannot help it)."""
    monkeypatch.setattr(iorun, "gpu_count", lambda: 0)
    monkeypatch.setattr("crucible.verifiers.stages.io.stage.gpu_count", lambda: 0)
    with pytest.raises(ResourcesUnavailable, match=r"environment\.gpus"):
        await run_io(gpu_task(tmp_path / "g"), tmp_path, GOOD)
    cuda_ref = f"{CUDA_MISSING}\n"
    with pytest.raises(ResourcesUnavailable, match="reference program needs a GPU"):
        await run_io(io_task(tmp_path / "r", reference=cuda_ref), tmp_path, GOOD)
