"""A job whose trials write different reward keys: one task writes `reward`, another only
`correctness` and `style`. Before, the trials without `reward` vanished from the mean and
pass@k and from the "left out" count (a task that scored 1,1 showed as "- (0/1)"). Now each
key is aggregated over every graded trial, a trial without it counting 0, as Harbor 0.25
counts a missing reward or key (its metrics docs; src/harbor/metrics/mean.py), and how
many counted so is shown beside the mean, in the report, the job summary and the Why table.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers.jobs import JobFactory, T
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.engine.summary import summarize
from crucible.metrics.aggregate import group_metrics
from crucible.metrics.model import MetricOptions
from crucible.metrics.records import TrialRecord
from crucible.records.trial import AgentInfo, TrialResult, VerifierResult

MULTI = {"correctness": 1.0, "style": 1.0}


def _result(task: str, attempt: int, rewards: dict[str, float]) -> TrialResult:
    return TrialResult(
        id=f"{task}-{attempt}",
        trial_name=f"{task}__{attempt}",
        task_name=task,
        job_id="mixed",
        attempt=attempt,
        task_checksum="0" * 64,
        agent_info=AgentInfo(name="oracle", version="1"),
        verifier_result=VerifierResult(rewards=rewards),
    )


def _record(task: str, attempt: int, rewards: dict[str, float]) -> TrialRecord:
    return TrialRecord(task=task, attempt=attempt, outcome="graded", rewards=rewards)


def test_a_trial_without_the_primary_key_counts_zero_and_is_counted() -> None:
    records = [_record("plain", 0, {"reward": 1.0}), _record("multi", 0, MULTI)]
    g = group_metrics(records, MetricOptions())
    rs = g.reward()
    assert g.primary == "reward" and rs is not None
    assert (rs.mean, rs.n_scored, g.n_scored) == (0.5, 2, 2)  # before: 1.0 over 1 trial
    assert g.n_without_primary == 1
    assert g.pass_k[0].k == 1 and g.pass_k[0].pass_at_k == 0.5  # both tasks in pass@1
    # Each key over every trial: the plain task lacks correctness, counting 0 there.
    assert g.rewards["correctness"].mean == 0.5 and g.rewards["correctness"].n_scored == 2
    # A job where every trial has the key names none.
    same = group_metrics([_record("plain", 0, {"reward": 1.0})], MetricOptions())
    assert same.n_without_primary == 0


def test_the_job_summary_agrees_with_the_report() -> None:
    results = [_result("plain", 0, {"reward": 1.0}), _result("multi", 0, MULTI)]
    s = summarize("mixed", "completed", results, 2)
    # Before: the summary took each trial's own first key (mean 1.0), pass@1 dropped the
    # multi-reward trial (1.0 over one task): the two disagreed, and neither said so.
    assert (s.mean_reward, s.pass_at_k["pass@1"]) == (0.5, 0.5)
    assert (s.primary, s.n_without_primary, s.n_excluded) == ("reward", 1, 0)


def test_the_report_shows_the_trials_without_reward(make_job: JobFactory) -> None:
    job = make_job("mixed", {"plain": [1.0, 1.0], "multi": [T(MULTI), T(MULTI)]})
    res = CliRunner().invoke(app, ["report", str(job), "-f", "markdown"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    results = res.output.split("## Results")[1].split("##")[0]
    assert "0.500 ± 0.000 (2 without 'reward': 0)" in results, results
    by_task = res.output.split("## By task")[1].split("##")[0]
    assert "| multi | 0.000 (2/2) |" in by_task, by_task  # before: "- (0/2)"
    why = res.output.split("## Why")[1]
    assert "| mixed | multi__0 | no 'reward' key: 0 |" in why, why


def _task(root: Path, name: str, reward_json: str) -> Path:
    d = root / name
    (d / "tests").mkdir(parents=True)
    (d / "solution").mkdir()
    (d / "task.toml").write_text(
        'schema_version = "1.1"\n[environment]\nnetwork_mode = "no-network"\n'
        "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n"
    )
    (d / "instruction.md").write_text("Nothing to do.\n")
    (d / "solution" / "solve.sh").write_text("#!/usr/bin/env bash\ntrue\n")
    (d / "tests" / "test.sh").write_text(
        f"#!/usr/bin/env bash\necho '{reward_json}' > /logs/verifier/reward.json\n"
    )
    return d


def test_the_run_summary_says_so(tmp_path: Path) -> None:
    """A real job on local sandboxes: `crucible run`'s closing table."""
    tasks = tmp_path / "tasks"
    _task(tasks, "plain", '{"reward": 1.0}')
    _task(tasks, "multi", '{"correctness": 1.0, "style": 1.0}')
    args = ["run", str(tasks), "-a", "oracle", "--jobs-dir", str(tmp_path / "jobs")]
    out = CliRunner().invoke(app, [*args, "--job-name", "mixed"], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "0.500 (1 graded without 'reward': counted 0)" in out.output, out.output
    # The task's own row is on the same key: before, 1.000 here and "- (0/1)" in the report.
    rows = [[c.strip() for c in ln.split("│")][1:4] for ln in out.output.splitlines()]
    assert ["multi", "1", "0.000"] in rows, out.output
