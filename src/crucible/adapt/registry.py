"""Adapters by name. Built-ins are dotted paths, imported only when named; a lab adds
one from its own package through the `crucible.adapters` entry-point group:

    [project.entry-points."crucible.adapters"]
    mybench = "mylab.adapt:MyBenchAdapter"     # an Adapter subclass whose name is "mybench"

A built-in name is never taken over by an entry point.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from crucible.adapt.base import Adapter, AdaptError

GROUP = "crucible.adapters"
BUILTIN: dict[str, str] = {
    "swebench": "crucible.adapt.swebench:SwebenchAdapter",
    "answers": "crucible.adapt.answers:AnswersAdapter",
}


def adapter_names() -> list[str]:
    """Every adapter there is: the built-ins and the installed entry points."""
    return sorted(set(BUILTIN) | {ep.name for ep in entry_points(group=GROUP)})


def adapter_class(name: str) -> type[Adapter]:
    """The Adapter class of `name`; AdaptError listing the known names when there is none."""
    if name in BUILTIN:
        module, _, attr = BUILTIN[name].partition(":")
        found: object = getattr(importlib.import_module(module), attr)
    else:
        ep = next((e for e in entry_points(group=GROUP) if e.name == name), None)
        if ep is None:
            raise AdaptError(
                f"unknown adapter {name!r}", hint=f"adapters: {', '.join(adapter_names())}"
            )
        try:
            found = ep.load()
        except Exception as exc:  # a lab's package that does not import: say so, and why
            raise AdaptError(
                f"adapter {name!r} ({ep.value}) could not be loaded: {exc!r}"[:500]
            ) from exc
    if not (isinstance(found, type) and issubclass(found, Adapter)) or found.name != name:
        raise AdaptError(f"adapter {name!r} does not name an Adapter subclass called {name!r}")
    return found
