"""Reach: a contract only declared, never reached, counts as absent (the stage semantics).

The plain detector reports every use the spec table names. A verifier stage
asks more: is the use in code that runs when the program is launched the way
the task launches it? A use belongs to the module-level def or class it sits
in (options written on a decorator, `@app.function(gpu=...)`, belong to the
decorated def); a def or class is reached when a reached one refers to its
name (a call, `.remote`, `.map`, `.spawn`, passing it along) in code that can
run (flow.py: a reference under `if False:` or after a `return` is none); a class is
reached as a whole, and a def registered on another object (`@web_app.get`
on a FastAPI app that a Modal ASGI function returns) is reached with that
object. A modern contract is present when one of its uses is
reached. Legacy ids are reported wherever they are written: the stage reports
legacy APIs, it does not require them.

What runs first (the roots) depends on the launch:

* `python` (`python prog.py`): module-level code, the `__main__` block
  included. Web endpoints and schedules too when the code brings the app up
  (`app.run()`), and every Modal function when it calls `app.deploy()`.
  `@app.local_entrypoint` functions do not run.
* `modal run` (`modal run prog.py[::NAME]`): module-level code without the
  `__main__` block (the module is imported, not run), web endpoints, and the
  entrypoint: NAME if given, else the local entrypoints, else (a file with
  none) every Modal function, since `modal run` can start any of them.
* `deploy` (`modal deploy prog.py`): module-level code and every Modal
  function and class (callers elsewhere can look them up); no entrypoint runs.
* `auto` (the default, when the task does not say): the launch the code shows.
  A program that calls `app.run()` or `app.deploy()` is a `python` script; one
  with local entrypoints is `modal run` (its `__main__` block and schedules
  count too); one with neither is started function by function, so every
  Modal function is a root.

So under `python`, a GPU function that nothing calls, serves or schedules
gives no `gpu` (nor `function`), while `app` and an image built at module
level still count.
"""

from __future__ import annotations

from typing import Literal

from crucible.contracts.api import analyze_source
from crucible.contracts.model import LEGACY_IDS, MAIN_OWNER, MODULE_OWNER, Analysis, ContractReport

Launch = Literal["auto", "python", "modal run", "deploy"]
LAUNCHES: tuple[Launch, ...] = ("auto", "python", "modal run", "deploy")


def roots(analysis: Analysis, launch: Launch = "auto", entrypoint: str | None = None) -> set[str]:
    """The module-level owners that run first under `launch`."""
    a = analysis
    module = {MODULE_OWNER}
    if launch == "deploy":
        return module | a.modal_defs
    if launch == "python":
        out = module | {MAIN_OWNER}
        if a.runs_app or a.deploys:
            out |= a.web | a.scheduled
        return out | (a.modal_defs if a.deploys else set())
    if launch == "modal run":
        started = {entrypoint} if entrypoint else (a.entrypoints or a.modal_defs)
        return module | a.web | started
    if a.runs_app or a.deploys:
        return roots(a, "python")
    if a.entrypoints:
        return roots(a, "modal run", entrypoint) | {MAIN_OWNER} | a.scheduled
    return module | {MAIN_OWNER} | a.modal_defs


def reached_owners(
    analysis: Analysis, launch: Launch = "auto", entrypoint: str | None = None
) -> set[str]:
    """Module-level defs and classes (and the module itself) that run."""
    seen: set[str] = set()
    todo = list(roots(analysis, launch, entrypoint))
    while todo:
        owner = todo.pop()
        if owner not in seen:
            seen.add(owner)
            todo.extend(analysis.refs.get(owner, ()))
            todo.extend(analysis.attached.get(owner, ()))
    return seen


def reached_ids(
    analysis: Analysis, launch: Launch = "auto", entrypoint: str | None = None
) -> set[str]:
    live = reached_owners(analysis, launch, entrypoint)
    return {o.contract for o in analysis.occurrences if o.owner in live or o.contract in LEGACY_IDS}


def detect_reached_source(
    source: str,
    filename: str = "<string>",
    launch: Launch = "auto",
    entrypoint: str | None = None,
) -> ContractReport:
    """Like detect_source, but a contract used only in code that never runs is absent."""
    analysis = analyze_source(source, filename)
    return ContractReport.of(filename, reached_ids(analysis, launch, entrypoint))
