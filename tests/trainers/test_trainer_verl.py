"""verl's reward managers call crucible.trainers.verl against a real `crucible serve`.

The function is loaded the way verl loads a custom reward function
(verl.trainer.ppo.reward.get_custom_reward_fn, `pkg://` path, reward_kwargs merged in),
and called by verl's own managers: the per-sample NaiveRewardManager, the reward loop's
async NaiveRewardManager.run_single, and the BatchRewardManager. The tokenizer is a
byte-level BPE trained here on the spot (no hub download).
"""

from __future__ import annotations

import asyncio
import inspect
from functools import partial
from typing import Any

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from tests.trainers.conftest import RIGHT_FILES, WRONG_FILES, Service
from tokenizers import ByteLevelBPETokenizer
from transformers import PreTrainedTokenizerFast
from verl import DataProto
from verl.trainer.ppo.reward import get_custom_reward_fn, load_reward_manager
from verl.utils.reward_score import default_compute_score
from verl.utils.reward_score.math_batch import compute_score_batched
from verl.workers.reward_manager.batch import BatchRewardManager
from verl.workers.reward_manager.naive import NaiveRewardManager

from crucible.trainers import verl as adapter

KEYS = {"score", "crucible_ok", "crucible_invalid", "crucible_unscorable"}


def test_signatures_match_verls() -> None:
    """The parameters verl passes by name are the adapter's, in verl's order."""
    verl_one = list(inspect.signature(default_compute_score).parameters)[:4]
    assert verl_one == ["data_source", "solution_str", "ground_truth", "extra_info"]
    for fn in (adapter.compute_score, adapter.compute_score_async,
               adapter.make_compute_score(), adapter.make_compute_score_async()):  # fmt: skip
        assert list(inspect.signature(fn).parameters)[:4] == verl_one
    verl_batch = list(inspect.signature(compute_score_batched).parameters)
    assert list(inspect.signature(adapter.compute_score_batch).parameters)[:4] == verl_batch
    # the reward loop awaits what it sees as a coroutine function (after verl's partial)
    loaded = partial(adapter.compute_score_async, submission="files")
    assert inspect.iscoroutinefunction(loaded)
    assert not inspect.iscoroutinefunction(partial(adapter.compute_score))


def _tokenizer(texts: list[str]) -> PreTrainedTokenizerFast:
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts, vocab_size=300, min_frequency=1,
                            special_tokens=["<pad>", "<eos>"])  # fmt: skip
    return PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, pad_token="<pad>",
                                   eos_token="<eos>")  # fmt: skip


def _batch(tok: PreTrainedTokenizerFast, rows: list[dict[str, Any]]) -> DataProto:
    """A DataProto as verl's rollout leaves it: left-padded prompts, right-padded
    responses, `data_source`, `reward_model.ground_truth`, `extra_info`."""
    prompts = [tok.encode("Write the file.") for _ in rows]
    responses = [[*tok.encode(r["response"]), tok.eos_token_id] for r in rows]
    plen, rlen = max(map(len, prompts)), max(map(len, responses))
    pad = tok.pad_token_id
    p_ids = [[pad] * (plen - len(p)) + p for p in prompts]
    r_ids = [r + [pad] * (rlen - len(r)) for r in responses]
    mask = [[0] * (plen - len(p)) + [1] * len(p) + [1] * len(r) + [0] * (rlen - len(r))
            for p, r in zip(prompts, responses, strict=True)]  # fmt: skip
    tensors = {"prompts": torch.tensor(p_ids), "responses": torch.tensor(r_ids),
               "attention_mask": torch.tensor(mask)}  # fmt: skip
    non_tensors = {
        "data_source": np.array(["crucible"] * len(rows), dtype=object),
        "reward_model": np.array([{"ground_truth": r["task"]} for r in rows], dtype=object),
        "extra_info": np.array(
            [{"index": i, **r.get("extra", {})} for i, r in enumerate(rows)], dtype=object
        ),
    }
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)


ROWS = [
    {"task": "hello-file", "response": RIGHT_FILES},
    {"task": "ignored", "response": WRONG_FILES, "extra": {"task_id": "hello-file"}},
    {"task": "broken-build", "response": RIGHT_FILES},
    {"task": "hello-file", "response": "not json at all"},
]


