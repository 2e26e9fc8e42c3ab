"""The records of a job folder (result-schema.md) and the Python API (python-api.md)."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Any

from pydantic import BaseModel

from docsgen.text import BANNER, cell, model_table, plain, type_name


def models_below(roots: list[type[BaseModel]]) -> list[type[BaseModel]]:
    seen: list[type[BaseModel]] = []

    def visit(tp: Any) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if tp in seen:
                return
            seen.append(tp)
            for f in tp.model_fields.values():
                visit(f.annotation)
            return
        for arg in typing.get_args(tp):
            visit(arg)

    for r in roots:
        visit(r)
    return seen


def schema_page() -> str:
    from crucible.records.job import JobConfig, JobSummary
    from crucible.records.trial import TrialResult

    parts = [
        BANNER,
        "# Result schema\n\n",
        "The records a job leaves on disk (see [the jobs folder](jobs-folder.md)), as their "
        "pydantic models define them: `<trial>/result.json` is a "
        "[TrialResult](#trialresult), `<job>/job.json` a [JobConfig](#jobconfig) and "
        "`<job>/result.json` a [JobSummary](#jobsummary). Field names follow Harbor's "
        "TrialResult where one exists.\n\n",
    ]
    for model in models_below([TrialResult, JobConfig, JobSummary]):
        parts.append(f"## {model.__name__}\n\n")
        doc = inspect.getdoc(model)
        if doc and model.__doc__ and "__doc__" in model.__dict__:
            parts.append(" ".join(doc.split()) + "\n\n")
        parts.append(model_table(model) + "\n")
    return "".join(parts).rstrip() + "\n"


# -- the Python API ------------------------------------------------------------------------

API: list[tuple[str, str, list[str]]] = [
    (
        "Run a job",
        "What `crucible run` does, from Python: a request, a launch plan (checked and "
        "preflighted), then its runner.\n\n```python\nimport asyncio\nfrom pathlib import Path\n\n"
        "from crucible.engine.launch import prepare_launch\nfrom crucible.engine.request import "
        "RunRequest\n\n\nasync def main() -> None:\n    plan = await prepare_launch("
        'RunRequest(paths=[Path("examples/tasks")], agent="oracle"))\n    try:\n'
        "        summary = await plan.runner().run()\n    finally:\n"
        "        await plan.provider.aclose()\n    print(summary.mean_reward)\n\n\n"
        "asyncio.run(main())\n```",
        [
            "crucible.engine.request:RunRequest",
            "crucible.engine.launch:prepare_launch",
            "crucible.engine.launch:LaunchPlan",
        ],
    ),
    (
        "Tasks",
        "Load and check Harbor-format task folders.",
        ["crucible.tasks.loader:load_task", "crucible.tasks.loader:check_task"],
    ),
    (
        "Providers and sandboxes",
        "A third-party provider registers a `Provider` subclass in the `crucible.providers` "
        "entry-point group; `--env NAME` then finds it, and `crucible sandboxes check --env NAME` "
        "runs the conformance suite on it.",
        [
            "crucible.sandboxes.registry:get_provider",
            "crucible.sandboxes.base:Provider",
            "crucible.sandboxes.base:Sandbox",
            "crucible.sandboxes.base:SandboxSpec",
            "crucible.sandboxes.base:ExecResult",
        ],
    ),
    (
        "Agents",
        "A third-party agent registers an `Agent` subclass in the `crucible.agents` "
        "entry-point group; `--agent NAME` then finds it.",
        ["crucible.agents.registry:get_agent", "crucible.agents.base:Agent"],
    ),
    (
        "Training runs",
        "See [training runs](../train.md): a config module defines `config = TrainConfig(...)`.",
        [
            "crucible.train.config:TrainConfig",
            "crucible.train.config:load_config",
            "crucible.train.recipe:Recipe",
            "crucible.train.recipe:LaunchPlan",
            "crucible.train.trl_recipe:TRLGRPORecipe",
            "crucible.train.dataset:Dataset",
            "crucible.train.dataset:JSONLDataset",
            "crucible.train.dataset:HFDataset",
            "crucible.train.dataset:TaskSetDataset",
            "crucible.train.reward:Sample",
            "crucible.train.reward:GraderReward",
            "crucible.train.run:RunHandle",
        ],
    ),
    (
        "Modal contracts and the offline runtime",
        "See [Modal SDK contracts and the offline runtime](modal-offline.md).",
        [
            "crucible.contracts:detect_source",
            "crucible.contracts:detect_paths",
            "crucible.modalrt.api:run_program",
            "crucible.modalrt.serve:serve_program",
        ],
    ),
]


def _default_text(value: Any) -> str:
    if isinstance(value, str | int | float | bool | type(None)):
        return repr(value)
    if isinstance(value, tuple) and all(isinstance(v, str | int | float) for v in value):
        return repr(value)
    return "..."  # an object: its repr may hold an address


def signature_of(obj: Any, name: str) -> str:
    sig = inspect.signature(obj)
    params = []
    star = False
    for p in sig.parameters.values():
        if p.kind is p.KEYWORD_ONLY and not star:
            params.append("*")
            star = True
        text = "*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else ""
        text += p.name
        if p.annotation is not p.empty:
            text += f": {p.annotation if isinstance(p.annotation, str) else type_name(p.annotation, False)}"
        if p.default is not p.empty:
            text += f" = {_default_text(p.default)}"
        if p.kind is p.VAR_POSITIONAL:
            star = True
        params.append(text)
    ret = sig.return_annotation
    arrow = "" if ret is sig.empty else f" -> {ret}"
    prefix = "async def " if inspect.iscoroutinefunction(obj) else "def "
    one = f"{prefix}{name}({', '.join(params)}){arrow}"
    if len(one) <= 88:
        return one
    return f"{prefix}{name}(\n" + "".join(f"    {p},\n" for p in params) + f"){arrow}"


def _doc(obj: Any) -> str:
    doc = obj.__doc__ and inspect.cleandoc(obj.__doc__)
    return plain(doc) + "\n\n" if doc else ""


def api_entry(target: str) -> str:
    import importlib

    module, _, attr = target.partition(":")
    obj = getattr(importlib.import_module(module), attr)
    out = f"### `{module}.{attr}`\n\n"
    if not inspect.isclass(obj):
        return out + f"```python\n{signature_of(obj, attr)}\n```\n\n" + _doc(obj)
    bases = [b.__name__ for b in obj.__bases__ if b is not object]
    head = f"class {attr}({', '.join(bases)})" if bases else f"class {attr}"
    doc = "" if (obj.__doc__ or "").startswith(f"{attr}(") else _doc(obj)  # a dataclass's own
    out += f"```python\n{head}\n```\n\n" + doc
    if issubclass(obj, BaseModel):
        return out + model_table(obj, link=False) + "\n"
    if dataclasses.is_dataclass(obj):
        rows = "".join(f"| `{f.name}` | {cell(f.type)} |\n" for f in dataclasses.fields(obj))
        out += "| field | type |\n|---|---|\n" + rows + "\n"
    for name, member in obj.__dict__.items():
        fn = member.fget if isinstance(member, property) else member
        if name.startswith("_") or not callable(fn):
            continue
        if isinstance(member, property):
            out += f"```python\n@property\n{signature_of(fn, name)}\n```\n\n" + _doc(fn)
        else:
            out += f"```python\n{signature_of(fn, name)}\n```\n\n" + _doc(fn)
    return out


def python_api_page() -> str:
    parts = [
        BANNER,
        "# Python API\n\n",
        "The entry points a program uses (signatures and docstrings from the code). "
        "Everything else is internal and may change.\n\n",
    ]
    for title, intro, targets in API:
        parts.append(f"## {title}\n\n{intro}\n\n")
        parts.extend(api_entry(t) for t in targets)
    return "".join(parts).rstrip() + "\n"
