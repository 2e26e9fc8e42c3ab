"""Providers by name. Built-ins are imported lazily; third parties register
through the `crucible.providers` entry point group, so start-up never imports
an optional SDK."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable
from importlib.metadata import entry_points
from typing import Any

from crucible.errors import UnknownKey
from crucible.sandboxes.base import Provider

BUILTIN: dict[str, str] = {
    "local": "crucible.sandboxes.local.provider:LocalProvider",
    "docker": "crucible.sandboxes.docker.provider:DockerProvider",
    "modal": "crucible.sandboxes.modal.provider:ModalProvider",
    "simulated": "crucible.sandboxes.simulated:SimulatedProvider",
}


def _load(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def provider_names() -> list[str]:
    names = set(BUILTIN)
    names.update(ep.name for ep in entry_points(group="crucible.providers"))
    return sorted(names)


def provider_class(name: str) -> type[Provider]:
    if name in BUILTIN:
        cls: type[Provider] = _load(BUILTIN[name])
        return cls
    eps = [ep for ep in entry_points(group="crucible.providers") if ep.name == name]
    if not eps:
        raise KeyError(f"unknown provider {name!r}; known: {', '.join(provider_names())}")
    loaded: type[Provider] = eps[0].load()
    return loaded


def env_param_names(cls: type[Provider]) -> tuple[str, ...] | None:
    """The `--env-param` keys provider `cls` reads: those it declares, else its
    constructor's keywords (keyword-only ones are for code, not the command line).
    None when it declares none and takes any keyword: then it checks its own."""
    if cls.env_param_names is not None:
        return tuple(cls.env_param_names)
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]  # not self
    names = tuple(p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD)
    if not names and any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return names


def get_provider(
    name: str, params: dict[str, str] | None = None, *, also: Iterable[str] = ()
) -> Provider:
    """Instantiate provider `name` with its `--env-param` values. A key it does not read
    raises UnknownKey (a ValueError) naming the closest known one; `also`: keys the
    caller reads itself (the conformance suite's image)."""
    cls = provider_class(name)
    known = env_param_names(cls)
    if known is not None:
        allowed = (*known, *also)
        for key in params or {}:
            if key not in allowed:
                raise UnknownKey(f"{name} env-param", key, allowed)
    provider: Provider = cls(**(params or {}))
    return provider
