"""TRL (1.16): crucible's rewards as GRPOTrainer reward functions, and crucible's sandboxes
as its `environment_factory`, both through a running `crucible serve` (client.py).

    from crucible.trainers.trl import crucible_reward
    trainer = GRPOTrainer(model=..., reward_funcs=crucible_reward(url, token),
                          train_dataset=load_dataset("json", data_files="prompts.jsonl")["train"])

TRL's call shape (trl/trainer/grpo_trainer.py, `_calculate_rewards`): a reward function is
called as `f(prompts=..., completions=..., completion_ids=..., **columns, trainer_state=...,
log_extra=..., log_metric=...)`, each column a list with one value per completion (the
dataset's extra columns, repeated over a prompt's generations); it returns one float per
completion, where None is masked (NaN, no advantage). Completions are text, or, for a
conversational dataset, lists of messages: the answer is the last assistant message's
content. The function's `__name__` names its metric (`rewards/<name>/mean`).

The rows come from `crucible dataset export` (records/prompt_row.py): `task_id` and
`task_hash` say which task grades a completion. Each completion is one grade item whose id
is a hash of the task, the submission, the prompt, the trainer's step and the completion's
index (common.grade_id with `salt`), so a retried call (or a resumed run that samples the same)
reuses the grade: the service never starts a second sandbox for it. Statuses map to
rewards as TRL wants them: `ok` its reward, `invalid` 0.0 (the policy's fault), and
`unscorable` or still `pending` after `wait_s` None (masked), and so is a batch the
service did not answer after the client's retries (infrastructure, as for every adapter:
common.grade_sync). A request the service refuses (unknown task, changed task: a 4xx)
raises ServiceError: a misconfigured run fails loudly instead of training on nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from crucible.records.prompt_row import TASK_HASH, TASK_ID
from crucible.records.serve import MAX_ITEMS, GradeItem, GradeResult, GradeStatus, TaskRef
from crucible.records.submission import FilesSubmission, TextSubmission, check_sandbox_path
from crucible.trainers.client import DEFAULT_WAIT_S
from crucible.trainers.common import (
    SubmissionMode,
    grade_id,
    grade_sync,
    invalid_result,
    prepare,
    sync_client,
)


def completion_text(completion: str | Sequence[dict[str, Any]]) -> str:
    """The answer in a TRL completion: the text itself, or the content of the last assistant
    message of a conversational one ("" when there is none)."""
    if isinstance(completion, str):
        return completion
    for message in reversed(list(completion)):
        if message.get("role") == "assistant":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):  # content blocks: their text parts
                return "".join(b.get("text", "") for b in content if isinstance(b, dict))
            return ""
    return ""


def salt(prompt: object, step: int, index: int) -> str:
    """What makes one completion's grade id its own beside its task and submission: the
    prompt, the trainer's step and the completion's place in the batch (so two equal
    completions of a group are two grades, and a retried call reuses both)."""
    text = json.dumps(prompt, sort_keys=True, separators=(",", ":"), default=str)
    return f"trl:{step}:{index}:{hashlib.sha256(text.encode()).hexdigest()[:32]}"


def _column(name: str, columns: dict[str, Any], n: int) -> list[Any]:
    values = columns.get(name)
    if not isinstance(values, list) or len(values) != n:
        raise ValueError(
            f"the dataset has no {name!r} column for each completion: make it with "
            "`crucible dataset export` (its rows carry task_id and task_hash)"
        )
    return values


class CrucibleReward:
    """A TRL reward function grading each completion through the service. Picklable: it
    holds no connection (the process's client is common.sync_client's)."""

    def __init__(self, url: str | None = None, token: str | None = None, *,
                 submission: SubmissionMode = "text", answer_path: str | None = None,
                 wait_s: float = DEFAULT_WAIT_S, name: str = "crucible") -> None:  # fmt: skip
        if submission not in ("text", "files", "patch"):
            raise ValueError(f"submission is text, files or patch, not {submission!r}")
        if answer_path is not None:
            if submission != "files":
                raise ValueError("answer_path is for submission='files' (a text answer goes "
                                 "where the task declares: [metadata] answer_path)")  # fmt: skip
            answer_path = check_sandbox_path(answer_path)
        self.__name__ = name  # TRL's metric name: rewards/<name>/mean
        self.url, self.token = url, token
        self.submission, self.answer_path, self.wait_s = submission, answer_path, wait_s
        self.last_results: list[GradeResult] = []  # the last batch's grades, in order

    def _prepare(self, task: TaskRef, answer: str, step: int, index: int,
                 prompt: object) -> GradeItem | GradeResult:  # fmt: skip
        key = salt(prompt, step, index)
        meta = {"trainer": "trl", "step": step, "index": index}
        group = "trl-" + salt(prompt, step, 0).rsplit(":", 1)[1]  # a prompt's generations
        if self.answer_path is None:
            return prepare(task, answer, self.submission, key, meta, group)
        try:
            sub = FilesSubmission(files={self.answer_path: answer})  # the file's whole content
        except ValueError as exc:  # over the size cap: the policy's output, nothing to apply
            raw = TextSubmission(text=answer[:1_000_000])
            return invalid_result(grade_id(task, raw, f"files:{key}"), str(exc))
        return GradeItem(id=grade_id(task, sub, key), task=task, submission=sub,
                         group_id=group, meta=meta)  # fmt: skip

    def _grade(self, prepared: list[GradeItem | GradeResult]) -> list[GradeResult]:
        """Grades in input order; a batch over the service's cap of items per request goes
        as several requests at once (each waits up to `wait_s`)."""
        client = sync_client(self.url, self.token)
        chunks = [prepared[i : i + MAX_ITEMS] for i in range(0, len(prepared), MAX_ITEMS)]
        if len(chunks) <= 1:
            return grade_sync(client, prepared, self.wait_s)
        with ThreadPoolExecutor(max_workers=min(8, len(chunks))) as pool:
            done = pool.map(lambda chunk: grade_sync(client, chunk, self.wait_s), chunks)
            return [r for chunk in done for r in chunk]

    def __call__(self, prompts: list[Any], completions: list[Any],
                 **columns: Any) -> list[float | None]:  # fmt: skip
        n = len(completions)
        task_ids = _column(TASK_ID, columns, n)
        hashes = columns.get(TASK_HASH) or [None] * n
        step = int(getattr(columns.get("trainer_state"), "global_step", 0) or 0)
        prepared = [
            self._prepare(TaskRef(id=str(task_ids[i]), hash=hashes[i]),
                          completion_text(completion), step, i, prompt)
            for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True))
        ]  # fmt: skip
        self.last_results = self._grade(prepared)
        _log(columns, self.__name__, self.last_results)
        return [reward_of(r) for r in self.last_results]


def reward_of(result: GradeResult) -> float | None:
    """A grade as TRL's reward: `ok` its reward, `invalid` 0.0, `unscorable` and `pending`
    None (masked)."""
    if result.status == GradeStatus.invalid:
        return 0.0
    if result.status == GradeStatus.ok and result.reward is not None:
        return float(result.reward)
    return None


def _log(columns: dict[str, Any], name: str, results: list[GradeResult]) -> None:
    """The batch's statuses as TRL metrics (`<name>/unscorable`: the fraction masked, ...)
    and a `<name>_status` column of the completions table."""
    statuses = [r.status for r in results]
    log_metric: Callable[[str, float], None] | None = columns.get("log_metric")
    log_extra: Callable[[str, list[Any]], None] | None = columns.get("log_extra")
    if log_metric is not None and statuses:
        for status in GradeStatus:
            log_metric(f"{name}/{status.value}", statuses.count(status) / len(statuses))
    if log_extra is not None:
        log_extra(f"{name}_status", [s.value for s in statuses])


def crucible_reward(url: str | None = None, token: str | None = None, *,
                    submission: SubmissionMode = "text", answer_path: str | None = None,
                    wait_s: float = DEFAULT_WAIT_S, name: str = "crucible") -> CrucibleReward:  # fmt: skip
    """A reward function for TRL's GRPOTrainer (`reward_funcs=`) that grades each completion
    in its task's sandbox through the service at `url` (else $CRUCIBLE_SERVE_URL), with
    `token` (else $CRUCIBLE_SERVE_TOKEN or the file $CRUCIBLE_SERVE_TOKEN_FILE names).

    `submission`: what a completion's answer is: `text` (the final answer, written where
    the task declares), `files` (the whole content of the file at `answer_path`; without
    one, a JSON object of paths and contents), or `patch` (a unified diff applied to the
    task's workdir). `wait_s`: how long one batch may wait for its grades; those not done
    by then are masked (None).
    """
    return CrucibleReward(url, token, submission=submission, answer_path=answer_path,
                          wait_s=wait_s, name=name)  # fmt: skip
