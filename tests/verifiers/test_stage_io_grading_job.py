"""The io stage's grading through `crucible run` on local sandboxes (the oracle submits
the task's solution), read back from result.json: the task's tolerances decide a near
answer, and a reference that prints and then crashes is never taken as the expected
output.

The task is tests/verifiers/tasks/modal-squares with its stages replaced by io stages:
the reference prints 285 (the sum of the squares below 10); its test script passes any
program that defines `square`, so the io stages alone decide.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from crucible.cli.main import app

EXAMPLE = Path(__file__).resolve().parent / "tasks" / "modal-squares"
runner = CliRunner()

REFERENCE = "print(sum(x * x for x in range(10)))\n"
# The port: the same sum, fanned out to a Modal function; OFF is what it adds to it.
PORT = """import modal

app = modal.App("squares")


@app.function()
def square(x: int) -> int:
    return x * x


@app.local_entrypoint()
def main() -> None:
    print(sum(square.map(range(10))) + OFF)
"""


def io_stage(name: str, extra: str = "") -> str:
    return (f'[[metadata.crucible.stages]]\nkind = "io"\nname = "{name}"\n'
            f'reference = "tests/reference.py"\ncases = [{{args = []}}]\n{extra}')  # fmt: skip


def io_job_task(root: Path, stages: str, *, reference: str = REFERENCE, off: str = "0") -> Path:
    """The example task with `stages` as its only stages, the reference and the port."""
    shutil.copytree(EXAMPLE, root)
    toml = (root / "task.toml").read_text()
    head, tail = toml.split("[metadata.crucible]")[0], toml[toml.index("[agent]") :]
    meta = f'[metadata.crucible]\nsubmission = ["/app/main.py"]\n\n{stages}\n'
    (root / "task.toml").write_text(head + meta + tail)
    (root / "tests" / "reference.py").write_text(reference)
    (root / "solution" / "main.py").write_text(PORT.replace("OFF", off))
    return root


def run_job(task: Path, jobs: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """`crucible run` with the oracle on local sandboxes: the job's summary and its trial."""
    result = runner.invoke(app, ["run", str(task), "--agent", "oracle", "--env", "local",
                                 "--jobs-dir", str(jobs), "--job-name", "j", "--max-retries", "0",
                                 "--json", "--quiet"])  # fmt: skip
    summary: dict[str, Any] = json.loads((jobs / "j" / "result.json").read_text())
    assert result.exit_code in (0, 1), result.output
    (trial,) = [json.loads(p.read_text()) for p in (jobs / "j").glob("*/result.json")]
    return summary, trial


def test_the_tasks_tolerances_decide_a_near_answer(tmp_path: Path) -> None:
    """The port prints 285.001: 0.001 off. Within 0.01 (absolute) or 1e-5 (relative: 0.00285
    here) it passes; with 0.0009 absolute and 1e-6 relative (0.000285) it fails."""
    stages = (
        io_stage("loose_abs", "abs_tol = 0.01\nrel_tol = 0.0\n")
        + io_stage("loose_rel", "abs_tol = 0.0\nrel_tol = 1e-5\n")
        + io_stage("tight", "abs_tol = 0.0009\nrel_tol = 1e-6\n")
    )
    summary, trial = run_job(io_job_task(tmp_path / "t", stages, off="0.001"), tmp_path / "jobs")
    assert trial["outcome"] == "graded", trial["error"]
    assert summary["mean_reward"] == 1.0  # score stages: the test script's reward stands
    rewards = trial["verifier_result"]["rewards"]
    assert rewards["loose_abs.all_pass"] == 1.0, trial["verifier_result"]["stages"]
    assert rewards["loose_rel.all_pass"] == 1.0, trial["verifier_result"]["stages"]
    assert rewards["tight.all_pass"] == 0.0, trial["verifier_result"]["stages"]
    tight = trial["verifier_result"]["stages"][-1]
    assert "expected 285, got 285.001" in tight["reason"], tight["reason"]


def test_an_exact_answer_passes_the_tightest_tolerance(tmp_path: Path) -> None:
    """The check above is not a stage that always fails: no tolerance, exact output."""
    stage = io_stage("exact", 'role = "gate"\nabs_tol = 0.0\nrel_tol = 0.0\n')
    summary, trial = run_job(io_job_task(tmp_path / "t", stage), tmp_path / "jobs")
    assert summary["mean_reward"] == 1.0, trial
    assert trial["verifier_result"]["rewards"]["exact.all_pass"] == 1.0


def test_a_reference_that_prints_then_crashes_is_not_the_expected_output(
    tmp_path: Path,
) -> None:
    """The reference prints the right answer, then exits 3. The port prints the same
    answer: had that output been kept as the expected one, the case would pass (1.0).
    The reference failing is the task's: task_invalid, left out, with no reward."""
    crashing = REFERENCE + "raise SystemExit(3)\n"
    stage = io_stage("io", 'role = "gate"\n')
    summary, trial = run_job(
        io_job_task(tmp_path / "t", stage, reference=crashing), tmp_path / "jobs"
    )
    assert trial["outcome"] == "task_invalid", trial["verifier_result"]
    assert "reference program, case 0: exited 3" in trial["error"]["message"]
    assert trial["verifier_result"]["rewards"] is None
    assert summary["mean_reward"] is None and summary["n_excluded"] == 1, summary


@pytest.mark.parametrize("tolerance", ["abs_tol = -0.001", "rel_tol = -1e-6", "abs_tol = nan"])
def test_a_tolerance_no_comparison_can_use_is_refused_before_any_trial(
    tmp_path: Path, tolerance: str
) -> None:
    """A negative tolerance made every inexact comparison raise (math.isclose refuses it),
    which failed the case: the task's mistake counted as the attempt's 0. A NaN tolerance
    matched nothing but exact output. Either is the task's: refused at launch."""
    task = io_job_task(tmp_path / "t", io_stage("io", f"{tolerance}\n"), off="0.001")
    jobs = tmp_path / "jobs"
    result = runner.invoke(app, ["run", str(task), "--agent", "oracle", "--env", "local",
                                 "--jobs-dir", str(jobs), "--job-name", "j", "--max-retries", "0"])  # fmt: skip
    assert result.exit_code == 1, result.output
    out = " ".join(result.output.split())
    assert (
        f"stage #1 (io): {tolerance.split()[0]}: Input should be greater than or equal to 0" in out
    )
    assert "1 task(s) are invalid" in out, out
    assert list(jobs.glob("j/*/result.json")) == []  # no trial ran
