"""TRL's `environment_factory` over real sessions (serve/sessions.py's router on loopback,
real bubblewrap sandboxes): the environment as TRL 1.16 uses it (a probe whose public
methods are the tools, `reset(**row)`, tool calls, `get_reward()`), and a GRPOTrainer built
with it, whose rollouts each get a sandbox that is graded."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
from tests.helpers.session_server import session_server
from tests.helpers.trl_example import trl_example

from crucible.tasks.loader import load_task
from crucible.tasks.models import Task
from crucible.trainers.client import ServiceError
from crucible.trainers.trl_env import CrucibleEnvironment, crucible_environment

pytest.importorskip("trl")

HELLO_TEST = (
    "if printf 'Hello, crucible!\\n' | cmp -s - /app/hello.txt; "
    "then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi"
)


def hello_task(parent: Path) -> Task:
    root = parent / "hello"
    (root / "tests").mkdir(parents=True)
    (root / "task.toml").write_text(
        'schema_version = "1.1"\n[agent]\ntimeout_sec = 600\n[verifier]\ntimeout_sec = 60\n'
        '[environment]\nnetwork_mode = "no-network"\n'
    )
    (root / "instruction.md").write_text("Write /app/hello.txt holding 'Hello, crucible!'.\n")
    (root / "tests" / "test.sh").write_text("#!/usr/bin/env bash\n" + HELLO_TEST + "\n")
    return load_task(root)


def row(task: Task) -> dict[str, object]:
    """A dataset row as `crucible dataset export` writes it, as TRL hands it to reset()."""
    return {"prompt": [{"role": "user", "content": task.instruction}], "label": "",
            "task_id": task.name, "task_hash": task.digest,
            "metadata": {"category": "", "difficulty": "", "tags": []}}  # fmt: skip


def tools_of(env: object) -> dict[str, object]:
    """What TRL takes as tools: the class's public functions but reset and get_reward."""
    return {name: getattr(env, name)
            for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
            if name not in ("reset", "get_reward") and not name.startswith("_")}  # fmt: skip


def test_the_tools_are_what_trl_and_transformers_read(tmp_path: Path) -> None:
    from transformers.utils import get_json_schema

    env = crucible_environment("http://127.0.0.1:9", "t")()  # a probe: opens nothing
    tools = tools_of(env)
    assert sorted(tools) == ["read_file", "run_command", "write_file"]
    schemas = {n: get_json_schema(f)["function"] for n, f in tools.items()}  # type: ignore[arg-type]
    assert schemas["run_command"]["parameters"]["required"] == ["command"]
    assert sorted(schemas["write_file"]["parameters"]["properties"]) == ["content", "path"]
    assert env.get_reward() is None  # no rollout yet: nothing to grade, masked

    # How the installed TRL calls an environment: reset with the row's columns, get_reward
    # with nothing, tools by keyword.
    from trl import GRPOTrainer

    generate = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    assert "environment.reset(**reset_kwargs)" in generate
    assert "e.get_reward()" in inspect.getsource(GRPOTrainer.__init__)
    assert list(inspect.signature(env.get_reward).parameters) == []
    inspect.signature(env.reset).bind(**row(hello_task(tmp_path)))
    tool_loop = inspect.getsource(GRPOTrainer._tool_call_loop)
    assert 'sync_tool_dict[name](**function["arguments"])' in tool_loop


def test_a_rollout_acts_in_its_own_sandbox_and_is_graded(tmp_path: Path) -> None:
    task = hello_task(tmp_path / "tasks")
    with session_server(tmp_path, [task]) as srv:
        factory = crucible_environment(srv.url, srv.token)
        good, bad = factory(), factory()
        assert good.reset(**row(task)) is None and bad.reset(**row(task)) is None
        assert good.run_command("printf 'Hello, ' > part && pwd").startswith("exit code 0\n/app")
        assert good.write_file("hello.txt", "Hello, crucible!\n") == "wrote 17 bytes to hello.txt"
        assert good.read_file("/app/hello.txt") == "Hello, crucible!\n"
        assert bad.run_command("cat /app/hello.txt").startswith("exit code 1\n")  # its own
        assert "exit code 3" in bad.run_command("echo oops >&2; exit 3")
        assert "[stderr]\noops" in bad.run_command("echo oops >&2")

        assert good.get_reward() == 1.0 and bad.get_reward() == 0.0
        assert good.last_result is not None and good.last_result.status == "ok"
        assert bad.last_result is not None and bad.last_result.trial is not None
        with pytest.raises(RuntimeError, match="no sandbox"):
            good.run_command("true")  # graded: its session is over
        assert good.get_reward() is None

        # Pooled and reset: the next rollout gets a fresh sandbox; an ungraded one is closed.
        good.reset(**row(task))
        good.write_file("/app/hello.txt", "Hello, crucible!\n")
        good.reset(**row(task))
        assert good.run_command("cat /app/hello.txt").startswith("exit code 1")
        assert good.get_reward() == 0.0
        outcomes = sorted(json.loads(p.read_text())["outcome"]
                          for p in srv.job_dir.glob("*/result.json"))  # fmt: skip
        assert outcomes == ["cancelled", "graded", "graded", "graded"]  # the reset one: closed