def _config(name: str) -> Any:
    fn = {"path": "pkg://crucible.trainers.verl", "name": name,
          "reward_kwargs": {"submission": "files", "unscorable_value": -1.0}}  # fmt: skip
    return OmegaConf.create({"reward": {"custom_reward_function": fn}})


def _expect(extra: dict[str, list[float]]) -> None:
    assert set(extra) == KEYS  # the same keys for every sample
    assert extra["score"] == [1.0, 0.0, -1.0, 0.0]
    assert extra["crucible_ok"] == [1.0, 1.0, 0.0, 0.0]
    assert extra["crucible_unscorable"] == [0.0, 0.0, 1.0, 0.0]
    assert extra["crucible_invalid"] == [0.0, 0.0, 0.0, 1.0]


def test_naive_reward_manager(served: Service) -> None:
    tok = _tokenizer([r["response"] for r in ROWS] + ["Write the file."])
    data = _batch(tok, ROWS)
    fn = get_custom_reward_fn(_config("compute_score"))
    out = NaiveRewardManager(tok, num_examine=0, compute_score=fn)(data, return_dict=True)
    _expect({k: list(v) for k, v in out["reward_extra_info"].items()})
    tensor = out["reward_tensor"]
    assert tensor.sum(dim=-1).tolist() == [1.0, 0.0, -1.0, 0.0]
    # retried: verl scoring the same batch again starts no new sandbox
    started = served.trials()
    assert len(started) == 3  # the unparsable one never reached the service
    NaiveRewardManager(tok, num_examine=0, compute_score=fn)(data, return_dict=True)
    assert served.trials() == started


async def test_reward_loop_awaits_the_async_function(served: Service) -> None:
    """verl 0.9's PPO trainer scores through the reward loop: RewardLoopWorker loads the
    manager with load_reward_manager and runs run_single per sample, concurrently."""
    tok = _tokenizer([r["response"] for r in ROWS] + ["Write the file."])
    data = _batch(tok, ROWS)
    config = _config("compute_score_async")
    config.reward.reward_manager = {"name": "naive", "source": "register"}
    manager = load_reward_manager(config, tok, reward_router_address=None,
                                  reward_model_tokenizer=None)  # fmt: skip
    assert manager.is_async_reward_score
    outs = await asyncio.gather(*(manager.run_single(data[i : i + 1]) for i in range(len(data))))
    extra: dict[str, list[float]] = {k: [o["reward_extra_info"][k] for o in outs] for k in KEYS}
    _expect(extra)
    assert [o["reward_score"] for o in outs] == extra["score"]


def test_batch_reward_manager(served: Service) -> None:
    tok = _tokenizer([r["response"] for r in ROWS] + ["Write the file."])
    data = _batch(tok, ROWS)
    fn = get_custom_reward_fn(_config("compute_score_batch"))
    out = BatchRewardManager(tok, num_examine=0, compute_score=fn)(data, return_dict=True)
    _expect({k: list(v) for k, v in out["reward_extra_info"].items()})


def test_factory_fixes_options(served: Service) -> None:
    score = adapter.make_compute_score(submission="files", unscorable_value=-7.0)
    got = score("crucible", RIGHT_FILES, "broken-build", {})
    assert got == {"score": -7.0, "crucible_ok": 0.0, "crucible_invalid": 0.0,
                   "crucible_unscorable": 1.0}  # fmt: skip


def test_unknown_task_is_loud(served: Service) -> None:
    """A 4xx (a task the service does not serve) is the user's mistake: raised."""
    from crucible.trainers.client import ServiceError

    with pytest.raises(ServiceError) as info:
        adapter.compute_score("crucible", "x", "no-such-task", {})
    assert info.value.status is not None and 400 <= info.value.status < 500


def test_verl_row_names_the_task_both_ways() -> None:
    row = {"prompt": [{"role": "user", "content": "Write it."}], "task_id": "hello-file",
           "task_hash": "ab" * 32, "label": None, "metadata": {"category": "example"}}  # fmt: skip
    got = adapter.verl_row(row, index=4)
    assert got["prompt"] == row["prompt"] and got["data_source"] == "crucible"
    assert got["reward_model"]["ground_truth"] == "hello-file"
    assert got["extra_info"] == {"task_id": "hello-file", "task_hash": "ab" * 32, "index": 4}
