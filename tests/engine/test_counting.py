"""Counting: an agent cannot turn its 0 into a gap.

Whatever breaks grading after the agent phase, in a sandbox that is still
alive, ends `verifier_failed` with the reason, is not retried, and counts as 0
in the job summary, `crucible report` and the metrics. A lost sandbox stays
`sandbox_failed`. Real sandboxes throughout (local; docker where marked).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.helpers.attack_tasks import HONEST_TEST, attack_task, attack_trial
from typer.testing import CliRunner

from crucible.agents.base import Agent, AgentContext
from crucible.agents.oracle import OracleAgent
from crucible.cli.main import app
from crucible.engine.job import JobOptions, JobRunner
from crucible.engine.plan import make_job_config
from crucible.records.trial import AgentResult
from crucible.sandboxes.local.provider import LocalProvider
from crucible.store.layout import iter_trial_results

DIGITS_400 = "9" * 400
# A verifier that echoes the agent's answer into reward.json, as many do.
ECHO_ANSWER = 'echo "{\\"reward\\": $(cat /app/answer)}" > /logs/verifier/reward.json'

# ...with a second key: an answer that is not a number made "reward" a detail, and the
# primary reward silently became the next key (1), whatever the answer was.
ECHO_WITH_FORMAT = (
    'echo "{\\"reward\\": $(cat /app/answer), \\"format_ok\\": 1}" > /logs/verifier/reward.json'
)

SELF_BREAKING = {
    # The workdir is a mount of its own on local: emptied, never removed (graded 0 below).
    "rm_workdir": ("rm -rf /app", HONEST_TEST, ""),
    "lock_workdir": ("chmod 000 /app", HONEST_TEST, "grading could not be set up"),
    "huge_integer": (f"echo {DIGITS_400} > /app/answer", ECHO_ANSWER, "too large"),
    "string_answer": ("echo '\"x\"' > /app/answer", ECHO_WITH_FORMAT, "not a number"),
    "true_answer": ("echo true > /app/answer", ECHO_WITH_FORMAT, "not a number"),
    "past_int_limit": ("printf '1%.0s' $(seq 5000) > /app/answer", ECHO_ANSWER, "not valid JSON"),
    "readonly_logs": (
        "chmod 0555 /logs/verifier /logs",
        HONEST_TEST,
        "",
    ),  # graded 0 since the reset
}


@pytest.mark.parametrize("case", sorted(SELF_BREAKING))
async def test_an_attempt_that_breaks_its_own_grading_is_a_counted_zero(
    tmp_path: Path, case: str
) -> None:
    solve, test, reason = SELF_BREAKING[case]
    r = await attack_trial("local", attack_task(tmp_path / "t", solve=solve, test=test), tmp_path)
    if not reason:
        assert (r.outcome, r.reward) == ("graded", 0.0)
        return
    assert r.outcome == "verifier_failed" and r.error is not None
    assert reason in r.error.message
    assert r.counted_reward == 0.0


async def test_a_full_disk_in_grading_is_the_attempts(tmp_path: Path) -> None:
    # Each writable place is a tmpfs of storage_mb on local: the reward's one is filled.
    solve = "touch /app/ok; dd if=/dev/zero of=/logs/fill bs=1M 2>/dev/null; true"
    task = attack_task(tmp_path / "t", solve=solve, test=HONEST_TEST, toml="storage_mb = 48\n")
    r = await attack_trial("local", task, tmp_path)
    assert r.outcome == "verifier_failed" and r.error is not None
    assert "No space left" in r.error.message and r.counted_reward == 0.0


async def test_a_broken_loader_is_the_attempts(tmp_path: Path) -> None:
    # Where the layout lets the agent move the loader away, grading cannot start:
    # a counted verifier_failed; where it does not, the honest 0 stands.
    solve = "mv /lib64 /lib64.bak 2>/dev/null || mv /usr/lib64 /usr/lib64.bak 2>/dev/null; true"
    # (an exec may never report back once the loader is gone: short timeouts)
    task = attack_task(tmp_path / "t", solve=solve, agent_timeout=5, verifier_timeout=5)
    r = await attack_trial("local", task, tmp_path)
    assert r.outcome in ("verifier_failed", "graded"), r.error
    assert r.counted_reward == 0.0


class LosesItsSandbox(Agent):
    """The infrastructure loses the sandbox right at the end of the agent phase."""

    name = "loses-sandbox"

    async def run(self, ctx: AgentContext) -> AgentResult:
        await ctx.sandbox.close()
        return AgentResult(exit_code=0)


async def test_a_lost_sandbox_stays_sandbox_failed(tmp_path: Path) -> None:
    task = attack_task(tmp_path / "t", solve="touch /app/ok")
    r = await attack_trial("local", task, tmp_path, agent=LosesItsSandbox())
    assert r.outcome == "sandbox_failed" and r.counted_reward is None


@pytest.mark.docker
@pytest.mark.parametrize(
    "solve",
    ["rm -rf /app", "mv /lib64/ld-linux-x86-64.so.2 /lib64/ld.bak"],
    ids=["rm_workdir", "broken_loader"],
)
async def test_self_broken_grading_on_docker(
    tmp_path: Path, docker_engine: None, solve: str
) -> None:
    r = await attack_trial("docker", attack_task(tmp_path / "t", solve=solve), tmp_path)
    # Grading's own shell is the static kit's, which needs no loader: a test.sh of shell
    # builtins still runs (and says 0); one that needs the loader fails. Either way, 0.
    assert r.outcome in ("verifier_failed", "graded"), r.error
    assert r.counted_reward == 0.0
    if "ld-linux" in solve:  # the likeliest cause is on record
        assert "deleted /usr/lib64/ld-linux-x86-64.so.2" in (r.tampered_paths or [])


async def test_a_job_with_self_broken_trials_reports_below_one(tmp_path: Path) -> None:
    tasks = [
        attack_task(tmp_path / "tasks" / "solved", solve="touch /app/ok"),
        attack_task(tmp_path / "tasks" / "rm-workdir", solve="touch /app/ok; rm -rf /app"),
        attack_task(
            tmp_path / "tasks" / "huge-int",
            solve=f"echo {DIGITS_400} > /app/answer",
            test=ECHO_ANSWER,
        ),
        # an infrastructure-side error (no GPU here): left out, and counted as left out
        attack_task(tmp_path / "tasks" / "gpu", solve="touch /app/ok", toml="gpus = 1\n"),
    ]
    jobs = tmp_path / "jobs"
    cfg = make_job_config(job_id="j", tasks=tasks, agent="oracle", env="local", attempts=1,
                          concurrency=4, dataset=[str(tmp_path / "tasks")])  # fmt: skip
    runner = JobRunner(cfg, tasks, LocalProvider(), OracleAgent(), jobs,
                       JobOptions(retry_base_sec=0.001, retry_cap_sec=0.01))  # fmt: skip
    await runner.run()
    summary = json.loads((jobs / "j" / "result.json").read_text())
    assert summary["outcomes"] == {"graded": 1, "verifier_failed": 2, "resources_unavailable": 1}
    assert summary["n_retries"] == 0  # the attempt's failures are never retried
    assert summary["mean_reward"] == pytest.approx(1 / 3)
    assert summary["pass_at_k"]["pass@1"] == pytest.approx(1 / 3)
    assert summary["n_excluded"] == 1

    res = CliRunner().invoke(app, ["report", "j", "--jobs-dir", str(jobs), "--json"])
    assert res.exit_code == 0, res.output
    overall = json.loads(res.stdout)["jobs"][0]["overall"]
    assert overall["rewards"]["reward"]["mean"] == pytest.approx(1 / 3)
    assert overall["pass_k"][0]["pass_at_k"] == pytest.approx(1 / 3)
    assert overall["n_excluded"] == 1 and overall["errors"]["verifier_failed"] == 2
    table = CliRunner().invoke(app, ["report", "j", "--jobs-dir", str(jobs), "-f", "markdown"])
    assert "0.333 (1 left out)" in table.stdout
    assert "3 (resources_unavailable 1, verifier_failed 2)" in table.stdout
    # --errors-as can still choose otherwise
    res = CliRunner().invoke(
        app, ["report", "j", "--jobs-dir", str(jobs), "--json", "--errors-as", "excluded"]
    )
    assert json.loads(res.stdout)["jobs"][0]["overall"]["rewards"]["reward"]["mean"] == 1.0


async def test_retry_errors_on_resume_never_rerolls_a_counted_zero(tmp_path: Path) -> None:
    """Attack (a policy that wants a second draw): its answer breaks its grading, a
    counted verifier_failed. A training loop resumes with --retry-errors to recover
    infrastructure gaps; that reran every trial that was not graded, the attempt's own
    failures too, so each counted 0 of that kind got a fresh draw a graded 0 never gets
    (the mean is biased up). Only what is left out of means may be rerun."""
    tasks = [
        attack_task(
            tmp_path / "tasks" / "huge-int",
            solve=f"echo {DIGITS_400} > /app/answer",
            test=ECHO_ANSWER,
        ),
        attack_task(tmp_path / "tasks" / "gpu", solve="touch /app/ok", toml="gpus = 1\n"),
    ]
    jobs = tmp_path / "jobs"
    cfg = make_job_config(job_id="j", tasks=tasks, agent="oracle", env="local", attempts=1,
                          concurrency=2, dataset=[str(tmp_path / "tasks")])  # fmt: skip

    async def run(**opts: bool) -> dict[str, str]:
        runner = JobRunner(cfg, tasks, LocalProvider(), OracleAgent(), jobs,
                           JobOptions(max_retries=0, **opts))  # fmt: skip
        await runner.run()
        return {r.task_name: r.id for r in iter_trial_results(jobs / "j")}

    first = await run()
    again = await run(retry_errors=True)
    assert again["huge-int"] == first["huge-int"]  # kept: the attempt's own 0
    assert again["gpu"] != first["gpu"]  # rerun: an infrastructure gap
    summary = json.loads((jobs / "j" / "result.json").read_text())
    assert summary["outcomes"]["verifier_failed"] == 1 and summary["mean_reward"] == 0.0