def test_a_row_for_an_unknown_or_changed_task_fails_loudly(tmp_path: Path) -> None:
    task = hello_task(tmp_path / "tasks")
    with session_server(tmp_path, [task]) as srv:
        env = CrucibleEnvironment(srv.url, srv.token)
        with pytest.raises(ServiceError) as unknown:
            env.reset(**{**row(task), "task_id": "nope"})
        assert unknown.value.status == 404
        with pytest.raises(ServiceError) as changed:
            env.reset(**{**row(task), "task_hash": "0" * 64})
        assert changed.value.status == 409
        with pytest.raises(ValueError, match="crucible dataset export"):
            env.reset(prompt=[])


def rigged_tool_policy(task: Task) -> tuple[object, object]:
    """The tiny random policy in a chat format that renders tool calls (TRL's bundled
    Qwen 2.5 template), rigged to always emit one tool call: a token whose text is the call
    writing the right /app/hello.txt, the only token its output layer allows. So TRL's own
    tool loop parses it and calls the environment's write_file in the rollout's sandbox."""
    import torch
    from trl.chat_template_utils import qwen2_5_chat_template

    ex = trl_example()
    model, tokenizer = ex.tiny_policy(
        [task.instruction] * 4, chat_template=qwen2_5_chat_template, eos="<|im_end|>",
        extra_tokens=["<|im_start|>", "<tool_call>", "</tool_call>"],
    )  # fmt: skip
    args = {"path": "/app/hello.txt", "content": "Hello, crucible!\n"}
    call = (
        "<tool_call>\n" + json.dumps({"name": "write_file", "arguments": args}) + "\n</tool_call>"
    )
    tokenizer.add_tokens([call])
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    head = torch.nn.Linear(model.config.hidden_size, len(tokenizer), bias=True)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.fill_(-30.0)
        head.bias[tokenizer.convert_tokens_to_ids(call)] = 0.0
    model.lm_head = head
    return model, tokenizer


@pytest.mark.slow
def test_grpo_with_the_environment_factory_trains_a_step_in_sandboxes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import transformers
    from datasets import Dataset
    from packaging.version import Version
    from trl import GRPOConfig, GRPOTrainer

    if Version(transformers.__version__) < Version("5.13"):
        pytest.importorskip("jmespath")  # TRL parses tool calls with it there (the dev extra)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    task = hello_task(tmp_path / "tasks")
    model, tokenizer = rigged_tool_policy(task)
    with session_server(tmp_path, [task]) as srv:
        args = GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=1, num_generations=2,
                          per_device_train_batch_size=4, max_completion_length=8, use_cpu=True,
                          bf16=False, report_to="none", logging_steps=1, save_strategy="no",
                          dataloader_num_workers=0, seed=0, max_tool_calling_iterations=1)  # fmt: skip
        trainer = GRPOTrainer(model=model, args=args, processing_class=tokenizer,
                              train_dataset=Dataset.from_list([row(task), row(task)]),
                              environment_factory=crucible_environment(srv.url, srv.token))  # fmt: skip
        assert [t.__name__ for t in trainer._env_tools[None]] == [
            "read_file", "run_command", "write_file"
        ]  # fmt: skip
        out = trainer.train()
        envs = list(trainer.environments)
        outcomes = [json.loads(p.read_text()) for p in srv.job_dir.glob("*/result.json")]

    assert out.global_step == 1
    logged = trainer.state.log_history[0]
    assert logged["tools/call_frequency"] > 0 and logged["tools/failure_frequency"] == 0
    # Four rollouts, four sandboxes: each wrote the file through its own session and was
    # graded 1 (an untouched sandbox scores 0: see the test above).
    assert len(envs) == 4 and len({id(e) for e in envs}) == 4
    assert [e.last_result.reward for e in envs if e.last_result] == [1.0] * 4
    assert sorted(r["outcome"] for r in outcomes) == ["graded"] * 4
    assert {r["verifier_result"]["rewards"]["reward"] for r in outcomes} == {1.0}
    assert logged["rewards/CrucibleEnvironment/mean"] == 1.0
