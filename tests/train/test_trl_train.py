"""crucible.train end to end: `train smoke` (one step, tiny random model, tokenizer trained on
the spot, nothing downloaded), a short TRL GRPO run whose reward per step and components
`runs get --verbose` shows and whose samples `runs trace` exports, the dry-run plan, a
reward that raises failing the run, and a run launched detached from another process,
followed with `runs get`/`runs list` beside a job, and stopped with `runs cancel`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers.jobs import write_job
from tests.helpers.wait import wait_until
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.train import load_config

pytest.importorskip("trl")
HERE = Path(__file__).parent
TINY = HERE / "tiny_config.py"
ROOT = HERE.parents[1]


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(name, "1")
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")


def cli(*args: object, code: int = 0) -> dict:
    res = CliRunner().invoke(app, [str(a) for a in args])
    assert res.exit_code == code, (args, res.stdout, res.stderr)
    return json.loads(res.stdout)


def test_smoke_runs_one_step_on_a_tiny_local_model_and_shows_samples(tmp_path: Path) -> None:
    got = cli("train", "smoke", TINY, "--jobs-dir", tmp_path, "--json")
    assert got["state"] == "completed" and got["step"] == 1
    assert len(got["reward_per_step"]) == 1 and got["samples"]
    for s in got["samples"]:  # the reward of the config, components and all, on real output
        hit = 1.0 if s["label"] in s["response"].lower() else 0.0
        assert s["components"]["hit"] == hit and s["reward"] == hit + 0.5 * s["components"]["short"]
    assert cli("runs", "get", got["run_id"], "--jobs-dir", tmp_path, "--json")["smoke"] is True


def test_a_short_trl_run_records_reward_per_step_and_samples(tmp_path: Path) -> None:
    config = load_config(TINY)
    run_id = config.launch(detach=False, jobs_dir=tmp_path)
    got = cli("runs", "get", run_id, "--jobs-dir", tmp_path, "--verbose", "--json")
    assert got["status"] == "completed" and got["step"] == 2
    steps = got["reward_per_step"]
    assert [p["step"] for p in steps] == [1, 2] and all(p["n_samples"] == 4 for p in steps)
    assert all(set(p["components"]) == {"hit", "short"} for p in steps)
    assert [c["path"] for c in got["checkpoints"]] == ["checkpoints/final"]
    assert (tmp_path / run_id / "checkpoints" / "final" / "config.json").is_file()
    trace = cli("runs", "trace", run_id, "--out", tmp_path / "t", "--yes", "--jobs-dir", tmp_path,
                "--json")  # fmt: skip
    assert [f["n_samples"] for f in trace["files"]] == [3, 3]  # trace_samples=3 a step
    listed = cli("runs", "list", "--jobs-dir", tmp_path, "--json")["jobs"]
    assert [(r["job_id"], r["kind"]) for r in listed] == [(run_id, "train")]


def test_dry_run_prints_the_plan_with_the_knobs_as_trl_gets_them(tmp_path: Path) -> None:
    plan = cli("train", "launch", TINY, "--dry-run", "--jobs-dir", tmp_path, "--json")
    k = plan["knobs"]
    assert plan["trainer"].startswith("trl ") and plan["where"] == "local"
    assert (k["max_steps"], k["per_device_train_batch_size"], k["num_generations"],
            k["max_completion_length"], k["learning_rate"]) == (2, 4, 2, 8, 1e-4)  # fmt: skip
    assert not tmp_path.exists() or not any(tmp_path.iterdir())  # nothing started


def test_a_reward_that_raises_fails_the_run_with_its_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad_config.py"
    bad.write_text(TINY.read_text().replace('return {"total"', 'raise KeyError("no rhyme")\n    return {"total"')
                   .replace('HERE / "tiny_prompts.jsonl"', f'Path({str(HERE / "tiny_prompts.jsonl")!r})'))  # fmt: skip
    got = cli("train", "smoke", bad, "--jobs-dir", tmp_path / "jobs", "--json", code=1)
    assert got["state"] == "failed" and "no rhyme" in got["error"]


def test_a_detached_run_is_followed_from_another_process_and_cancelled(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    write_job(jobs, "job-a", {"t1": [1.0]})
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run(
        [sys.executable, "-m", "crucible.cli.main", "train", "launch", str(HERE / "loop_config.py"),
         "--jobs-dir", str(jobs), "--json"],
        capture_output=True, text=True, env=env, check=True, timeout=120,
    )  # fmt: skip
    run_id = json.loads(out.stdout)["run_id"]  # the launcher has exited; the worker runs on

    def running() -> dict | None:
        got = cli("runs", "get", run_id, "--jobs-dir", jobs, "--json")
        return got if got["status"] == "running" and got["step"] == 1 else None

    got = wait_until(running, "the detached run's first step")
    assert got["pid"] != os.getpid() and got["reward_mean"] == 0.5
    kinds = {
        r["job_id"]: r["kind"] for r in cli("runs", "list", "--jobs-dir", jobs, "--json")["jobs"]
    }
    assert kinds == {"job-a": "job", run_id: "train"}
    report = cli("runs", "cancel", run_id, "--jobs-dir", jobs, "--wait", "120", "--json")
    assert report["stopped"] and report["status"] == "cancelled"
    config = load_config(HERE / "loop_config.py")
    config.jobs_dir = jobs
    assert config.wait(run_id, timeout_s=120).state == "cancelled"
