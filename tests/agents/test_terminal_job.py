"""End to end: `crucible run --agent terminal` against the scripted server, local sandboxes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.helpers.fake_openai import FakeOpenAI, bash, submit
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.llm.pricing import cost_usd
from crucible.records.trajectory import load_trajectory
from crucible.store.layout import iter_trial_results

ROOT = Path(__file__).resolve().parents[2]
HELLO = ROOT / "examples" / "tasks" / "hello-file"
runner = CliRunner()


def run_job(server: FakeOpenAI, jobs: Path, *extra: str, code: int = 0) -> dict[str, object]:
    result = runner.invoke(
        app,
        [
            "run", str(HELLO), "--agent", "terminal", "--env", "local",
            "--model", "gpt-4o", "--model-base-url", server.url,
            "--model-api-key-env", "CRUCIBLE_E2E_KEY",
            "--jobs-dir", str(jobs), "--json", "--quiet", *extra,
        ],
    )  # fmt: skip
    assert result.exit_code == code, result.output
    summary: dict[str, object] = json.loads(result.stdout)
    return summary


def test_job_grades_hello_file_with_usage_and_cost(
    fake_openai: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRUCIBLE_E2E_KEY", "sk-e2e")
    fake_openai.push(
        bash("ls -la /app", cached_tokens=10),
        bash("printf 'Hello, crucible!\\n' > /app/hello.txt"),
        submit(cached_tokens=20),
    )
    rl = ["--agent-kwarg", "top_p=0.5", "--agent-kwarg", 'extra_body={"min_tokens": 2}']
    summary = run_job(fake_openai, tmp_path / "jobs", *rl)
    assert summary["outcomes"] == {"graded": 1}
    assert summary["mean_reward"] == 1.0
    # sampling options and extra_body from the CLI reach every request
    assert all(r["top_p"] == 0.5 and r["min_tokens"] == 2 for r in fake_openai.requests)

    (trial,) = iter_trial_results(tmp_path / "jobs" / str(summary["job_id"]))
    assert trial.reward == 1.0
    ar = trial.agent_result
    assert ar is not None
    reported = fake_openai.reported_usage
    assert (ar.n_input_tokens, ar.n_cache_tokens, ar.n_output_tokens) == (
        reported["prompt_tokens"],
        reported["cached_tokens"],
        reported["completion_tokens"],
    )
    usage = {
        "prompt_tokens": reported["prompt_tokens"],
        "completion_tokens": reported["completion_tokens"],
        "prompt_tokens_details": {"cached_tokens": reported["cached_tokens"]},
    }
    assert ar.cost_usd == pytest.approx(cost_usd("gpt-4o", usage))
    assert ar.n_turns == 3
    assert fake_openai.request_headers[0]["Authorization"] == "Bearer sk-e2e"
    trial_dir = tmp_path / "jobs" / str(summary["job_id"]) / trial.trial_name
    assert load_trajectory(trial_dir / "agent").status == "submitted"
    # The key is nowhere in what the job wrote.
    for f in (tmp_path / "jobs").rglob("*"):
        if f.is_file() and f.suffix != ".sqlite":
            assert "sk-e2e" not in f.read_text(errors="replace"), f


def test_job_against_a_failing_server_is_model_failed_not_zero(
    fake_openai: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRUCIBLE_E2E_KEY", "sk-e2e")
    fake_openai.fail_always = 503
    summary = run_job(
        fake_openai,
        tmp_path / "jobs",
        "--attempts",
        "2",
        "--max-retries",
        "0",
        "--agent-kwarg",
        "max_retries=1",
        code=1,  # nothing was graded: a script must notice
    )
    assert summary["outcomes"] == {"model_failed": 2}
    assert summary["mean_reward"] is None
    trials = iter_trial_results(tmp_path / "jobs" / str(summary["job_id"]))
    assert len(trials) == 2
    for trial in trials:
        assert trial.outcome == "model_failed" and trial.reward is None
        assert trial.error is not None and "503" in trial.error.message
    assert len(fake_openai.requests) == 4  # two attempts per trial, no more
