"""The io stage on real programs, each run in a real io sandbox: the reference as plain
python, the submission through the offline Modal runtime. Tolerances, blame (the
reference crashing is the task's, the submission crashing or hanging is the attempt's,
needing a GPU the task does not is a failed case, a sandbox that cannot start is sandbox_failed),
the reference cache, and the trace read as hostile input. The attacks are in
test_stage_io_attacks.py."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from tests.helpers.fake_openai import FakeOpenAI, text
from tests.verifiers.test_stages import judge_toml, make_task, pipeline, submitted

import crucible.verifiers.stages.io.run as iorun
from crucible.errors import SandboxFailed, TaskInvalid
from crucible.sandboxes.local.oneshot import OneShotSpec, run_oneshot
from crucible.tasks.loader import load_task
from crucible.tasks.models import Task
from crucible.verifiers.pipeline import declared
from crucible.verifiers.stages.base import StageContext
from crucible.verifiers.stages.io import IoStage
from crucible.verifiers.stages.io.cases import REFERENCE_OUTPUTS
from crucible.verifiers.stages.io.compare import mismatch, parse_output
from crucible.verifiers.stages.io.trace import (
    MAX_EVENTS,
    MAX_TEXT,
    SUMMARY_CHARS,
    host_trace,
    judge_text,
    parse_events,
    summary,
)

REFERENCE = """import json, sys
xs = [float(x) for x in sys.argv[2].split(",")]  # --xs 1,2.5
print(json.dumps({"sum": sum(xs), "n": len(xs)}))
"""
GOOD = """import json
import modal

app = modal.App("adder")


@app.function(gpu="T4")
def add(xs: list) -> float:
    return sum(xs)


@app.local_entrypoint()
def main(xs: str) -> None:
    xs = [float(a) for a in xs.split(",")]
    print("logging before the result")
    print(json.dumps({"sum": add.remote(xs) + 1e-12, "n": len(xs)}))
"""


def io_task(
    root: Path, reference: str = REFERENCE, extra: str = "", timeout: float = 60,
    evidence: str = '["gpu"]',
) -> Task:  # fmt: skip
    stage = ('[[metadata.crucible.stages]]\nkind = "io"\nreference = "tests/reference.py"\n'
             'cases = [{args = ["--xs", "1,2.5"]}, {args = ["--xs", "4"]}]\nrel_tol = 1e-9\nabs_tol = 1e-9\n'
             f'require_evidence = {evidence}\ntimeout_sec = {timeout}\n{extra}')  # fmt: skip
    task = make_task(root, stage)
    (root / "tests" / "reference.py").write_text(reference)
    return task


async def run_io(task: Task, tmp: Path, program: str) -> dict:
    (stage,) = declared(task)[1]
    assert isinstance(stage, IoStage)
    res = await stage.run(StageContext(task, submitted(tmp, program), {"reward": 1.0}))
    return res.model_dump(mode="json")


# -- comparing --------------------------------------------------------------------------


def test_compare_tolerances_and_structure() -> None:
    assert mismatch({"a": [1.0, 2.0]}, {"a": [1.0 + 1e-10, 2]}, 1e-9, 0) is None
    assert "$.a[1]" in (mismatch({"a": [1.0, 2.0]}, {"a": [1.0, 2.1]}, 1e-9, 1e-6) or "")
    assert mismatch([1000.0], [1000.5], 0, 1e-3) is None  # relative
    assert mismatch([float("nan")], [float("nan")], 0, 0) is None
    assert mismatch([True], [1], 1, 1) is not None  # a bool is not a number
    assert "3 items" in (mismatch([1, 2, 3], [1, 2], 0, 0) or "")
    assert "keys differ" in (mismatch({"a": 1}, {"b": 1}, 0, 0) or "")
    assert mismatch([[1, [2, {"x": "s"}]]], [[1, [2, {"x": "t"}]]], 0, 0) is not None
    assert parse_output("log\n[1, 2]\n", "json") == [1, 2]
    assert math.isnan(parse_output("NaN", "json"))
    with pytest.raises(ValueError):
        parse_output("no json here\n", "json")


# -- declaring --------------------------------------------------------------------------


async def test_reference_must_be_inside_the_task(tmp_path: Path) -> None:
    task = io_task(tmp_path / "t")
    toml = (tmp_path / "t" / "task.toml").read_text().replace("tests/reference.py", "../x.py")
    (tmp_path / "x.py").write_text(REFERENCE)
    (tmp_path / "t" / "task.toml").write_text(toml)

    task = load_task(tmp_path / "t")
    with pytest.raises(TaskInvalid, match="inside the task folder"):
        await run_io(task, tmp_path, GOOD)


async def test_a_reference_read_through_a_link_is_refused(tmp_path: Path) -> None:
    """Attack: the reference is a link (here to a file inside the folder; out of it is
    refused above): task files are never read through links, as the loader's are."""
    io_task(tmp_path / "t")
    ref = tmp_path / "t" / "tests" / "reference.py"
    ref.rename(tmp_path / "t" / "tests" / "real.py")
    ref.symlink_to("real.py")
    with pytest.raises(TaskInvalid, match="never read through a link"):
        await run_io(load_task(tmp_path / "t"), tmp_path, GOOD)


