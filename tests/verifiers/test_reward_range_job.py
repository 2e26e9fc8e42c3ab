"""Attack: a task's test writes a reward no honest grader gives (1.5e308, nan, inf, -1,
2, a 400-digit integer, a second key of 1.5e308), in a real `crucible run` beside an
honest task. Each bad trial is verifier_failed (counted 0) with its value in the
reason; the honest trial is counted; the job's mean is finite and `report` works.
A task that declares `reward_range = [0, 100]` has its 50 counted as 50.

Before the range check, 1.5e308 was graded as a reward: the summary's mean was inf
(written as null), and `crucible report` died in fsum for the whole jobs folder.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.store.layout import iter_trial_results
from crucible.verifiers.pipeline import stage_problems

runner = CliRunner()
HUGE_INT = "1" + "0" * 400
# A test that writes a reward per key of 60,000 made `report` take 13 s for that one
# trial (a mean, SE and CI per key, for every job of the folder): a few such tasks and
# no report of the folder comes back. More rewards than a report can show: refused.
MANY_KEYS = ", ".join(f'"k{i}": 0' for i in range(300))

# name -> (what test.sh writes, task.toml extra); "json:" writes reward.json instead
BAD: dict[str, tuple[str, str]] = {
    "huge": ("1.5e308", ""),
    "nan": ("nan", ""),
    "inf": ("inf", ""),
    "e400": ("1e400", ""),
    "neg": ("-1", ""),
    "two": ("2", ""),
    "json-second-key": ('json:{"reward": 1, "bonus": 1.5e308}', ""),
    "json-huge-int": (f'json:{{"reward": {HUGE_INT}}}', ""),
    "json-many-keys": (f'json:{{"reward": 1, {MANY_KEYS}}}', ""),
    "range-above": ("101", "[metadata.crucible]\nreward_range = [0, 100]\n"),
}
GOOD: dict[str, tuple[str, str]] = {
    "honest": ("1", ""),
    "ranged": ("50", "[metadata.crucible]\nreward_range = [0, 100]\n"),
}
SHOWN = {  # the value as the reason names it
    "huge": "1.5e+308",
    "nan": "not finite",
    "inf": "not finite",
    "e400": "not finite",
    "neg": "-1.0",
    "two": "2.0",
    "json-second-key": "1.5e+308",
    "json-huge-int": "too large",
    "json-many-keys": "301 rewards",
    "range-above": "101.0",
}


def make_task(root: Path, writes: str, toml: str) -> Path:
    root.mkdir(parents=True)
    (root / "task.toml").write_text(
        'schema_version = "1.1"\n[verifier]\ntimeout_sec = 30\n[agent]\ntimeout_sec = 30\n' + toml
    )
    (root / "instruction.md").write_text("Do the thing.\n")
    if writes.startswith("json:"):
        body = f"cat > /logs/verifier/reward.json <<'EOF'\n{writes[5:]}\nEOF"
    else:
        body = f"echo '{writes}' > /logs/verifier/reward.txt"
    for sub, name, text in (("tests", "test.sh", body), ("solution", "solve.sh", "true")):
        (root / sub).mkdir()
        (root / sub / name).write_text("#!/usr/bin/env bash\n" + text + "\n")
    return root


def run_job(tasks: Path, jobs: Path, name: str) -> dict[str, Any]:
    res = runner.invoke(app, ["run", str(tasks), "--agent", "oracle", "--env", "local",
                              "--jobs-dir", str(jobs), "--job-name", name, "--max-retries", "0",
                              "--concurrency", "4", "--json", "--quiet"])  # fmt: skip
    assert res.exit_code == 0, res.output
    summary: dict[str, Any] = json.loads((jobs / name / "result.json").read_text())
    return summary


def test_out_of_range_rewards_are_verifier_failed_beside_an_honest_trial(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    for name, (writes, toml) in {**BAD, **GOOD}.items():
        make_task(tasks / name, writes, toml)
    jobs = tmp_path / "jobs"
    summary = run_job(tasks, jobs, "rewards")

    by_task = {r.task_name: r for r in iter_trial_results(jobs / "rewards")}
    assert set(by_task) == set(BAD) | set(GOOD)
    for name in BAD:
        r = by_task[name]
        assert r.outcome == "verifier_failed", (name, r.outcome, r.verifier_result)
        assert r.counted_reward == 0.0
        assert r.error is not None and SHOWN[name] in r.error.message, (name, r.error)
    assert by_task["honest"].outcome == "graded" and by_task["honest"].reward == 1.0
    assert by_task["ranged"].outcome == "graded" and by_task["ranged"].reward == 50.0

    # (1 + 50 + 0 * 9) / 11: finite, stored as a number, never null
    n = len(BAD) + len(GOOD)
    assert summary["mean_reward"] == pytest.approx(51 / n)
    assert summary["outcomes"] == {"graded": 2, "verifier_failed": len(BAD)}

    rep = runner.invoke(app, ["report", "rewards", "--jobs-dir", str(jobs), "--json"])
    assert rep.exit_code == 0, rep.output
    overall = json.loads(rep.stdout)["jobs"][0]["overall"]
    mean = overall["rewards"]["reward"]["mean"]
    assert mean is not None and math.isfinite(mean) and mean == pytest.approx(51 / n)


@pytest.mark.parametrize(
    "declared, why",
    [
        ("[1, 0]", "lo < hi"),
        ("[0, inf]", "finite"),
        ("[nan, 1]", "finite"),
        ("[0, 1e400]", "finite"),
        ('["0", 1]', "numbers"),
        ("[0]", "[lo, hi]"),
        ("[0, 1e13]", "within"),
    ],
)
def test_an_invalid_reward_range_is_refused_at_load(
    tmp_path: Path, declared: str, why: str
) -> None:
    from crucible.tasks.loader import load_task

    root = make_task(tmp_path / "t", "1", f"[metadata.crucible]\nreward_range = {declared}\n")
    problems = stage_problems(load_task(root))
    assert problems and "reward_range" in problems[0] and why in problems[0], problems


@pytest.mark.docker
def test_out_of_range_reward_on_docker(tmp_path: Path, docker_engine: None) -> None:
    from tests.conftest import EXAMPLES_IMAGE

    image = f'[environment]\ndocker_image = "{EXAMPLES_IMAGE}"\nnetwork_mode = "no-network"\n'
    tasks = tmp_path / "tasks"
    make_task(tasks / "honest", "1", image)
    make_task(tasks / "huge", 'json:{"reward": 1, "bonus": 1.5e308}', image)
    jobs = tmp_path / "jobs"
    res = runner.invoke(app, ["run", str(tasks), "--agent", "oracle", "--env", "docker",
                              "--jobs-dir", str(jobs), "--job-name", "d", "--max-retries", "0",
                              "--json", "--quiet"])  # fmt: skip
    assert res.exit_code == 0, res.output
    by_task = {r.task_name: r for r in iter_trial_results(jobs / "d")}
    assert by_task["honest"].outcome == "graded" and by_task["honest"].reward == 1.0
    huge = by_task["huge"]
    assert huge.outcome == "verifier_failed" and huge.error is not None
    assert "1.5e+308" in huge.error.message
    summary = json.loads((jobs / "d" / "result.json").read_text())
    assert summary["mean_reward"] == pytest.approx(0.5)
