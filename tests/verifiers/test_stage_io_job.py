"""The translation example end to end through the CLI on local sandboxes: the oracle
scores 1.0 with no Modal account, nop scores 0, and a decorator-only port (the GPU
function present, its work done in-process) is zeroed by the runtime's trace, with the
reason in `crucible runs get --verbose`."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.verifiers.test_stages_job import run, runs_get_verbose, trial
from typer.testing import CliRunner

from crucible.cli.main import app

TASK = Path(__file__).resolve().parents[2] / "examples" / "translation" / "power-iteration-gpu"
SOLUTION = (TASK / "solution" / "main.py").read_text()
# The GPU decorator is there, and a .map the static contracts see (over nothing); the
# power iteration runs in the entrypoint's process.
DECORATOR_ONLY = SOLUTION.replace(
    "list(rank1.map(make_matrices(n, size, seed)))",
    "list(rank1.map([])) + [rank1.local(m) for m in make_matrices(n, size, seed)]",
)


def test_oracle_scores_one_with_every_stage(tmp_path: Path) -> None:
    summary = run(TASK, tmp_path / "jobs", "oracle")
    assert summary["mean_reward"] == 1.0, summary
    v = trial(tmp_path / "jobs", "oracle")["verifier_result"]
    assert v["rewards"] == {"reward": 1.0, "contracts.present": 1.0, "io.pass_rate": 1.0,
                            "io.all_pass": 1.0}  # fmt: skip
    io, judge = v["stages"][-2:]
    assert io["kind"] == "io" and io["status"] == "passed"
    assert judge["status"] == "skipped"  # no judge endpoint configured here
    # every case: the GPU function ran in a container, once for each matrix of the case
    assert [c["remote_inputs"]["rank1"] for c in io["details"]["cases"]] == [3, 5, 1]


def test_nop_scores_zero(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["run", str(TASK), "--agent", "nop", "--env", "local",
                                      "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "nop",
                                      "--max-retries", "0", "--json", "--quiet"])  # fmt: skip
    assert result.exit_code == 0, result.output
    v = trial(tmp_path / "jobs", "nop")["verifier_result"]
    assert v["rewards"]["reward"] == 0.0 and v["rewards"]["io.all_pass"] == 0.0
    assert "was not submitted" in v["stages"][2]["reason"]


def test_decorator_only_is_zeroed_by_the_trace(tmp_path: Path) -> None:
    task = tmp_path / "tasks" / TASK.name
    shutil.copytree(TASK, task)
    (task / "solution" / "main.py").write_text(DECORATOR_ONLY)
    summary = run(task, tmp_path / "jobs", "deco")
    assert summary["mean_reward"] == 0.0, summary
    v = trial(tmp_path / "jobs", "deco")["verifier_result"]
    contracts, io, _judge = v["stages"][1:]
    assert contracts["status"] == "passed"  # present and reached: statically it looks right
    assert io["status"] == "failed" and v["rewards"]["io.pass_rate"] == 0.0
    # the outputs match: only the trace tells the GPU function never ran remotely
    assert "did not exercise gpu, fan_out" in io["reason"]
    assert io["details"]["cases"][0]["remote_inputs"] == {"rank1": 0}
    assert "did not exercise gpu, fan_out" in runs_get_verbose(tmp_path / "jobs", "deco")
