"""A non-judge stage that crashes with an ordinary exception (a bug in an analyzer that
the submission reached, not a CrucibleError), through `crucible run` on local sandboxes.

The analyzer was given the submission, so its crash is the attempt's: verifier_failed,
counted 0, never an excluded model_failed (only the judge's endpoint failing is that)
and never a retried infrastructure error. The crash is an analyzer function of the
stage's own module made to raise.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from tests.verifiers.test_stage_io_grading_job import io_job_task, io_stage, run_job

from crucible.verifiers.stages.contracts import ContractsStage
from crucible.verifiers.stages.io import IoStage

CONTRACTS = '[[metadata.crucible.stages]]\nkind = "contracts"\nrequire = ["function"]\n'


def _crash(monkeypatch: pytest.MonkeyPatch, stage: type, analyzer: str) -> list[str]:
    """Make `analyzer` (as the stage's module calls it) raise; returns the calls seen."""
    calls: list[str] = []

    def boom(*args: Any, **kwargs: Any) -> Any:
        calls.append(analyzer)
        raise RuntimeError(f"{analyzer} broke on this submission")

    monkeypatch.setattr(sys.modules[stage.__module__], analyzer, boom)
    return calls


@pytest.mark.parametrize(
    ("stage", "analyzer", "declared"),
    [
        (ContractsStage, "analyze_paths", CONTRACTS),  # the contracts detector
        (IoStage, "mismatch", io_stage("io")),  # the io stage's output comparison
    ],
)
def test_a_crashing_analyzer_is_a_counted_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stage: type, analyzer: str, declared: str
) -> None:
    calls = _crash(monkeypatch, stage, analyzer)
    summary, trial = run_job(io_job_task(tmp_path / "t", declared), tmp_path / "jobs")
    assert calls == [analyzer]  # it ran once: no retry of the attempt's failure
    assert trial["outcome"] == "verifier_failed", trial["error"]
    assert f"{analyzer} broke on this submission" in trial["error"]["message"]
    crashed = trial["verifier_result"]["stages"][-1]
    assert crashed["status"] == "error" and crashed["reason"].startswith("verifier_failed")
    # counted: a 0 in the mean, nothing left out
    assert summary["outcomes"] == {"verifier_failed": 1}, summary
    assert summary["mean_reward"] == 0.0 and summary["n_excluded"] == 0, summary
