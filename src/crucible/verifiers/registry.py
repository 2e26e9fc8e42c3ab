"""Verifier stage kinds by name. Built-ins are dotted paths, imported only when a task
names the kind; a lab adds a kind from its own package through the `crucible.stages`
entry-point group, without editing crucible:

    [project.entry-points."crucible.stages"]
    lint = "mylab.stages:LintStage"        # a Stage subclass whose kind is "lint"

A built-in name is never taken over by an entry point, and "script" (the task's own
test script, always the first stage) cannot be declared.
"""

from __future__ import annotations

import importlib
import inspect
from importlib.metadata import EntryPoint, entry_points

from crucible.verifiers.stages.base import Stage

GROUP = "crucible.stages"
BUILTIN: dict[str, str] = {
    "answer": "crucible.verifiers.stages.answer:AnswerStage",
    "contracts": "crucible.verifiers.stages.contracts:ContractsStage",
    "swebench": "crucible.verifiers.stages.swebench:SwebenchStage",
    "io": "crucible.verifiers.stages.io:IoStage",
    "judge": "crucible.verifiers.stages.judge:JudgeStage",
}
RESERVED = "script"


class StageLookupError(LookupError):
    """A kind that names no usable stage; `hint` lists the kinds there are."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def _entry_points() -> dict[str, EntryPoint]:
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=GROUP):
        found.setdefault(ep.name, ep)  # the first on sys.path, as importlib finds modules
    return found


def stage_kinds() -> list[str]:
    """Every kind a task may declare: the built-ins and the installed entry points."""
    return sorted((set(BUILTIN) | set(_entry_points())) - {RESERVED})


def _known() -> str:
    return f"kinds: {', '.join(stage_kinds())}"


def stage_class(kind: str) -> type[Stage]:
    """The Stage class of `kind`, imported now; StageLookupError when there is none, or
    what the name loads is not a Stage of that kind."""
    if kind == RESERVED:
        raise StageLookupError(
            "kind 'script' is the task's tests/test.sh, always run first: it is not declared",
            hint=_known(),
        )
    if kind in BUILTIN:
        module, _, attr = BUILTIN[kind].partition(":")
        found: object = getattr(importlib.import_module(module), attr)
        where = BUILTIN[kind]
    else:
        ep = _entry_points().get(kind)
        if ep is None:
            raise StageLookupError(f"unknown kind {kind!r}", hint=_known())
        where = f"entry point {GROUP}:{ep.name} = {ep.value}"
        try:
            found = ep.load()
        except Exception as exc:  # a lab's package that does not import: say so, and why
            raise StageLookupError(
                f"kind {kind!r} ({where}) could not be loaded: {type(exc).__name__}: {exc}"[:500]
            ) from exc
    problem = _unusable(found, kind)
    if problem is not None:
        raise StageLookupError(f"kind {kind!r} ({where}) {problem}"[:500])
    assert isinstance(found, type) and issubclass(found, Stage)  # _unusable checked it
    return found


def _unusable(found: object, kind: str) -> str | None:
    if not (isinstance(found, type) and issubclass(found, Stage)):
        return f"is not a Stage subclass: {found!r}"
    if getattr(found, "kind", None) != kind:
        return f"declares kind {getattr(found, 'kind', None)!r}"
    missing = [a for a in ("default_role", "roles") if not hasattr(found, a)]
    if missing:
        return f"lacks {', '.join(missing)}"
    if inspect.isabstract(found):
        return "is abstract (no run)"
    return None
