"""TRL against the real grading service: a GRPOTrainer built with `crucible_reward` trains a
step on completions that `crucible serve` (uvicorn on loopback, local bubblewrap sandboxes)
grades one by one; and the reward function, called the way TRL 1.16 calls it, maps every
status the way TRL masks.

The policy is made here: random weights (Llama, hidden 32, 2 layers) and a tokenizer trained
on the prompts (examples/trainers/trl_grpo.py `tiny_policy`); nothing is downloaded."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.answer_tasks import ANSWER_PATH, answer_task
from tests.helpers.trl_example import trl_example

from crucible.engine.request import RunRequest
from crucible.export.dataset import ExportFormat, load_rows, write_dataset
from crucible.serve.server import ServeOptions, running_service
from crucible.trainers.trl import CrucibleReward, crucible_reward

pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

ROOT = Path(__file__).resolve().parents[2]
# The verifier of the tasks below: 1 when the answer has an even number of bytes. A random
# policy's completions score both ways, so the step has advantages to train on.
EVEN_TEST = (
    f"n=$(wc -c < {ANSWER_PATH} 2>/dev/null || echo 1)\n"
    "if [ $((n % 2)) -eq 0 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
)


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")


def service_request(tasks: Path, jobs: Path) -> RunRequest:
    return RunRequest(paths=[tasks], env="local", jobs_dir=jobs, job_name="trl",
                      concurrency=4, max_retries=0)  # fmt: skip


def exported(tasks: Path, out: Path) -> Any:
    """The prompt set as a trainer loads it: exported, then read back with `datasets`."""
    write_dataset(load_rows([tasks], system="Answer in one word."), ExportFormat.jsonl, out)
    return datasets.load_dataset("json", data_files=str(out), split="train",
                                 cache_dir=str(out.parent / "hf-cache"))  # fmt: skip


@pytest.mark.slow
async def test_grpo_trains_a_step_on_completions_graded_by_the_service(
    tmp_path: Path, buildah: None
) -> None:
    tasks = tmp_path / "tasks"
    answer_task(tasks, "even-a", "Reply with an even number of characters.", "", test=EVEN_TEST)
    answer_task(tasks, "even-b", "Say something whose length is even.", "", test=EVEN_TEST)
    data = exported(tasks, tmp_path / "prompts.jsonl")
    ex = trl_example()
    model, tokenizer = ex.tiny_policy(ex.prompt_texts(data))
    async with running_service(
        service_request(tasks, tmp_path / "jobs"), ServeOptions(port=0)
    ) as r:
        reward = crucible_reward(r.url, r.token, wait_s=300)
        trainer = ex.grpo_trainer(model, tokenizer, data, reward, tmp_path / "out",
                                  steps=1, generations=2, batch=4)  # fmt: skip
        before = {k: v.detach().clone() for k, v in model.named_parameters()}
        out = await asyncio.to_thread(trainer.train)
        job_dir = tmp_path / "jobs" / r.service.cfg.job_id

    assert out.global_step == 1 and trainer.state.global_step == 1
    # Every completion of the step was one grade by the service, with its own trial.
    results = reward.last_results
    assert len(results) == 4 and all(g.status == "ok" for g in results)
    assert len({g.id for g in results}) == 4
    assert {g.task_hash for g in results} == set(data["task_hash"])
    for g in results:
        assert g.trial is not None and not g.cached
        record = json.loads((job_dir / g.trial.split("/")[1] / "result.json").read_text())
        assert record["verifier_result"]["rewards"]["reward"] == g.reward
    # The rewards TRL logged are the service's.
    logged = trainer.state.log_history[0]
    rewards = [g.reward for g in results]
    assert logged["rewards/crucible/mean"] == pytest.approx(sum(rewards) / 4)
    assert logged["crucible/ok"] == 1.0 and logged["crucible/unscorable"] == 0.0
    # Each grade judged its own completion: the answer the sandbox held is what it scored.
    for g in results:
        assert g.trial is not None
        answer = job_dir / g.trial.split("/")[1] / "sandbox" / "logs" / "agent" / "answer.txt"
        assert g.reward == (1.0 if len(answer.read_bytes()) % 2 == 0 else 0.0)
    # A prompt's two generations are one GRPO group (consecutive): TRL's advantages came from
    # the service's rewards, and where a group's rewards differ the step moved the weights.
    assert results[0].group_id == results[1].group_id != results[2].group_id == results[3].group_id
    groups = [rewards[0:2], rewards[2:4]]
    flat = sum(1 for grp in groups if grp[0] == grp[1]) / 2
    assert logged["frac_reward_zero_std"] == pytest.approx(flat)
    moved = any(not (before[k] == v).all() for k, v in model.named_parameters())
    assert moved == (flat < 1)


async def test_the_reward_maps_each_status_as_trl_masks_and_retries_reuse_grades(
    tmp_path: Path, buildah: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers import TrainerState

    # Two items a request: a batch over the service's cap goes as several, in input order.
    monkeypatch.setattr("crucible.trainers.trl.MAX_ITEMS", 2)

    tasks = tmp_path / "tasks"
    answer_task(tasks, "even", "Reply with an even number of characters.", "", test=EVEN_TEST)
    answer_task(
        tasks, "broken", "Anything.", "", dockerfile="FROM debian:bookworm-slim\nRUN exit 3\n"
    )
    answer_task(tasks, "patched", "Fix it.", "", test="echo 1 > /logs/verifier/reward.txt\n")
    rows = {r.task_id: r for r in load_rows([tasks])}
    metrics: dict[str, float] = {}
    extra: dict[str, list[Any]] = {}

    def call(fn: CrucibleReward, names: list[str], completions: list[Any]) -> list[float | None]:
        # Exactly TRL's call: keywords, the dataset's columns per completion, its state.
        state = TrainerState()
        state.global_step = 3
        return fn(prompts=[[m.model_dump() for m in rows[n].prompt] for n in names],
                  completions=completions, completion_ids=[[1, 2] for _ in names],
                  task_id=names, task_hash=[rows[n].task_hash for n in names],
                  label=["" for _ in names], metadata=[rows[n].metadata.model_dump() for n in names],
                  trainer_state=state, log_extra=lambda c, v: extra.setdefault(c, []).extend(v),
                  log_metric=lambda k, v: metrics.__setitem__(k, v))  # fmt: skip

    def said(text: str) -> list[dict[str, str]]:
        return [{"role": "assistant", "content": text}]

    async with running_service(
        service_request(tasks, tmp_path / "jobs"), ServeOptions(port=0)
    ) as r:
        text = crucible_reward(r.url, r.token, wait_s=300)
        names = ["even", "even", "broken"]
        got = await asyncio.to_thread(call, text, names, [said("ab"), said("abc"), said("x")])
        assert got == [1.0, 0.0, None]  # ok, ok (graded 0), unscorable: masked
        assert [g.status for g in text.last_results] == ["ok", "ok", "unscorable"]
        assert metrics["crucible/unscorable"] == pytest.approx(1 / 3)
        assert extra["crucible_status"] == ["ok", "ok", "unscorable"]
        trials = sorted(p.name for p in (tmp_path / "jobs" / r.service.cfg.job_id).iterdir()
                        if (p / "result.json").is_file())  # fmt: skip

        again = await asyncio.to_thread(call, text, names, [said("ab"), said("abc"), said("x")])
        assert again == got and all(g.cached for g in text.last_results)
        after = sorted(p.name for p in (tmp_path / "jobs" / r.service.cfg.job_id).iterdir()
                       if (p / "result.json").is_file())  # fmt: skip
        assert after == trials  # a retried batch started no sandbox

        patch = crucible_reward(r.url, r.token, submission="patch", wait_s=300)
        bad = await asyncio.to_thread(call, patch, ["patched", "patched"],
                                      [said("not a diff"), said("")])  # fmt: skip
        assert bad == [0.0, 0.0]  # invalid: the policy's fault, reward 0
        assert [g.status for g in patch.last_results] == ["invalid", "invalid"]


def test_the_call_shape_is_the_installed_trls() -> None:
    from trl import GRPOTrainer
    from trl.trainer.utils import get_callable_name, is_async_callable

    source = inspect.getsource(GRPOTrainer._calculate_rewards)
    assert "prompts=prompts, completions=completions, completion_ids=completion_ids_list" in source
    for kwarg in ("trainer_state", "log_extra", "log_metric"):
        assert f'reward_kwargs["{kwarg}"]' in source
    fn = crucible_reward("http://127.0.0.1:9", "t")
    inspect.signature(fn).bind(prompts=[], completions=[], completion_ids=[], task_id=[],
                               task_hash=[], trainer_state=None, log_extra=None,
                               log_metric=None)  # fmt: skip
    assert get_callable_name(fn) == "crucible" and not is_async_callable(fn)
    assert get_callable_name(crucible_reward("http://127.0.0.1:9", "t", name="unit")) == "unit"


def test_a_dataset_without_task_columns_is_refused_clearly() -> None:
    fn = crucible_reward("http://127.0.0.1:9", "t")
    with pytest.raises(ValueError, match="crucible dataset export"):
        fn(prompts=["p"], completions=["c"], completion_ids=[[1]])
    with pytest.raises(ValueError, match="answer_path is for"):
        crucible_reward("http://127.0.0.1:9", "t", answer_path="/app/x")
    with pytest.raises(ValueError, match="absolute"):
        crucible_reward("http://127.0.0.1:9", "t", submission="files", answer_path="x")
    assert os.environ.get("HF_HUB_OFFLINE") == "1"


def test_hostile_completions_score_0_without_reaching_the_service() -> None:
    # Attack: a policy's output over the submission cap, a patch with nothing in it, files
    # outside the sandbox's tree. Each is the policy's fault (invalid, 0.0), judged here; the
    # URL has no listener, so anything sent would fail the call. (Before the fix, an
    # over-cap answer with answer_path raised out of the reward function and stopped training.)
    from crucible.records.submission import MAX_SUBMISSION_BYTES

    huge = "x" * (MAX_SUBMISSION_BYTES + 1)
    cols = {"task_id": ["t", "t"], "task_hash": [None, None]}
    files = crucible_reward("http://127.0.0.1:9", "t", submission="files", answer_path="/app/a")
    assert files(prompts=["p", "p"], completions=[huge, huge + "y"], **cols) == [0.0, 0.0]
    assert [g.status for g in files.last_results] == ["invalid", "invalid"]
    assert files.last_results[0].id != files.last_results[1].id
    text = crucible_reward("http://127.0.0.1:9", "t")
    assert text(prompts=["p"], completions=[huge], **{k: v[:1] for k, v in cols.items()}) == [0.0]
    patch = crucible_reward("http://127.0.0.1:9", "t", submission="patch")
    assert patch(prompts=["p", "p"], completions=["", "  \n"], **cols) == [0.0, 0.0]
    json_files = crucible_reward("http://127.0.0.1:9", "t", submission="files")
    escape = json.dumps({"/app/../../etc/passwd": "root::0:0::/:/bin/sh"})
    assert json_files(prompts=["p", "p"], completions=[escape, "not json"], **cols) == [0.0, 0.0]


@pytest.mark.slow
def test_the_example_trains_against_a_running_crucible_serve(service: Any, tmp_path: Path) -> None:
    # As a user runs it: the prompt set exported by the CLI, the service (a `crucible serve`
    # subprocess, tests/trainers/conftest.py) named by the environment, the example's main.
    prompts, before = tmp_path / "prompts.jsonl", len(service.trials())
    export = subprocess.run([sys.executable, "-m", "crucible.cli.main", "dataset", "export",
                             str(service.tasks["hello-file"]), "-o", str(prompts)],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)  # fmt: skip
    assert export.returncode == 0, export.stderr
    env = {**os.environ, "CRUCIBLE_SERVE_URL": service.url, "CRUCIBLE_SERVE_TOKEN": service.token,
           "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}  # fmt: skip
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "trainers" / "trl_grpo.py"),
                          str(prompts), "--submission", "files", "--answer-path", "/app/hello.txt",
                          "--steps", "1", "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    logs = [json.loads(line[4:]) for line in run.stdout.splitlines() if line.startswith("log {")]
    logged = logs[0]
    # A random policy never writes the right file: every completion graded, each a 0.
    assert logged["step"] == 1 and logged["crucible/ok"] == 1.0
    assert logged["rewards/crucible/mean"] == 0.0
    assert len(service.trials()) == before + 2  # one task: a batch of its 2 generations
