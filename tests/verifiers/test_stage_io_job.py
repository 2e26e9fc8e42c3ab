"""The translation example end to end through the CLI on local sandboxes: the oracle
scores 1.0 with no Modal account, nop scores 0, and a decorator-only port (the GPU
function present, its work done in-process) is zeroed by the runtime's trace, with the
reason in `crucible runs get --verbose`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.providers import BOTH
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


# -- issue 24's attacks, through whole trials (the local provider, and docker) --------------

# A port that never calls its GPU function: the power iteration runs in the entrypoint's
# process, and the trace an honest run leaves (the GPU function's inputs by .map) is written
# through the runtime's own emit(). Before: the host read that log as the trace, and this
# scored 1.0 (contracts see the .map; the judge is skipped offline).
FORGED_TRACE = SOLUTION.replace(
    "    print(json.dumps(list(rank1.map(make_matrices(n, size, seed)))))",
    """    from crucible.modalrt.context import emit

    list(rank1.map([]))
    out = [rank1._local_f(m) for m in make_matrices(n, size, seed)]
    emit("function", name="rank1", type="function", resources={"gpu": "T4"})
    for _ in out:
        emit("input", function="rank1", via="map", ok=True, gpu="T4", gpu_backing="gpu",
             container=7)
    print(json.dumps(out))""",
)
# A GPU function that only says CUDA is missing, on a grader without a GPU, in a task whose
# reference runs on the CPU (and whose environment asks for no GPU). Before: the case was
# resources_unavailable, the trial left out of the mean.
CUDA_MISSING = SOLUTION.replace(
    "    at = [list(col) for col in zip(*a)]",
    '    raise RuntimeError("CUDA driver initialization failed: no NVIDIA GPU found")',
)


def _attack_job(tmp_path: Path, env: str, name: str, port: str) -> tuple[dict[str, Any], Any]:
    task = tmp_path / "tasks" / TASK.name
    shutil.copytree(TASK, task)
    (task / "solution" / "main.py").write_text(port)
    jobs = tmp_path / "jobs"
    result = CliRunner().invoke(app, ["run", str(task), "--agent", "oracle", "--env", env,
                                      "--jobs-dir", str(jobs), "--job-name", name,
                                      "--max-retries", "0", "--json", "--quiet"])  # fmt: skip
    summary = json.loads((jobs / name / "result.json").read_text())
    return summary, (result, trial(jobs, name))


@pytest.mark.parametrize("env", BOTH)
def test_a_forged_trace_and_a_forged_gpu_error_score_zero(
    tmp_path: Path, env: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    if env == "docker":
        request.getfixturevalue("docker_engine")
    monkeypatch.delenv("CRUCIBLE_JUDGE_BASE_URL", raising=False)
    # a grader without a GPU, whatever this machine has (the io runs get none either)
    monkeypatch.setattr("crucible.verifiers.stages.io.stage.gpu_count", lambda: 0)
    monkeypatch.setattr("crucible.verifiers.stages.io.run.gpu_count", lambda: 0)
    summary, (_, t) = _attack_job(tmp_path / "f", env, "forged", FORGED_TRACE)
    assert summary["mean_reward"] == 0.0, summary
    io = t["verifier_result"]["stages"][2]
    assert io["kind"] == "io" and io["status"] == "failed"
    assert "did not exercise gpu, fan_out" in io["reason"]
    summary, (_, t) = _attack_job(tmp_path / "c", env, "cuda", CUDA_MISSING)
    assert summary["mean_reward"] == 0.0, summary
    assert t["error"] is None, t["error"]  # graded, counted: not an excluded error
    io = t["verifier_result"]["stages"][2]
    assert io["status"] == "failed"
    # "needs a GPU" where this machine has no nvidia-smi; the error itself where it has one
    assert "needs a GPU" in io["reason"] or "no NVIDIA GPU" in io["reason"], io["reason"]
