"""`crucible report`: its JSON agrees with an independent computation from the
trial result files; tables, Markdown, errors and exit codes."""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from math import comb
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.jobs import JobFactory, T
from typer.testing import CliRunner

from crucible.cli.main import app

runner = CliRunner()

MD = {
    "t1": {"category": "x"},
    "t2": {"category": "y"},
    "t3": {"category": "x"},
    "t4": {"category": "y"},
}


def run_cli(*args: str) -> Any:
    return runner.invoke(app, list(args))


@pytest.fixture
def two_jobs(make_job: JobFactory) -> tuple[Path, Path]:
    a = make_job(
        "job-a",
        {
            "t1": [1.0, 0.0, 1.0],
            "t2": [0.0, "sandbox_failed", 0.0],
            "t3": [1.0, 1.0, 1.0],
            "t4": [0.5, 0.0, 1.0],
        },
        metadata=MD,
        model="gpt-4o",
    )
    b = make_job(
        "job-b",
        {
            "t1": [T(1.0, tokens=(1000, 200, 0, 100)), 1.0, 1.0],
            "t2": [1.0, 0.0, 0.0],
            "t3": [0.0, 0.0, T(0.5, cost=0.02)],
            "t4": [1.0, 1.0, "verifier_failed"],
        },
        metadata=MD,
        model="gpt-4o",
    )
    return a, b


def independent(jdir: Path, errors_as: str = "excluded") -> dict[str, Any]:
    """Metrics straight from the result.json files, with the statistics module and math.comb."""
    trials = [
        json.loads((p / "result.json").read_text())
        for p in sorted(jdir.iterdir())
        if (p / "result.json").is_file()
    ]
    by_run: dict[int, list[float]] = defaultdict(list)
    by_task: dict[str, list[float]] = defaultdict(list)
    errors: dict[str, int] = defaultdict(int)
    for t in trials:
        if t["outcome"] == "graded":
            v = t["verifier_result"]["rewards"]["reward"]
        else:
            errors[t["outcome"]] += 1
            blamed = errors_as == "blame" and t["outcome"] == "verifier_failed"
            if errors_as == "excluded" or (errors_as == "blame" and not blamed):
                continue
            v = 0.0
        by_run[t["attempt"]].append(v)
        by_task[t["task_name"]].append(v)
    run_means = [statistics.fmean(v) for v in by_run.values()]
    task_means = {k: statistics.fmean(v) for k, v in by_task.items()}
    passk = {}
    for k in range(1, max(len(v) for v in by_task.values()) + 1):
        vals = [
            1 - comb(len(v) - sum(x >= 1.0 for x in v), k) / comb(len(v), k)
            for v in by_task.values()
            if len(v) >= k
        ]
        passk[k] = statistics.fmean(vals)
    return {
        "mean": statistics.fmean(run_means),
        "se": statistics.stdev(run_means) / math.sqrt(len(run_means)),
        "task_se": statistics.stdev(task_means.values()) / math.sqrt(len(task_means)),
        "task_means": task_means,
        "passk": passk,
        "errors": dict(errors),
    }


