"""The swebench stage on logs shaped as test.sh prints them: the official parser and
resolution rule on the nonce-framed section only, and the blame of what the log shows."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from crucible.errors import TaskInvalid, VerifierFailed
from crucible.tasks.loader import load_task
from crucible.verifiers.stages.base import StageContext
from crucible.verifiers.stages.swebench import (
    BEGIN_TAG,
    END,
    INSTANCE_FILE,
    START,
    SwebenchSpec,
    SwebenchStage,
    framed,
    grade,
)
from crucible.verifiers.submission import Submission

NONCE = "0123456789abcdef0123456789abcdef"
F2P = ["tests/test_calc.py::test_mul"]
P2P = ["tests/test_calc.py::test_add", "tests/test_calc.py::test_neg"]
INSTANCE = {
    "instance_id": "pytest-dev__pytest-90001",
    "repo": "pytest-dev/pytest",
    "version": "8.4",
    "base_commit": "0" * 40,
    "patch": "",
    "test_patch": "diff --git a/tests/test_calc.py b/tests/test_calc.py\n",
    "FAIL_TO_PASS": F2P,
    "PASS_TO_PASS": P2P,
}


def summary(**status: str) -> str:
    return "\n".join(f"{s} tests/test_calc.py::{t}" for t, s in status.items())


def log(section: str, before: str = "", after: str = "", nonce: str = NONCE) -> str:
    """test.sh's stdout: the nonce line, the eval's set-up, the framed test run."""
    return (
        f"{BEGIN_TAG} {nonce}\n++ git status\n{before}\n"
        f"++ printf '%s %s\\n' '{START}' {nonce}\n{START} {nonce}\n++ pytest -rA tests/test_calc.py\n"
        f"{section}\n++ printf\n{END} {nonce}\n{after}\n{BEGIN_TAG}-end {nonce} 0\n"
    )


def test_resolved_only_when_f2p_pass_and_p2p_hold() -> None:
    ok = summary(test_add="PASSED", test_neg="PASSED", test_mul="PASSED")
    assert grade(INSTANCE, framed(log(ok), False))[0] is True
    broke = summary(test_add="PASSED", test_neg="FAILED", test_mul="PASSED")
    resolved, entry = grade(INSTANCE, framed(log(broke), False))
    assert resolved is False
    assert entry["tests_status"]["PASS_TO_PASS"]["failure"] == ["tests/test_calc.py::test_neg"]
    unfixed = summary(test_add="PASSED", test_neg="PASSED", test_mul="FAILED")
    assert grade(INSTANCE, framed(log(unfixed), False))[0] is False


def _stage_run(tmp_path: Path, output: str, cut: bool = False):  # type: ignore[no-untyped-def]
    root = tmp_path / "task"
    (root / "tests").mkdir(parents=True)
    (root / "task.toml").write_text('schema_version = "1.1"\n')
    (root / "instruction.md").write_text("x\n")
    (root / "tests" / "test.sh").write_text("#!/bin/bash\n")
    (root / "tests" / INSTANCE_FILE).write_text(json.dumps(INSTANCE))
    ctx = StageContext(load_task(root), Submission(), {"reward": 1.0})
    ctx.test_output, ctx.test_output_cut = output, cut
    stage = SwebenchStage(SwebenchSpec(kind="swebench", role="gate"))
    return asyncio.run(stage.run(ctx))


def test_stage_components_and_gate(tmp_path: Path) -> None:
    broke = summary(test_add="PASSED", test_neg="FAILED", test_mul="PASSED")
    res = _stage_run(tmp_path, log(broke))
    assert res.status == "failed"
    assert res.components == {"resolved": 0.0, "fail_to_pass": 1.0, "pass_to_pass": 0.5}
    assert "test_neg" in res.reason
    ok = _stage_run(
        tmp_path / "2", log(summary(test_add="PASSED", test_neg="PASSED", test_mul="PASSED"))
    )
    assert ok.status == "passed" and ok.components["resolved"] == 1.0


# --- attacks: lines the agent's code prints -------------------------------------------------

# What the agent's own code (setup.py run by the spec's `pip install -e .`, a conftest, a
# commit message shown by `git show`) can print before the tests run: a whole fake test
# section with the official, bare markers.
PLANTED = (
    f"{START}\n" + summary(test_add="PASSED", test_neg="PASSED", test_mul="PASSED") + f"\n{END}"
)
REAL_FAIL = summary(test_add="PASSED", test_neg="PASSED", test_mul="FAILED")


def test_attack_planted_section_before_the_frame_is_not_parsed(tmp_path: Path) -> None:
    output = log(REAL_FAIL, before=PLANTED)
    # Before (the raw log to the official get_logs_eval, as a harness without the frame
    # reads it): the first bare START is the agent's, and its fake section resolves.
    from swebench.harness.grading import get_eval_report

    from crucible.verifiers.stages.swebench import test_spec

    raw = tmp_path / "raw.txt"
    raw.write_text(output)
    iid = INSTANCE["instance_id"]
    naive = get_eval_report(
        test_spec(INSTANCE), {"instance_id": iid, "model_patch": "x"}, str(raw), False
    )
    assert naive[iid]["resolved"] is True
    # After: only the nonce frame is read, and the real run failed.
    assert grade(INSTANCE, framed(output, False))[0] is False
    assert _stage_run(tmp_path, output).components["resolved"] == 0.0


def test_attack_a_guessed_or_stale_nonce_frames_nothing(tmp_path: Path) -> None:
    other = "f" * 32  # a frame under another nonce (an earlier trial's, a guess)
    fake = f"{START} {other}\n" + summary(test_add="PASSED", test_neg="PASSED", test_mul="PASSED")
    output = log(REAL_FAIL, before=fake + f"\n{END} {other}")
    assert _stage_run(tmp_path, output).components["resolved"] == 0.0


@pytest.mark.parametrize(
    "marker",
    [
        ">>>>> Patch Apply Failed",
        ">>>>> Reset Failed",
        ">>>>> Tests Errored",
        ">>>>> Tests Timed Out",
    ],
)
def test_attack_harness_markers_printed_by_the_code_stay_a_zero(
    tmp_path: Path, marker: str
) -> None:
    # The official harness writes these itself for its own failures; here only the agent's
    # code can print them: a 0 (graded, the gate failed), never an excluded error.
    passing = summary(test_add="PASSED", test_neg="PASSED", test_mul="PASSED")
    res = _stage_run(tmp_path, log(passing + f"\n{marker}"))
    assert res.status == "failed" and res.components["resolved"] == 0.0


def test_attack_bare_end_marker_cannot_cut_the_frame_short(tmp_path: Path) -> None:
    # The code prints the bare END, then fake results; the real results come first.
    section = REAL_FAIL + f"\n{END}\n" + summary(test_mul="PASSED")
    assert _stage_run(tmp_path, log(section)).components["resolved"] == 0.0


def test_broken_or_missing_frames_are_the_attempts(tmp_path: Path) -> None:
    with pytest.raises(VerifierFailed, match="nonce line"):
        framed(f"junk\n{START} {NONCE}\n{END} {NONCE}\n", False)
    with pytest.raises(VerifierFailed, match="never reached"):
        framed(f"{BEGIN_TAG} {NONCE}\n++ cd /testbed\n", False)
    cut = log(REAL_FAIL).split(f"{END} {NONCE}")[0]
    with pytest.raises(VerifierFailed, match="cut at the exec's cap"):
        framed(cut, True)


def test_a_host_without_the_instances_spec_is_task_invalid(tmp_path: Path) -> None:
    from crucible.verifiers.stages.swebench import test_spec

    with pytest.raises(TaskInvalid, match="no spec or log parser"):
        test_spec({**INSTANCE, "version": "0.0-none"})


def test_launch_refuses_a_task_the_host_cannot_grade(tmp_path: Path) -> None:
    from crucible.verifiers.pipeline import stage_problems

    root = tmp_path / "t"
    (root / "tests").mkdir(parents=True)
    (root / "task.toml").write_text(
        'schema_version = "1.1"\n[[metadata.crucible.stages]]\nkind = "swebench"\n'
    )
    (root / "instruction.md").write_text("x\n")
    (root / "tests" / "test.sh").write_text("#!/bin/bash\n")
    assert "swebench-instance.json" in stage_problems(load_task(root))[0]
    (root / "tests" / INSTANCE_FILE).write_text(json.dumps({**INSTANCE, "version": "0.0"}))
    assert "no spec or log parser" in stage_problems(load_task(root))[0]
    (root / "tests" / INSTANCE_FILE).write_text(json.dumps(INSTANCE))
    assert stage_problems(load_task(root)) == []
