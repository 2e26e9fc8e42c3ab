"""verl reward functions that grade through a running `crucible serve`.

verl 0.9 calls a custom reward function as
`compute_score(data_source=, solution_str=, ground_truth=, extra_info=)` (one sample: the
reward loop the PPO trainer uses, verl/experimental/reward_loop/reward_manager/naive.py
`run_single`, which awaits it when it is a coroutine function and adds
`reward_router_address`/`reward_model_tokenizer` when a reward router runs; also the
older verl/workers/reward_manager/naive.py `NaiveRewardManager.__call__`), or as
`compute_score(data_sources=, solution_strs=, ground_truths=, extra_infos=, **reward_kwargs)`
(a batch: verl/workers/reward_manager/batch.py `BatchRewardManager.verify`). Its
`reward.custom_reward_function.reward_kwargs` are merged into every call
(verl/trainer/ppo/reward.py `get_custom_reward_fn`), so the options below can be set there.

verl needs a number, and every sample's dict must have the same keys (it stacks them
into `reward_extra_info`). So each call returns
`{"score", "crucible_ok", "crucible_invalid", "crucible_unscorable"}`, the flags 0.0/1.0.
verl cannot mask a sample: an `unscorable` grade (infrastructure failed after the
service's retries, a broken task, or still pending at `wait_s`) scores `unscorable_value`
(default 0.0) with `crucible_unscorable` = 1.0, so the count is visible in verl's metrics.

Which task: `extra_info` (or `ground_truth`) carries `task_id`/`task_hash` as
`crucible dataset export` writes them (see common.find_task); a bare `ground_truth`
string is the task's name.

    custom_reward_function:
      path: pkg://crucible.trainers.verl   # verl.utils.import_utils.load_module
      name: compute_score_async      # the reward loop awaits it; or compute_score
      reward_kwargs: {submission: text, unscorable_value: 0.0}
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from crucible.records.serve import GradeItem, GradeResult, GradeStatus
from crucible.trainers.client import DEFAULT_WAIT_S
from crucible.trainers.common import (
    SubmissionMode,
    async_client,
    find_task,
    grade_async,
    grade_sync,
    prepare,
    sync_client,
)

KEYS = ("score", "crucible_ok", "crucible_invalid", "crucible_unscorable")


def to_score(result: GradeResult, unscorable_value: float = 0.0) -> dict[str, float]:
    """One grade as verl's score dict, with the same keys whatever the status."""
    status = result.status
    if status == GradeStatus.pending:
        status = GradeStatus.unscorable  # not done in time: verl cannot wait or mask
    if status == GradeStatus.unscorable or result.reward is None:
        score = float(unscorable_value)
        status = GradeStatus.unscorable
    else:
        score = float(result.reward)
    return {
        "score": score,
        "crucible_ok": float(status == GradeStatus.ok),
        "crucible_invalid": float(status == GradeStatus.invalid),
        "crucible_unscorable": float(status == GradeStatus.unscorable),
    }


def _item(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any,
          submission: SubmissionMode, salt: str) -> GradeItem | GradeResult:  # fmt: skip
    task = find_task(extra_info, ground_truth)  # data_source names a dataset, not a task
    meta = {"trainer": "verl", "data_source": str(data_source)[:200]}
    return prepare(task, solution_str, submission, salt, meta)


def compute_score(data_source: Any, solution_str: str, ground_truth: Any,
                  extra_info: dict[str, Any] | None = None, *,
                  submission: SubmissionMode = "text", unscorable_value: float = 0.0,
                  wait_s: float = DEFAULT_WAIT_S, salt: str = "", url: str | None = None,
                  token: str | None = None, reward_router_address: Any = None,
                  reward_model_tokenizer: Any = None) -> dict[str, float]:  # fmt: skip
    """verl's per-sample reward function (blocking; the reward loop runs it in a thread).
    `reward_router_address`/`reward_model_tokenizer` are verl's, accepted and unused."""
    prepared = [_item(data_source, solution_str, ground_truth, extra_info, submission, salt)]
    result = grade_sync(sync_client(url, token), prepared, wait_s)[0]
    return to_score(result, unscorable_value)


