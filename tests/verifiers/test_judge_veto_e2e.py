"""The judge's veto end to end: a real job of the terminal agent, on local sandboxes,
against two scripted OpenAI-compatible servers (the agent's model and the judge), on a
small Modal translation task (tasks/modal-wordcount).

Rollout 1 is decorator-only: the GPU function is there and reached (`count.local`), so
the test script and the contracts gate pass, but the counting runs locally; the judge
vetoes it and the reward is 0, with the reason in result.json and `runs get`. Rollout 2
fans out with `.map`; the judge passes it: 1.0. The agent reads the Modal API reference
built from the installed SDK through its docs tool on the way. With no judge endpoint
set, the task (if_unconfigured = "skip") still runs offline and is graded.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.fake_openai import FakeOpenAI, Step, bash, submit, text, tool
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.docs.index import build_package_index
from crucible.store.layout import iter_trial_results

TASK = Path(__file__).resolve().parent / "tasks" / "modal-wordcount"
PROPER = (TASK / "solution" / "main.py").read_text()
DECORATOR_ONLY = PROPER.replace("sum(count.map(LINES))", "sum(count.local(line) for line in LINES)")
VETO_REASON = "count runs only via .local in the entrypoint: the GPU function does no work"
PASS_REASON = "count.map fans the lines out to the GPU function"
runner = CliRunner()


def write_program(program: str) -> Step:
    return bash(f"cat > /app/main.py <<'EOF'\n{program}EOF")


def expect_tool_output(needle: str, then: Step) -> Any:
    """A step that first checks that the last tool result the agent saw holds `needle`."""

    def step(body: dict[str, Any]) -> Step:
        last = body["messages"][-1]
        assert last["role"] == "tool" and needle in last["content"], last
        return then

    return step


def judge_reply(body: dict[str, Any]) -> Step:
    """The scripted judge: a veto for code that only calls the GPU function with .local."""
    prompt = body["messages"][1]["content"]
    assert "Port this Python program to Modal" in prompt  # the instruction
    assert "app, function, gpu, local_entrypoint" in prompt  # the required contracts
    assert "### /app/main.py" in prompt  # the submitted code
    if "count.local(" in prompt:
        verdict = {"verdict": "veto", "reason": VETO_REASON}
        usage = {"prompt_tokens": 700, "completion_tokens": 30}
    else:
        assert "count.map(LINES)" in prompt
        verdict = {"verdict": "pass", "reason": PASS_REASON}
        usage = {"prompt_tokens": 650, "completion_tokens": 20}
    return text(json.dumps(verdict), usage=usage)


def cli(*args: str) -> str:
    result = runner.invoke(app, list(args), env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    return result.stdout


def trials(jobs: Path, name: str) -> list[dict[str, Any]]:
    return [r.model_dump(mode="json") for r in iter_trial_results(jobs / name)]


def test_terminal_agent_decorator_only_is_vetoed_and_proper_port_scores_one(
    fake_openai: FakeOpenAI, judge: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = fake_openai
    monkeypatch.setenv("CRUCIBLE_TEST_AGENT_KEY", "agent-secret")
    docs = tmp_path / "modal-docs"
    build_package_index("modal", docs)
    agent.push(
        # rollout 1 looks the API up in the installed SDK's reference, then only decorates
        tool("docs", {"action": "query", "keys": "Function.map"}),
        expect_tool_output(
            "modal.Function.map", tool("docs", {"action": "show", "page": "Function.map"})
        ),
        expect_tool_output("order_outputs: bool = True", write_program(DECORATOR_ONLY)),
        submit(),
        # rollout 2 ports it properly
        write_program(PROPER),
        submit(),
    )
    judge.push(judge_reply, judge_reply)
    jobs = tmp_path / "jobs"
    out = cli("run", str(TASK), "--agent", "terminal", "--env", "local", "--model", "gpt-4o",
              "--model-base-url", agent.url, "--model-api-key-env", "CRUCIBLE_TEST_AGENT_KEY",
              "--docs-index", str(docs), "--attempts", "2", "--concurrency", "1",
              "--jobs-dir", str(jobs), "--job-name", "wc", "--max-retries", "0",
              "--json", "--quiet")  # fmt: skip
    summary = json.loads(out)
    assert summary["outcomes"] == {"graded": 2} and summary["mean_reward"] == 0.5, summary
    assert not agent.exhausted and not judge.exhausted and len(judge.requests) == 2
    assert judge.request_headers[0]["Authorization"] == "Bearer judge-secret"

    by_reward = sorted(trials(jobs, "wc"), key=lambda r: r["verifier_result"]["rewards"]["reward"])
    vetoed, passed = by_reward
    for r, status, verdict, reason, tokens in (
        (vetoed, "vetoed", "veto", VETO_REASON, (700, 30)),
        (passed, "passed", "pass", PASS_REASON, (650, 20)),
    ):
        v = r["verifier_result"]
        assert r["outcome"] == "graded" and v["script_rewards"] == {"reward": 1.0}
        script, contracts, judge_stage = v["stages"]
        assert (script["status"], contracts["status"]) == ("passed", "passed")
        assert contracts["details"]["missing"] == []  # the gate alone lets both through
        assert (judge_stage["status"], judge_stage["verdict"], judge_stage["reason"]) == (
            status,
            verdict,
            reason,
        )
        assert judge_stage["model"]["model"] == "gpt-4o-mini"
        assert judge_stage["model"]["prompt_version"] and judge_stage["model"]["calls"] == 1
        usage = judge_stage["usage"]
        assert (usage["input_tokens"], usage["output_tokens"]) == tokens
        assert judge_stage["cost_usd"] > 0  # priced apart from the agent's cost
    assert vetoed["verifier_result"]["rewards"] == {
        "reward": 0.0,
        "contracts.present": 1.0,
        "judge.pass": 0.0,
    }
    assert passed["verifier_result"]["rewards"] == {
        "reward": 1.0,
        "contracts.present": 1.0,
        "judge.pass": 1.0,
    }
    # the agent's tokens are exactly what the agent's server reported; none of the judge's
    agent_in = sum(r["agent_result"]["n_input_tokens"] for r in by_reward)
    assert agent_in == agent.reported_usage["prompt_tokens"]
    assert all(r["agent_result"]["cost_usd"] > 0 for r in by_reward)

    verbose = cli("runs", "get", "wc", "--jobs-dir", str(jobs), "--verbose")
    assert f"{vetoed['trial_name']}: judge vetoed: {VETO_REASON}" in verbose
    detail = json.loads(cli("runs", "get", "wc", "--jobs-dir", str(jobs), "--verbose", "--json"))
    notes = {t["trial_name"]: t["stage_note"] for t in detail["trials"]}
    assert notes == {
        vetoed["trial_name"]: f"judge vetoed: {VETO_REASON}",
        passed["trial_name"]: None,
    }

    # one trial in detail: every stage, the whole reason, the judge's tokens apart
    one = cli("runs", "get", "wc", "--jobs-dir", str(jobs), "--trial", vetoed["trial_name"])
    assert "judge (judge, veto): vetoed verdict veto  pass=0" in one
    assert f"reason: {VETO_REASON}" in one and "model gpt-4o-mini" in one
    assert "700 in / 30 out tokens" in one and "test script gave reward 1.000" in one
    shown = json.loads(cli("runs", "get", "wc", "--jobs-dir", str(jobs), "--trial",
                           vetoed["trial_name"], "--json"))  # fmt: skip
    assert shown["reward"] == 0.0 and shown["stage_note"] == f"judge vetoed: {VETO_REASON}"
    assert [s["status"] for s in shown["stages"]] == ["passed", "passed", "vetoed"]
    assert shown["agent"]["n_input_tokens"] == vetoed["agent_result"]["n_input_tokens"]
    assert shown["stage_cost_usd"] == vetoed["verifier_result"]["stages"][2]["cost_usd"]

    for name, code in (("modal-wordcount__", 2), ("no-such-trial", 3)):
        res = runner.invoke(app, ["runs", "get", "wc", "--jobs-dir", str(jobs), "--trial", name])
        assert res.exit_code == code, res.output

    report = cli("report", "wc", "--jobs-dir", str(jobs))
    for column in ("reward", "contracts.present", "judge.pass"):
        assert column in report
    rep = json.loads(cli("report", "wc", "--jobs-dir", str(jobs), "--format", "json"))
    overall = rep["jobs"][0]["overall"]
    means = {k: v["mean"] for k, v in overall["rewards"].items()}
    assert means == {"reward": 0.5, "contracts.present": 1.0, "judge.pass": 0.5}
    # the judge's tokens and cost are reported apart from the agent's
    cost = overall["cost"]
    assert cost["tokens_total"]["input"] == agent.reported_usage["prompt_tokens"]
    assert cost["verifier_n_judged"] == 2 and cost["verifier_tokens_total"] == 700 + 30 + 650 + 20
    assert cost["verifier_total_usd"] == pytest.approx(
        sum(r["verifier_result"]["stages"][2]["cost_usd"] for r in by_reward)
    )


def test_without_a_judge_endpoint_the_task_runs_offline_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CRUCIBLE_JUDGE_BASE_URL", raising=False)
    jobs = tmp_path / "jobs"
    out = cli("run", str(TASK), "--agent", "oracle", "--env", "local", "--jobs-dir", str(jobs),
              "--job-name", "offline", "--max-retries", "0", "--json", "--quiet")  # fmt: skip
    assert json.loads(out)["mean_reward"] == 1.0
    (r,) = trials(jobs, "offline")
    v = r["verifier_result"]
    judge_stage = v["stages"][-1]
    assert (judge_stage["status"], judge_stage["reason"]) == (
        "skipped",
        "judge not configured: $CRUCIBLE_JUDGE_BASE_URL is unset",
    )
    assert judge_stage["usage"] is None and v["rewards"] == {
        "reward": 1.0,
        "contracts.present": 1.0,
    }
    # The reward stands, but the trial is not fully graded: the task's veto never ran.
    # Before, it read as a plain pass everywhere; now the summary, the closing table, the
    # report and `runs get` count it.
    why = "judge veto not run: no judge configured"
    assert judge_stage["not_run"] == "no judge configured"
    summary = json.loads(out)
    assert (summary["n_not_fully_graded"], summary["not_fully_graded"]) == (1, {why: 1})
    shown = f"1 trial not fully graded ({why})"
    table = runner.invoke(app, ["run", str(TASK), "--agent", "oracle", "--env", "local",
                                "--jobs-dir", str(jobs), "--job-name", "offline"],
                          env={"COLUMNS": "250"})  # fmt: skip
    assert shown in table.stdout, table.stdout  # the closing table of a resumed job
    assert shown in " ".join(cli("report", "offline", "--jobs-dir", str(jobs)).split())
    overall = json.loads(cli("report", "offline", "--jobs-dir", str(jobs), "--format", "json"))
    assert overall["jobs"][0]["overall"]["not_fully_graded"] == {why: 1}
    assert shown in cli("runs", "get", "offline", "--jobs-dir", str(jobs))
    one = cli("runs", "get", "offline", "--jobs-dir", str(jobs), "--trial", r["trial_name"])
    assert f"not fully graded: {why}" in one


# What the policy submits around the vetoed port, and the judge's context (in characters).
PADDED = {
    # the prompt no longer fits: the endpoint answered 400 context_length_exceeded, the
    # stage crashed as model_failed, and the trial was left out of the mean and retried
    "overflow": (DECORATOR_ONLY + "# " + "\u4e2d" * 30_000 + "\n", 20_000),
    # the judge reads the first 60,000 characters: the cheat after them was never shown,
    # and the judge passed a port that does its work locally (1.0)
    "hidden": ("# " + "padding " * 8_000 + "\n" + DECORATOR_ONLY, None),
    # words the judge's provider filters: its endpoint refused the prompt (HTTP 400
    # content_filter), the stage crashed as model_failed: left out and retried
    "flagged": (DECORATOR_ONLY + "# FLAGGED-WORDS\n", None),
}


def vetoes_what_it_sees(body: dict[str, Any]) -> Step:
    """A judge that vetoes the decorator-only port when its prompt shows it."""
    if "FLAGGED-WORDS" in body["messages"][1]["content"]:  # as Azure OpenAI refuses
        refusal = {"code": "content_filter", "message": "The response was filtered due to the "
                   "prompt triggering Azure OpenAI's content management policy."}  # fmt: skip
        return Step(status=400, error=refusal)
    seen = "count.local(" in body["messages"][1]["content"]
    verdict = {"verdict": "veto" if seen else "pass", "reason": "as seen"}
    return text(json.dumps(verdict), usage={"prompt_tokens": 700, "completion_tokens": 30})


@pytest.mark.parametrize("case", sorted(PADDED))
def test_a_padded_submission_cannot_dodge_the_judge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """Attack (a policy the judge would veto): pad the port. The submission is the
    judge's input: one it cannot read whole, or that does not fit its context, counts
    against the attempt (verifier_failed, 0), never as a pass or an excluded error."""
    program, limit = PADDED[case]
    task = tmp_path / "tasks" / "wordcount"
    shutil.copytree(TASK, task)
    (task / "solution" / "main.py").write_text(program)
    jobs = tmp_path / "jobs"
    with FakeOpenAI(context_limit_chars=limit) as judge:
        judge.push(vetoes_what_it_sees, vetoes_what_it_sees)
        monkeypatch.setenv("CRUCIBLE_JUDGE_BASE_URL", judge.url)
        monkeypatch.setenv("CRUCIBLE_JUDGE_API_KEY", "judge-secret")
        runner.invoke(app, ["run", str(task), "--agent", "oracle", "--env", "local",
                            "--jobs-dir", str(jobs), "--job-name", "pad", "--max-retries", "1",
                            "--json", "--quiet"])  # fmt: skip
    summary = json.loads((jobs / "pad" / "result.json").read_text())  # exits 1: none graded
    (r,) = trials(jobs, "pad")
    assert r["outcome"] == "verifier_failed", (r["outcome"], r["error"])
    assert "judge" in r["error"]["message"], r["error"]
    assert summary["n_retries"] == 0 and summary["mean_reward"] == 0.0
