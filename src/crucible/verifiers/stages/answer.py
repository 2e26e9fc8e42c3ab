"""The answer stage: scores a single-turn answer (tasks `crucible adapt answers` wrote)
on the host. test.sh prints a header line and then the agent's answer file; the stage
compares what follows the header in test.sh's output, as the host captured it, with the
expected answer kept in the task's tests/ (read without following a link), by a reward
function: `exact`, `numeric`, or `module:function` (called with (answer, expected), it
returns a number in [0, 1] or a bool). Gate by default (the reward counts when the
function gives 1; its value is the `score` component); as a score stage it only adds it.
"""

from __future__ import annotations

import importlib
import json
import math
import os
from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import ValidationError, field_validator

from crucible.errors import TaskInvalid, VerifierFailed
from crucible.records.verifier import StageResult, StageRole
from crucible.verifiers.stages.base import Stage, StageContext, StageSpec

EXPECTED_FILE = "expected.json"
HEADER = "@@crucible-answer"
MAX_ANSWER_CHARS = 65536


def exact(answer: str, expected: str) -> float:
    return float(answer.strip() == expected.strip())


def numeric(answer: str, expected: str) -> float:
    try:
        a, e = float(answer.strip().replace(",", "")), float(expected.strip().replace(",", ""))
    except ValueError:
        return 0.0
    return float(math.isfinite(a) and math.isclose(a, e, rel_tol=1e-6, abs_tol=1e-9))


BUILTIN: dict[str, Callable[[str, str], float]] = {"exact": exact, "numeric": numeric}


def check_reward_name(name: str) -> None:
    """TaskInvalid unless `name` is a built-in or looks like module:function."""
    try:
        AnswerSpec(reward=name)
    except ValidationError as exc:
        raise TaskInvalid(f"reward {name!r}: {exc.errors()[0]['msg']}") from exc


def reward_fn(name: str) -> Callable[[str, str], Any]:
    check_reward_name(name)
    if name in BUILTIN:
        return BUILTIN[name]
    module, _, attr = name.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise TaskInvalid(f"reward {name!r} could not be imported: {exc}") from exc
    if not callable(fn):
        raise TaskInvalid(f"reward {name!r} is not callable")
    return fn  # type: ignore[no-any-return]


class AnswerSpec(StageSpec):
    kind: str = "answer"
    role: StageRole = "gate"
    reward: str = "exact"

    @field_validator("reward")
    @classmethod
    def _named(cls, reward: str) -> str:
        module, sep, attr = reward.partition(":")
        if reward not in BUILTIN and not (sep and module and attr.isidentifier()):
            raise ValueError(f"not {' or '.join(BUILTIN)} nor module:function")
        return reward


class AnswerStage(Stage):
    kind: ClassVar[str] = "answer"
    default_role: ClassVar[StageRole] = "gate"
    roles: ClassVar[tuple[StageRole, ...]] = ("gate", "score")
    spec_type: ClassVar[type[StageSpec]] = AnswerSpec
    spec: AnswerSpec
    # The reward function is the task's (or a lab's): its crash is the task's, not the answer's.
    crash_kind: ClassVar[type[TaskInvalid]] = TaskInvalid  # type: ignore[assignment]

    async def run(self, ctx: StageContext) -> StageResult:
        fn = reward_fn(self.spec.reward)
        expected = _expected(ctx)
        head, _sep, answer = ctx.test_output.partition("\n")
        if head != HEADER:
            raise VerifierFailed("the answer's test printed no header: it did not run")
        value = fn(answer[:MAX_ANSWER_CHARS], expected)
        score = float(value)
        if not (math.isfinite(score) and 0.0 <= score <= 1.0):
            raise TaskInvalid(f"reward {self.spec.reward!r} gave {value!r}, not a number in [0, 1]")
        ok = score >= 1.0
        return self.result(
            status=self.status(ok),
            verdict="pass" if ok else "fail",
            components={"score": score},
            reason=f"{self.spec.reward}: {score:g}",
        )


def _expected(ctx: StageContext) -> str:
    path = ctx.task.tests_dir / EXPECTED_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd) as f:
            data = json.loads(f.read(1 << 20))
        return str(data["answer"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TaskInvalid(f"tests/{EXPECTED_FILE}: {exc!r}"[:300]) from exc