@pytest.mark.parametrize("errors_as", ["blame", "excluded", "zero"])
def test_json_agrees_with_independent_computation(
    two_jobs: tuple[Path, Path], jobs_dir: Path, errors_as: str
) -> None:
    res = run_cli(
        "report", "job-a", "job-b", "--jobs-dir", str(jobs_dir), "--json", "--errors-as", errors_as
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["options"]["errors_as"] == errors_as
    for jdir, job in zip(two_jobs, data["jobs"], strict=True):
        want = independent(jdir, errors_as)
        g = job["overall"]
        r = g["rewards"]["reward"]
        assert g["errors_as"] == errors_as
        assert r["mean"] == pytest.approx(want["mean"])
        assert r["se"] == pytest.approx(want["se"])
        assert r["se_method"] == "runs"
        assert r["tasks"]["se"] == pytest.approx(want["task_se"])
        assert g["errors"] == want["errors"]
        assert {p["k"]: p["pass_at_k"] for p in g["pass_k"]} == pytest.approx(want["passk"])
        tmeans = {t["task"]: t["mean"] for t in job["tasks"]}
        assert tmeans == pytest.approx(want["task_means"])
    # paired difference: b - a over the common tasks, SE = sd(d) / sqrt(n)
    wa, wb = independent(two_jobs[0], errors_as), independent(two_jobs[1], errors_as)
    d = [wb["task_means"][t] - wa["task_means"][t] for t in sorted(wa["task_means"])]
    (cmp,) = data["comparisons"]
    assert (cmp["a"], cmp["b"], cmp["n_common"]) == ("job-b", "job-a", 4)
    assert cmp["difference"]["mean"] == pytest.approx(statistics.fmean(d))
    assert cmp["difference"]["se"] == pytest.approx(statistics.stdev(d) / 2)
    half = 3.182446305 * statistics.stdev(d) / 2  # t_{0.975, 3}
    assert cmp["difference"]["ci_low"] == pytest.approx(statistics.fmean(d) - half, abs=1e-7)
    json.dumps(data, allow_nan=False)


def test_cost_in_report(two_jobs: tuple[Path, Path], jobs_dir: Path) -> None:
    res = run_cli("report", "job-b", "--jobs-dir", str(jobs_dir), "--json")
    cost = json.loads(res.stdout)["jobs"][0]["overall"]["cost"]
    # one rollout recorded 0.02; one priced from tokens at gpt-4o's built-in price
    from crucible.llm.pricing import BUILTIN_PRICES

    p = BUILTIN_PRICES["gpt-4o"]
    priced = (800 * p.input + 200 * (p.cached_input or p.input) + 100 * p.output) / 1e6
    assert cost["sources"] == {"recorded": 1, "priced": 1}
    assert cost["total_usd"] == pytest.approx(0.02 + priced)
    assert cost["per_rollout_usd"] == pytest.approx((0.02 + priced) / 2)


def test_price_table_option(make_job: JobFactory, jobs_dir: Path, tmp_path: Path) -> None:
    make_job("j", {"t": [T(1.0, tokens=(2_000_000, 0, 0, 1_000_000))]}, model="org/custom-1")
    prices = tmp_path / "prices.toml"
    prices.write_text('[models."custom-1"]\ninput = 1.0\noutput = 3.0\n')
    res = run_cli(
        "report", "j", "--jobs-dir", str(jobs_dir), "--json", "--price-table", str(prices)
    )
    assert json.loads(res.stdout)["jobs"][0]["overall"]["cost"]["total_usd"] == pytest.approx(5.0)
    res = run_cli("report", "j", "--jobs-dir", str(jobs_dir), "--json")
    assert json.loads(res.stdout)["jobs"][0]["overall"]["cost"]["total_usd"] is None


def test_table_and_markdown(two_jobs: tuple[Path, Path], jobs_dir: Path) -> None:
    res = run_cli(
        "report",
        "job-a",
        "job-b",
        "--jobs-dir",
        str(jobs_dir),
        "--by",
        "category",
        "--format",
        "markdown",
    )
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "## Results" in out and "## By category" in out and "## Paired difference" in out
    assert "category=x" in out and "category=y" in out
    head = out.split("## Why")[0]  # the reasons table lists trials, one row each
    rows = [ln for ln in head.splitlines() if ln.startswith(("| job-a |", "| job-b |"))]
    assert len(rows) == 4  # two in Results, two in the breakdown
    assert "sandbox_failed 1" in out
    # by default a verifier_failed is a 0; the infrastructure error left out is shown
    assert "verifier_failed counts as 0, infrastructure errors left out" in out
    assert "(1 left out)" in out
    assert "| job-b - job-a | reward | 4 |" in out
    res = run_cli("report", "job-a", "job-b", "--jobs-dir", str(jobs_dir))
    assert res.exit_code == 0 and "Paired difference" in res.stdout


def test_job_by_path_name_and_output_file(two_jobs: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = run_cli(
        "report",
        str(two_jobs[0]),
        "--format",
        "json",
        "-o",
        str(out),
        "--jobs-dir",
        str(tmp_path / "none"),
    )
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["jobs"][0]["job_id"] == "job-a"


def test_unknown_job_exits_3_with_json_error(jobs_dir: Path, two_jobs: tuple[Path, Path]) -> None:
    res = run_cli("report", "job-a", "nope", "--jobs-dir", str(jobs_dir), "--json")
    assert res.exit_code == 3
    err = json.loads(res.stderr)
    assert err["error"] == "not_found" and "nope" in err["message"]
    res = run_cli("report", "job-", "--jobs-dir", str(jobs_dir), "--json")
    assert res.exit_code == 3 and "ambiguous" in json.loads(res.stderr)["message"]


def test_running_job_with_partial_records(make_job: JobFactory, jobs_dir: Path) -> None:
    jdir = make_job("live", {"t1": [1.0], "t2": [0.0]}, status="running", attempts=2)
    (jdir / "t3__0").mkdir()
    (jdir / "t3__0" / "result.json").write_text('{"id": "half-writ')  # being written
    res = run_cli("report", "live", "--jobs-dir", str(jobs_dir), "--json")
    job = json.loads(res.stdout)["jobs"][0]
    assert job["status"] == "running" and job["overall"]["n_trials"] == 2 and job["n_planned"] == 4


@pytest.mark.parametrize("declared", [None, [0, 100]])
def test_intervals_are_cut_to_0_1_only_for_tasks_in_0_1(
    make_job: JobFactory, jobs_dir: Path, declared: list[int] | None
) -> None:
    md = {"t": {"crucible": {"reward_range": declared}}} if declared else None
    make_job("ci", {"t": [1.0, 0.0, 1.0], "u": [1.0, 1.0, 0.0]}, metadata=md)
    res = run_cli("report", "ci", "--jobs-dir", str(jobs_dir), "--format", "markdown")
    assert res.exit_code == 0, res.output
    high = json.loads(run_cli("report", "ci", "--jobs-dir", str(jobs_dir), "--json").stdout)
    ci_high = high["jobs"][0]["overall"]["rewards"]["reward"]["ci_high"]
    assert ci_high > 1.0  # three runs: the t interval is wide
    assert ("1.000]" in res.stdout) == (declared is None), res.stdout
