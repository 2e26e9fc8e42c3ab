"""The submission agent (agents/submission.py) in real trials: a right submission of each
shape scores 1.0 on a task written for it, a wrong one 0; a patch applies on images with
neither git nor patch (the local provider's host userland, debian:bookworm-slim on docker);
a multi-step task gets the submission in its first step only."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.helpers.attack_tasks import attack_trial
from tests.helpers.diffs import LONG, git_diff, plain_diff
from tests.helpers.submission_tasks import agent_error, submission_task, submit

from crucible.agents.submission import SubmissionAgent
from crucible.records.submission import SUBMISSION
from crucible.tasks.loader import load_task

UNICODE = "héllo ☃ 😀 \u200b\r\nline\ttab\n\n\n"


async def test_a_right_files_submission_scores_1(tmp_path: Path, provider_env: str) -> None:
    task = submission_task(tmp_path / "t", expected=UNICODE, check="/app/deep/er/out.txt")
    sub = {"type": "files", "files": {"/app/deep/er/out.txt": UNICODE}}
    r = await submit(provider_env, task, tmp_path, sub)
    assert (r.outcome, r.reward, agent_error(r)) == ("graded", 1.0, None), r.error
    log = (tmp_path / "job" / r.trial_name / "agent" / "submission.txt").read_text()
    assert "wrote '/app/deep/er/out.txt'" in log


async def test_a_wrong_files_submission_scores_0(tmp_path: Path) -> None:
    task = submission_task(tmp_path / "t", expected=UNICODE, check="/app/out.txt")
    # One trailing newline less: kept exactly, so it is not the expected file.
    r = await submit(
        "local", task, tmp_path, {"type": "files", "files": {"/app/out.txt": UNICODE[:-1]}}
    )
    assert (r.outcome, r.reward, agent_error(r)) == ("graded", 0.0, None), r.error


@pytest.mark.parametrize("declared", [None, "/app/answers/final.txt"])
async def test_a_right_text_submission_scores_1(tmp_path: Path, declared: str | None) -> None:
    toml = "" if declared is None else f'[metadata]\nanswer_path = "{declared}"\n'
    where = declared or "/logs/agent/answer.txt"
    task = submission_task(tmp_path / "t", expected="42\n", check=where, toml=toml)
    r = await submit("local", task, tmp_path, {"type": "text", "text": "42\n"})
    assert (r.outcome, r.reward, agent_error(r)) == ("graded", 1.0, None), r.error
    wrong = await submit("local", task, tmp_path / "w", {"type": "text", "text": "41\n"})
    assert (wrong.outcome, wrong.reward) == ("graded", 0.0), wrong.error


async def test_a_bad_answer_path_is_the_tasks_fault(tmp_path: Path) -> None:
    toml = '[metadata]\nanswer_path = "relative/answer.txt"\n'
    task = submission_task(tmp_path / "t", toml=toml)
    r = await submit("local", task, tmp_path, {"type": "text", "text": "42"})
    assert r.outcome == "task_invalid" and r.error is not None  # the service's unscorable
    assert "answer_path" in r.error.message and r.counted_reward is None


BEFORE = {"/app/src/m.py": LONG, "/app/old.txt": "to go\n", "/app/a/moved.py": LONG[:200]}
AFTER = {
    "src/m.py": LONG.replace("line 7\n", "seven\n").replace("line 40\n", "forty\nmore\n"),
    "new/made.txt": UNICODE,
    "b/renamed.py": LONG[:200].replace("line 3\n", "three\n"),
}
# Each file the patch makes, in the test's own copy.
EXPECTED = "".join(f"{AFTER[k]}\x00" for k in sorted(AFTER))
CHECK_TREE = (
    "cd /app && { for f in b/renamed.py new/made.txt src/m.py; do cat \"$f\"; printf '\\0'; done; } "
    "> /tmp/tree && [ ! -e old.txt ] && [ ! -e a ] && cmp -s /tests/expected /tmp/tree "
    "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt"
)


def workdir_patch(tmp_path: Path, plain: bool = False) -> str:
    before = {k.removeprefix("/app/"): v for k, v in BEFORE.items()}
    if plain:
        return plain_diff(tmp_path / "diff", before, AFTER)
    return git_diff(tmp_path / "diff", before, AFTER, "-M")


async def test_a_right_git_patch_scores_1_without_git_in_the_image(
    tmp_path: Path, provider_env: str
) -> None:
    patch = workdir_patch(tmp_path)
    assert "rename from a/moved.py" in patch and "deleted file mode" in patch
    task = submission_task(
        tmp_path / "t", test=CHECK_TREE, seed=BEFORE, files={"tests/expected": EXPECTED}
    )
    r = await submit(provider_env, task, tmp_path, {"type": "patch", "patch": patch})
    assert (r.outcome, r.reward, agent_error(r)) == ("graded", 1.0, None), r.error


async def test_a_right_plain_patch_scores_1(tmp_path: Path) -> None:
    patch = workdir_patch(tmp_path, plain=True)
    # diff -ruN has no renames: a/moved.py is deleted and b/renamed.py made.
    task = submission_task(
        tmp_path / "t", test=CHECK_TREE, seed=BEFORE, files={"tests/expected": EXPECTED}
    )
    r = await submit("local", task, tmp_path, {"type": "patch", "patch": patch})
    assert (r.outcome, r.reward, agent_error(r)) == ("graded", 1.0, None), r.error


async def test_a_patch_that_does_not_apply_is_invalid_and_writes_nothing(tmp_path: Path) -> None:
    patch = workdir_patch(tmp_path)
    seed = {**BEFORE, "/app/src/m.py": LONG.replace("line 40\n", "changed\n")}
    test = "[ -e /app/new/made.txt ] || [ ! -e /app/old.txt ] && touch /app/ok; " + (
        "if [ -f /app/ok ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt"
    )
    task = submission_task(tmp_path / "t", test=test, seed=seed)
    r = await submit("local", task, tmp_path, {"type": "patch", "patch": patch})
    assert (r.outcome, r.reward, agent_error(r)) == ("graded", 0.0, "invalid_submission")
    assert r.agent_result is not None and r.agent_result.error is not None
    assert "src/m.py: hunk 2" in r.agent_result.error.message


def two_steps(root: Path) -> Path:
    """Two steps on /app/log.txt: 'one' first; the second's setup appends 'three', and its
    test wants the first step's work and that line, so a submission applied again
    (overwriting the file, or failing as a patch) scores 0 there."""
    root.mkdir(parents=True)
    (root / "task.toml").write_text(
        'schema_version = "1.4"\nmulti_step_reward_strategy = "mean"\n'
        '[environment]\ndocker_image = "debian:bookworm-slim"\nnetwork_mode = "no-network"\n'
        "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n"
        '[[steps]]\nname = "first"\n[[steps]]\nname = "second"\n'
    )
    checks = {
        "first": "grep -qx one /app/log.txt",
        "second": '[ "$(cat /app/log.txt)" = "$(printf \'one\\ntwo\\nthree\')" ]',
    }
    for step, check in checks.items():
        (root / "steps" / step / "tests").mkdir(parents=True)
        (root / "steps" / step / "instruction.md").write_text(f"Step {step}.\n")
        (root / "steps" / step / "tests" / "test.sh").write_text(
            f"#!/usr/bin/env bash\nif {check}; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
        )
    (root / "steps/second/workdir").mkdir()
    (root / "steps/second/workdir/setup.sh").write_text("echo three >> /app/log.txt\n")
    return root


@pytest.mark.parametrize("shape", ["files", "patch"])
async def test_a_multi_step_task_gets_the_submission_in_its_first_step(
    tmp_path: Path, shape: str
) -> None:
    task = load_task(two_steps(tmp_path / "t"))
    text = "one\ntwo\n"
    if shape == "files":
        sub = SUBMISSION.validate_python({"type": "files", "files": {"/app/log.txt": text}})
    else:
        patch = git_diff(tmp_path / "d", {}, {"log.txt": text})
        sub = SUBMISSION.validate_python({"type": "patch", "patch": patch})
    r = await attack_trial("local", task, tmp_path, agent=SubmissionAgent(sub))
    assert r.outcome == "graded", r.error
    got = [
        (s.name, s.verifier_result.rewards if s.verifier_result else None) for s in r.steps or []
    ]
    assert got == [("first", {"reward": 1.0}), ("second", {"reward": 1.0})] and r.reward == 1.0
    assert [s.agent_result.error for s in r.steps or [] if s.agent_result] == [None, None]
    steps = tmp_path / "job" / r.trial_name / "steps"
    assert "wrote" in (steps / "first/agent/submission.txt").read_text()
    assert "nothing to do" in (steps / "second/agent/submission.txt").read_text()