# -- grading and blame ------------------------------------------------------------------


async def test_matching_submission_passes_with_trace_evidence(tmp_path: Path) -> None:
    res = await run_io(io_task(tmp_path / "t"), tmp_path, GOOD)
    assert res["status"] == "passed", res
    assert res["components"] == {"pass_rate": 1.0, "all_pass": 1.0}, res["reason"]
    case = res["details"]["cases"][0]
    assert case["evidence"]["gpu"] and case["remote_inputs"] == {"add": 1}
    assert case["gpu_backing"] == {"add": "cpu"}  # the GPU request ran on this CPU, and says so


async def test_local_call_is_caught_by_the_trace(tmp_path: Path) -> None:
    res = await run_io(io_task(tmp_path / "t"), tmp_path, GOOD.replace("add.remote", "add.local"))
    assert res["components"] == {"pass_rate": 0.0, "all_pass": 0.0}
    assert "did not exercise gpu" in res["reason"]


async def test_wrong_output_one_case_of_two(tmp_path: Path) -> None:
    wrong = GOOD.replace('"n": len(xs)', '"n": len(xs) if len(xs) > 1 else 7')
    res = await run_io(io_task(tmp_path / "t", extra='role = "gate"\n'), tmp_path, wrong)
    assert res["status"] == "failed" and res["components"]["pass_rate"] == 0.5
    assert "case 1: $.n: expected 1, got 7" in res["reason"]


async def test_submission_crash_and_hang_are_failed_cases(tmp_path: Path) -> None:
    crash = GOOD.replace('xs = [float(a) for a in xs.split(",")]', "raise RuntimeError('boom')")
    res = await run_io(io_task(tmp_path / "t"), tmp_path, crash)
    assert res["components"]["all_pass"] == 0.0 and "boom" in res["reason"]
    hang = GOOD.replace('xs = [float(a) for a in xs.split(",")]', "while True: pass")
    res = await run_io(io_task(tmp_path / "h", timeout=3), tmp_path, hang)
    assert res["components"]["all_pass"] == 0.0


async def test_reference_crash_is_task_invalid(tmp_path: Path) -> None:
    task = io_task(tmp_path / "t", reference="raise SystemExit(3)\n")
    with pytest.raises(TaskInvalid, match="reference program, case 0: exited 3"):
        await run_io(task, tmp_path, GOOD)


async def test_needing_a_gpu_the_task_does_not_is_a_failed_case(tmp_path: Path) -> None:
    """The task asks for gpu evidence but its environment for no GPU, and its reference
    runs on the CPU: a port that fails for want of CUDA fails its case (the task's needs
    decide resources_unavailable, before the run: test_stage_io_evidence.py)."""
    cuda = GOOD.replace("return sum(xs)", 'raise RuntimeError("CUDA driver not found")')
    res = await run_io(io_task(tmp_path / "t"), tmp_path, cuda)
    assert res["components"] == {"pass_rate": 0.0, "all_pass": 0.0}
    assert "needs a GPU" in res["reason"]


async def test_reference_outputs_are_cached_per_task_and_case(tmp_path: Path) -> None:
    REFERENCE_OUTPUTS.clear()
    first = await run_io(io_task(tmp_path / "a"), tmp_path, GOOD)
    again = await run_io(io_task(tmp_path / "a-copy"), tmp_path, GOOD)  # same digest
    assert [c["reference_cached"] for c in first["details"]["cases"]] == [False, False]
    assert [c["reference_cached"] for c in again["details"]["cases"]] == [True, True]
    other = await run_io(io_task(tmp_path / "b", reference=REFERENCE + "# v2\n"), tmp_path, GOOD)
    assert [c["reference_cached"] for c in other["details"]["cases"]] == [False, False]