async def compute_score_async(data_source: Any, solution_str: str, ground_truth: Any,
                              extra_info: dict[str, Any] | None = None, *,
                              submission: SubmissionMode = "text",
                              unscorable_value: float = 0.0, wait_s: float = DEFAULT_WAIT_S,
                              salt: str = "", url: str | None = None, token: str | None = None,
                              reward_router_address: Any = None,
                              reward_model_tokenizer: Any = None) -> dict[str, float]:  # fmt: skip
    """The same, as a coroutine: verl's reward loop awaits it, so many grades run at once."""
    prepared = [_item(data_source, solution_str, ground_truth, extra_info, submission, salt)]
    result = (await grade_async(async_client(url, token), prepared, wait_s))[0]
    return to_score(result, unscorable_value)


def compute_score_batch(data_sources: Sequence[Any], solution_strs: Sequence[str],
                        ground_truths: Sequence[Any],
                        extra_infos: Sequence[dict[str, Any] | None] | None = None, *,
                        submission: SubmissionMode = "text", unscorable_value: float = 0.0,
                        wait_s: float = DEFAULT_WAIT_S, salt: str = "", url: str | None = None,
                        token: str | None = None) -> list[dict[str, float]]:  # fmt: skip
    """verl's batched reward function (`reward_manager: batch`): one request for the
    whole batch, results in input order."""
    extras = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
    rows = zip(data_sources, solution_strs, ground_truths, extras, strict=True)
    prepared = [_item(d, s, g, e, submission, salt) for d, s, g, e in rows]
    results = grade_sync(sync_client(url, token), prepared, wait_s)
    return [to_score(r, unscorable_value) for r in results]


def verl_row(row: Mapping[str, Any], index: int = 0) -> dict[str, Any]:
    """A `crucible dataset export` row (prompt, task_id, task_hash, ...) as a row of verl's
    RLHFDataset (verl/utils/dataset/rl_dataset.py: `prompt`, `data_source`,
    `reward_model.ground_truth`, `extra_info`), naming the task both ways."""
    task = find_task(row)
    return {
        "data_source": "crucible",
        "prompt": row["prompt"],
        "ability": "agent",
        "reward_model": {"style": "rule", "ground_truth": task.id},
        "extra_info": {"task_id": task.id, "task_hash": task.hash, "index": index},
    }


SampleFn = Callable[..., dict[str, float]]
AsyncSampleFn = Callable[..., Coroutine[Any, Any, dict[str, float]]]


def make_compute_score(*, submission: SubmissionMode = "text", unscorable_value: float = 0.0,
                       wait_s: float = DEFAULT_WAIT_S, salt: str = "", url: str | None = None,
                       token: str | None = None) -> SampleFn:  # fmt: skip
    """compute_score with these options fixed (for a file verl loads by path:
    `compute_score = make_compute_score(submission="patch", unscorable_value=-1.0)`)."""
    opts: dict[str, Any] = dict(submission=submission, unscorable_value=unscorable_value,
                                wait_s=wait_s, salt=salt, url=url, token=token)  # fmt: skip

    def crucible_compute_score(data_source: Any, solution_str: str, ground_truth: Any,
                               extra_info: dict[str, Any] | None = None,
                               **verl_kwargs: Any) -> dict[str, float]:  # fmt: skip
        return compute_score(data_source, solution_str, ground_truth, extra_info,
                             **{**opts, **verl_kwargs})  # fmt: skip

    return crucible_compute_score


def make_compute_score_async(*, submission: SubmissionMode = "text",
                             unscorable_value: float = 0.0, wait_s: float = DEFAULT_WAIT_S,
                             salt: str = "", url: str | None = None,
                             token: str | None = None) -> AsyncSampleFn:  # fmt: skip
    """compute_score_async with these options fixed."""
    opts: dict[str, Any] = dict(submission=submission, unscorable_value=unscorable_value,
                                wait_s=wait_s, salt=salt, url=url, token=token)  # fmt: skip

    async def crucible_compute_score(data_source: Any, solution_str: str, ground_truth: Any,
                                     extra_info: dict[str, Any] | None = None,
                                     **verl_kwargs: Any) -> dict[str, float]:  # fmt: skip
        return await compute_score_async(data_source, solution_str, ground_truth, extra_info,
                                         **{**opts, **verl_kwargs})  # fmt: skip

    return crucible_compute_score
