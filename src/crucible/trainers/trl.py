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
is a hash of the task, the prompt, the completion, the submission shape, the trainer's step
and the completion's index, so a retried call (or a resumed run that samples the same)
reuses the grade: the service never starts a second sandbox for it. Statuses map to
rewards as TRL wants them: `ok` its reward, `invalid` 0.0 (the policy's fault), and
`unscorable` or still `pending` after `wait_s` None (masked). A request the service
refuses (unknown task, changed task: 4xx) or a service that does not answer raises
ServiceError: a misconfigured run fails loudly instead of training on nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import ValidationError

from crucible.records.prompt_row import TASK_HASH, TASK_ID
from crucible.records.serve import GradeItem, GradeResult, GradeStatus, TaskRef
from crucible.records.submission import (
    FilesSubmission,
    PatchSubmission,
    TextSubmission,
    check_sandbox_path,
)
from crucible.trainers.client import DEFAULT_WAIT_S, ServiceClient

SubmissionKind = Literal["text", "files", "patch"]
ID_PREFIX = "trl-"


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


def _digest(*parts: object) -> str:
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def grade_id(task_id: str, task_hash: str | None, prompt: object, completion: object,
             submission: str, step: int, index: int) -> str:  # fmt: skip
    """The idempotency key of one completion's grade: the same inputs give the same id."""
    return ID_PREFIX + _digest(task_id, task_hash, prompt, completion, submission, step, index)


def _column(name: str, columns: dict[str, Any], n: int) -> list[Any]:
    values = columns.get(name)
    if not isinstance(values, list) or len(values) != n:
        raise ValueError(
            f"the dataset has no {name!r} column for each completion: make it with "
            "`crucible dataset export` (its rows carry task_id and task_hash)"
        )
    return values


class CrucibleReward:
    """A TRL reward function grading each completion through the service. Picklable (the
    HTTP client is made on first use)."""

    def __init__(self, url: str | None = None, token: str | None = None, *,
                 submission: SubmissionKind = "text", answer_path: str | None = None,
                 wait_s: float = DEFAULT_WAIT_S, name: str = "crucible",
                 timeout_s: float = 30.0, verify: bool | str = True) -> None:  # fmt: skip
        if submission not in ("text", "files", "patch"):
            raise ValueError(f"submission is text, files or patch, not {submission!r}")
        if submission == "files":
            if answer_path is None:
                raise ValueError("submission='files' needs answer_path: where the answer goes")
            answer_path = check_sandbox_path(answer_path)
        elif answer_path is not None:
            raise ValueError("answer_path is for submission='files' (a text answer goes where "
                             "the task declares: [metadata] answer_path)")  # fmt: skip
        self.__name__ = name
        self.url, self.token = url, token
        self.submission, self.answer_path, self.wait_s = submission, answer_path, wait_s
        self.timeout_s, self.verify = timeout_s, verify
        self._client: ServiceClient | None = None
        self.last_results: list[GradeResult | None] = []  # the last batch's, None: not sent

    @property
    def client(self) -> ServiceClient:
        if self._client is None:
            self._client = ServiceClient(self.url, self.token, timeout_s=self.timeout_s,
                                         verify=self.verify)  # fmt: skip
        return self._client

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}

    def _submission(self, answer: str) -> TextSubmission | FilesSubmission | PatchSubmission:
        if self.submission == "text":
            return TextSubmission(text=answer)
        if self.submission == "files":
            assert self.answer_path is not None
            return FilesSubmission(files={self.answer_path: answer})
        return PatchSubmission(patch=answer)

    def __call__(self, prompts: list[Any], completions: list[Any],
                 **columns: Any) -> list[float | None]:  # fmt: skip
        n = len(completions)
        task_ids = _column(TASK_ID, columns, n)
        hashes = columns.get(TASK_HASH) or [None] * n
        state = columns.get("trainer_state")
        step = int(getattr(state, "global_step", 0) or 0)
        items: list[GradeItem] = []
        slots: list[int | None] = []  # completion i -> its place in items (None: invalid)
        for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
            try:
                sub = self._submission(completion_text(completion))
            except ValidationError:  # empty patch, over-long text: the policy's fault
                slots.append(None)
                continue
            task = TaskRef(id=str(task_ids[i]), hash=hashes[i])
            items.append(GradeItem(
                id=grade_id(task.id, task.hash, prompt, completion, self.submission, step, i),
                task=task, submission=sub,
                group_id=ID_PREFIX + _digest(task.id, task.hash, prompt, step)[:32],
                meta={"trainer": "trl", "step": step, "index": i},
            ))  # fmt: skip
            slots.append(len(items) - 1)
        results = self.client.grade(items, wait_s=self.wait_s) if items else []
        self.last_results = [None if s is None else results[s] for s in slots]
        rewards = [reward_of(r) for r in self.last_results]
        _log(columns, self.__name__, self.last_results)
        return rewards

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def reward_of(result: GradeResult | None) -> float | None:
    """A grade as TRL's reward: `ok` its reward (None if it has none), `invalid` (or not
    sendable: None) 0.0,
    `unscorable` and `pending` None (masked)."""
    if result is None or result.status == GradeStatus.invalid:
        return 0.0
    if result.status == GradeStatus.ok:
        return None if result.reward is None else float(result.reward)
    return None


def _log(columns: dict[str, Any], name: str, results: list[GradeResult | None]) -> None:
    """The batch's statuses as TRL metrics (`<name>/unscorable`: the fraction masked, ...)
    and a `<name>_status` column of the completions table."""
    statuses = [GradeStatus.invalid if r is None else r.status for r in results]
    log_metric: Callable[[str, float], None] | None = columns.get("log_metric")
    log_extra: Callable[[str, list[Any]], None] | None = columns.get("log_extra")
    if log_metric is not None and statuses:
        for status in GradeStatus:
            log_metric(f"{name}/{status.value}", statuses.count(status) / len(statuses))
    if log_extra is not None:
        log_extra(f"{name}_status", [s.value for s in statuses])


def crucible_reward(url: str | None = None, token: str | None = None, *,
                    submission: SubmissionKind = "text", answer_path: str | None = None,
                    wait_s: float = DEFAULT_WAIT_S, name: str = "crucible",
                    timeout_s: float = 30.0, verify: bool | str = True) -> CrucibleReward:  # fmt: skip
    """A reward function for TRL's GRPOTrainer (`reward_funcs=`) that grades each completion
    in its task's sandbox through the service at `url` (else $CRUCIBLE_SERVE_URL), with
    `token` (else $CRUCIBLE_SERVE_TOKEN or the file $CRUCIBLE_SERVE_TOKEN_FILE names).

    `submission`: what a completion's answer is: `text` (the final answer, written where
    the task declares), `files` (the content of the file at `answer_path`), or `patch`
    (a unified diff applied to the task's workdir). `wait_s`: how long one batch may wait
    for its grades; those not done by then are masked (None).
    """
    return CrucibleReward(url, token, submission=submission, answer_path=answer_path,
                          wait_s=wait_s, name=name, timeout_s=timeout_s, verify=verify)  # fmt: skip