async def test_a_sandbox_that_cannot_start_is_sandbox_failed(tmp_path: Path) -> None:
    spec = OneShotSpec(command=["/bin/true"], env={}, ro_binds={"/opt/x": str(tmp_path / "none")})
    with pytest.raises(SandboxFailed, match="io sandbox"):
        await run_oneshot(spec)


# -- the trace, as hostile input --------------------------------------------------------


def test_hostile_trace_lines_are_dropped_and_bounded() -> None:
    good = {"kind": "input", "function": "add", "via": "map", "ok": True, "gpu": "T4"}
    lines = [
        json.dumps({"kind": "function", "name": "add", "resources": {"gpu": "T4"}}),
        json.dumps(good),
        "not json",
        json.dumps({"kind": "input", "via": "map"}),  # no function
        json.dumps({"kind": "input", "function": ["x"], "via": "map"}),  # wrong type
        json.dumps({"kind": "nonsense"}),
        json.dumps({**good, "error": "e" * 100_000}),  # past the line cap
        "[" * 100_000,  # deep nesting
        json.dumps({**good, "function": "f" * 5000}),  # cut, kept
    ]
    events, dropped = parse_events("\n".join(lines).encode())
    assert dropped == 6 and [e["kind"] for e in events] == ["function", "input", "input"]
    assert len(events[2]["function"]) == MAX_TEXT
    trace = host_trace("\n".join(lines).encode(), "/app/main.py", "main", 0)
    assert trace.function("add") is not None and trace.function("add").remote_inputs == 1  # type: ignore[union-attr]
    flood = (json.dumps(good) + "\n").encode() * (MAX_EVENTS + 10)
    assert len(parse_events(flood)[0]) == MAX_EVENTS
    assert host_trace(b"\xff\xfe garbage", "p", None, 1).status == "failed"
    text = judge_text([summary(i, trace) for i in range(100)])
    assert len(text) <= SUMMARY_CHARS and "dispatching side" in text


def test_submitted_paths_stay_under_the_work_folders_src(tmp_path: Path) -> None:
    f = tmp_path / "x.py"
    files = {"/app/main.py": f, "/app/../../etc/x.py": f, "/../x.py": f, "/a/./b.py": f}
    assert sorted(iorun.submitted_files(files)) == ["src/a/b.py", "src/app/main.py"]


async def test_stdin_reaches_both_programs(tmp_path: Path) -> None:
    reference = (
        "import json, sys\n"
        "print(json.dumps({'sum': sum(map(float, sys.stdin.read().split())), 'n': 0}))\n"
    )
    program = GOOD.replace(
        'xs = [float(a) for a in xs.split(",")]',
        "import sys\n    xs = [float(a) for a in sys.stdin.read().split()]",
    ).replace('"n": len(xs)', '"n": 0')
    io_task(tmp_path / "t", reference=reference)
    toml = tmp_path / "t" / "task.toml"
    cases = 'cases = [{args = ["--xs", "0"], stdin = "1 2 3.5"}]\n'
    toml.write_text(re.sub(r"cases = \[.*\]\n", lambda _: cases, toml.read_text()))
    res = await run_io(load_task(tmp_path / "t"), tmp_path, program)
    assert res["components"]["all_pass"] == 1.0, res["reason"]


def test_the_old_run_on_host_key_is_refused_with_a_reason(tmp_path: Path) -> None:
    stage = '[[metadata.crucible.stages]]\nkind = "io"\nreference = "r.py"\nrun_on_host = true\n'
    with pytest.raises(TaskInvalid, match="run_on_host is gone: every io run is sandboxed"):
        declared(make_task(tmp_path / "t", stage))


async def test_the_judge_reads_the_submissions_trace(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.push(text('{"verdict": "pass", "reason": "the sum runs remotely"}'))
    io_task(tmp_path / "t", extra=judge_toml(fake_openai.url))
    v = await pipeline(load_task(tmp_path / "t"), submitted(tmp_path, GOOD), tmp_path)
    assert [s.status for s in v.stages] == ["passed", "passed", "passed"], v.stages
    prompt = json.dumps(fake_openai.requests[0]["messages"])
    assert "Offline Modal runtime trace of the submission (io stage)" in prompt
    assert "add (function): 1 inputs in containers (by call: remote 1)" in prompt
    assert "GPU request ran on: cpu" in prompt
