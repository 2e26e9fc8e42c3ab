"""The example translation tasks' judge stage, against a scripted OpenAI-compatible judge
on 127.0.0.1 ($CRUCIBLE_JUDGE_BASE_URL, as a user would point it at their endpoint).

One job, oracle agent, over copies of three tasks:
- svd-lowrank-gpu with a port that fools the trace: the GPU function is fanned out over
  every matrix, but its results are thrown away and the printed ones come from
  `low_rank.local`. Test script, contracts gate and io gate all pass (the trace shows the
  GPU function got every input; the trace is the dispatcher's and cannot see local calls);
  only the judge, reading the code beside the trace, can
  tell. It vetoes: reward 0, with the reason in `crucible runs get --verbose`.
- wl-dedup-starmap as shipped: the judge passes it, reward 1.0.
- sklearn-cv-map with a partial fan-out: the io gate fails it on the trace, so the judge
  is never asked (it runs only on rollouts still passing).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.examples.test_translation_tasks import ROOT, by_task, run_job
from tests.helpers.fake_openai import FakeOpenAI, text
from tests.verifiers.test_stages_job import runs_get_verbose

FOOLS_THE_TRACE = (
    'print(json.dumps(list(low_rank.map(matrices, kwargs={"rank": rank}))))',
    'list(low_rank.map(matrices, kwargs={"rank": rank}))  # warm the GPUs\n'
    "    print(json.dumps([low_rank.local(a, rank) for a in matrices]))",
)
PARTIAL_FAN_OUT = (
    "list(fold_score.map(range(folds), kwargs=params))",
    "list(fold_score.map(range(1), kwargs=params))"
    " + [fold_score.local(f, **params) for f in range(1, folds)]",
)
VETO = "low_rank's results are discarded; the printed SVDs are computed locally with .local"
PASS = "wl_hash.starmap hashes every graph in containers"
MODEL = "judge-under-test"


def judge_reply(body: dict[str, Any]) -> Any:
    """The scripted judge: what it is shown, then a veto for results computed locally."""
    assert body["model"] == MODEL
    prompt = body["messages"][1]["content"]
    assert "## Task instruction" in prompt and "## Required Modal contracts" in prompt
    assert "### /app/main.py" in prompt and "## Runtime trace" in prompt
    if "low_rank" in prompt:
        # The trace is the dispatching side's (modalrt/broker.py): what crossed into
        # containers, never the program's own calls; the code beside it gives it away.
        assert "exercised: fan_out, function, gpu, image_build" in prompt
        assert "low_rank (function): 3 inputs in containers (by call: map 3)" in prompt
        assert "low_rank.local(" in prompt
        return text(json.dumps({"verdict": "veto", "reason": VETO}))
    assert "wl_hash.starmap(" in prompt and "fold_score" not in prompt
    return text(json.dumps({"verdict": "pass", "reason": PASS}))


@pytest.fixture
def judge(monkeypatch: pytest.MonkeyPatch) -> Any:
    with FakeOpenAI() as server:
        monkeypatch.setenv("CRUCIBLE_JUDGE_BASE_URL", server.url)
        monkeypatch.setenv("CRUCIBLE_JUDGE_API_KEY", "judge-key")
        monkeypatch.setenv("CRUCIBLE_JUDGE_MODEL", MODEL)
        yield server


def port(tasks: Path, name: str, edit: tuple[str, str]) -> None:
    shutil.copytree(ROOT / name, tasks / name)
    main = tasks / name / "solution" / "main.py"
    source = main.read_text()
    assert source.count(edit[0]) == 1, (name, edit[0])
    main.write_text(source.replace(*edit))


def test_the_judge_vetoes_a_port_that_fools_the_trace(judge: FakeOpenAI, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    port(tasks, "svd-lowrank-gpu", FOOLS_THE_TRACE)
    port(tasks, "sklearn-cv-map", PARTIAL_FAN_OUT)
    shutil.copytree(ROOT / "wl-dedup-starmap", tasks / "wl-dedup-starmap")
    judge.push(judge_reply, judge_reply)
    summary = run_job(tasks, tmp_path / "jobs", "judged", "oracle")
    assert summary["mean_reward"] == pytest.approx(1 / 3), summary
    assert len(judge.requests) == 2 and not judge.exhausted  # never asked about sklearn
    assert judge.request_headers[0]["Authorization"] == "Bearer judge-key"
    results = by_task(tmp_path / "jobs", "judged")

    svd = results["svd-lowrank-gpu"]["verifier_result"]
    script, contracts, io, verdict = svd["stages"]
    assert [s["status"] for s in (script, contracts, io)] == ["passed"] * 3
    # ...while the trace alone looks right: the GPU function got every matrix
    assert io["details"]["cases"][0]["evidence"]["gpu"] is True
    assert all(c["remote_inputs"]["low_rank"] > 0 for c in io["details"]["cases"])
    assert (verdict["status"], verdict["verdict"], verdict["reason"]) == ("vetoed", "veto", VETO)
    assert verdict["model"]["model"] == MODEL and verdict["model"]["prompt_version"]
    assert svd["rewards"] == {"reward": 0.0, "contracts.present": 1.0, "io.pass_rate": 1.0,
                              "io.all_pass": 1.0, "judge.pass": 0.0}  # fmt: skip

    wl = results["wl-dedup-starmap"]["verifier_result"]
    assert wl["stages"][-1]["status"] == "passed" and wl["rewards"]["reward"] == 1.0
    assert wl["rewards"]["judge.pass"] == 1.0

    cv = results["sklearn-cv-map"]["verifier_result"]
    assert [s["status"] for s in cv["stages"]] == ["passed", "passed", "failed", "skipped"]
    assert cv["stages"][-1]["reason"].startswith("not run: ")
    assert cv["rewards"]["reward"] == 0.0 and "judge.pass" not in cv["rewards"]

    assert f"judge vetoed: {VETO}" in runs_get_verbose(tmp_path / "jobs", "judged")
