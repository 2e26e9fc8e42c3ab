"""The submission the host-side stages judge is taken before anything graded runs
(engine/grading/grader.py), on real local and docker sandboxes.

The attack: a one-step task graded in place, with a contracts gate. The agent submits a
program that fails the gate (its function has lost the GPU), and test.sh runs code of the
agent's (here the program's self-check script, as a test suite imports the agent's code),
which copies a passing program over the submission. Were the submission read after
test.sh, the gate would judge the passing copy: the trial scored 1.0. Taken before, the
gate judges what the agent handed in: 0.

And the blame rule reached by a one-step trial: grading that breaks in a sandbox that is
still alive is the attempt's (a counted verifier_failed, never a retried sandbox_failed).
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers.attack_tasks import attack_task, attack_trial

from crucible.tasks.models import Task

SQUARES = Path(__file__).resolve().parents[1] / "verifiers" / "tasks" / "modal-squares"
GOOD = (SQUARES / "solution" / "main.py").read_text()
NO_GPU = GOOD.replace('gpu="A10G", ', "")

GATED = """[metadata.crucible]
submission = ["/app/main.py"]
[[metadata.crucible.stages]]
kind = "contracts"
require = ["app", "function", "gpu"]
"""

# The task's tests: the program's own self-check first (code of the agent's, as a test
# suite runs), then the shallow check a test script can make without Modal.
TEST = """mkdir -p /logs/verifier
if [ -f /app/selfcheck.sh ]; then bash /app/selfcheck.sh; fi
if grep -q '^def square' /app/main.py; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi"""

SWAP = "cp /app/.stash.py /app/main.py\n"  # the hook: a passing program over the submission


def gated_task(root: Path, program: str, hook: str | None) -> Task:
    """The squares port graded in place; the agent hands in `program`, and `hook` (when
    given) as the self-check test.sh runs, with the passing program stashed beside it."""
    solve = "mkdir -p /app && cp /solution/main.py /app/main.py"
    if hook is not None:
        solve += " && cp /solution/good.py /app/.stash.py && cp /solution/selfcheck.sh /app/"
    files = {"solution/main.py": program, "solution/good.py": GOOD}
    if hook is not None:
        files["solution/selfcheck.sh"] = hook
    return attack_task(root, solve=solve, test=TEST, toml=GATED, files=files)


async def test_a_hook_run_by_the_tests_cannot_swap_the_submission(
    provider_env: str, tmp_path: Path
) -> None:
    r = await attack_trial(provider_env, gated_task(tmp_path / "t", NO_GPU, SWAP), tmp_path)
    assert r.outcome == "graded", r.error
    vr = r.verifier_result
    assert vr is not None and vr.script_rewards == {"reward": 1.0}  # the swap ran
    trial = tmp_path / "job" / r.trial_name
    # The gate judged what the agent handed in, not what test.sh left: 0 (it was 1.0).
    stages = [(s.name, s.status) for s in vr.stages or []]
    assert r.reward == 0.0, (r.reward, stages)
    assert stages == [("script", "passed"), ("contracts", "failed")]
    taken = (trial / "sandbox/submission/app/main.py").read_text()
    assert taken == NO_GPU and vr.submission is not None
    assert vr.submission.files == ["/app/main.py"]


async def test_the_controls_score_as_their_programs_do(provider_env: str, tmp_path: Path) -> None:
    # Without the hook the failing program is 0; the passing one is 1 (the gate can pass).
    bad = await attack_trial(
        provider_env, gated_task(tmp_path / "bad", NO_GPU, None), tmp_path / "b"
    )
    assert (bad.outcome, bad.reward) == ("graded", 0.0), bad.error
    good = await attack_trial(
        provider_env, gated_task(tmp_path / "good", GOOD, None), tmp_path / "g"
    )
    assert (good.outcome, good.reward) == ("graded", 1.0), good.error


# What breaks in-place grading from inside, per provider: a /tests tree deeper than the
# local reset walks (hostfs.MAX_RESET_DEPTH), a /logs that is a file (docker's archive).
BREAKS = {
    "local": 'mkdir -p /tests/$(printf "a/%.0s" $(seq 200))',
    "docker": "rm -rf /logs && echo x > /logs",
}


async def test_grading_broken_in_a_live_sandbox_is_the_one_step_attempts(
    provider_env: str, tmp_path: Path
) -> None:
    # The agent does the task (/app/ok), then breaks its own grading: counted 0, never
    # a sandbox_failed that a retry would trade for a fresh try.
    task = attack_task(tmp_path / "t", solve=f"touch /app/ok; {BREAKS[provider_env]}")
    r = await attack_trial(provider_env, task, tmp_path)
    assert r.outcome == "verifier_failed", (r.outcome, r.error)
    assert r.error is not None and "grading failed in a live sandbox" in r.error.message
    assert r.reward is None and r.counted_reward == 0.0
    assert r.steps is None  # a one-step trial
