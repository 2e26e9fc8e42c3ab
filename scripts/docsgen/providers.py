"""Each provider's `--env-param` keys (env-params.md)."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Any

from docsgen.text import BANNER, cell, default_of, type_name

# One line per key; the page fails to build when a provider gains or loses a key.
ENV_PARAM_HELP: dict[str, dict[str, str]] = {
    "local": {
        "runtime_dir": "Where sandboxes' scratch folders go (default: `$CRUCIBLE_SANDBOX_DIR`, "
        "else `crucible-sandboxes` in the temporary directory).",
        "cgroups": "`off` forces the rlimit fallback instead of cgroup limits.",
        "userland": "`auto` (a task with an image runs on it, one without on the host's "
        "userland), `image` (every task on an image: `base_image` for those without one) "
        "or `host` (every task on the host's userland: fast, no image).",
        "image_tool": "`auto` (Buildah, else a Docker engine), `buildah` or `docker`: what "
        "builds and fetches task images.",
        "base_image": "The image of a task without one, under `userland=image`.",
        "cpu": "Cores for every sandbox, overriding the task's `cpus`.",
        "memory": "MiB for every sandbox, overriding the task's `memory_mb`.",
        "timeout": "A sandbox's longest life from the moment it is ready, seconds: past it "
        "the sandbox is ended, and once its agent has started that counts against the "
        "attempt (0), never as a lost sandbox.",
        "env_variables": "Extra environment variables for every sandbox: `K=V;K2=V2` or a "
        "JSON object (the task's own win).",
    },
    "docker": {
        "host": "The engine's address (default: `$DOCKER_HOST`, else the local socket).",
        "image": "The image of a task that names none.",
        "compose_timeout": "Seconds a compose task's services have to meet their "
        "`depends_on` conditions (default 300).",
        "cpu": "Cores for every sandbox, overriding the task's `cpus`.",
        "memory": "MiB for every sandbox, overriding the task's `memory_mb`.",
        "timeout": "A sandbox's longest life from the moment it is ready, seconds: past it "
        "the sandbox is ended, and once its agent has started that counts against the "
        "attempt (0), never as a lost sandbox.",
        "env_variables": "Extra environment variables for every sandbox: `K=V;K2=V2` or a "
        "JSON object (the task's own win).",
    },
    "modal": {
        "app_name": "Modal app the sandboxes belong to (created if missing).",
        "environment": "Modal environment (default: the profile's, else Modal's default).",
        "environment_name": "Same as `environment` (the name AgentCompass and Modal's SDK use).",
        "image": "A registry image for every trial, overriding the tasks'.",
        "named_image": "An image published on Modal, by name (`Image.from_name`), for every "
        "trial; looked up, never built.",
        "timeout": "A sandbox's maximum lifetime, seconds (Modal's cap).",
        "idle_timeout": "End a sandbox idle this long, seconds.",
        "cpu": "Physical cores for every trial (request and limit), overriding the task's.",
        "memory": "MiB for every trial (request and limit), overriding the task's.",
        "gpu": "GPU for every trial, e.g. `A100-80GB:2`, overriding the task's.",
        "region": "A region, or several comma-separated.",
        "env": "Extra environment variables: `K=V;K2=V2` or a JSON object.",
        "env_variables": "Same as `env`.",
        "create_rate": "Sandbox creations per second; never exceeded in any 1 s window.",
        "max_starting": "Sandbox creations in flight at once.",
        "create_attempts": "Tries per sandbox on rate-limit, conflict and transport errors "
        "(not GPU capacity).",
        "config": "A private (mode 600) TOML file with `token_id` and `token_secret`.",
    },
    "simulated": {
        "start_latency": "Seconds each sandbox takes to start.",
        "fail_rate": "Share of creations that fail (`sandbox_failed`).",
        "hang_rate": "Share of creations that hang.",
        "exec_latency": "Seconds each command takes.",
        "pass_rate": "Share of graded trials that score 1.",
        "seed": "Seed of the draws.",
        "gpus": "GPUs the provider claims to have.",
        "salt": "Mixed into the reward draw; `random`: each process draws its own.",
        "hang_after": "Creations past the first N hang (a run stopped at a known point).",
    },
}
PROVIDER_INTRO = {
    "local": "bubblewrap sandboxes on this machine (the default). See "
    "[providers](../concepts/providers.md).",
    "docker": "One container per trial through the Docker Engine API.",
    "modal": "Modal sandboxes; see [run a job on Modal](../how-to/run-on-modal.md).",
    "simulated": "Runs no code at all: for tests and benchmarks of the engine.",
}


def provider_params(name: str) -> list[tuple[str, str, str]]:
    """(key, type, default) of each `--env-param` key provider `name` reads."""
    from crucible.sandboxes.registry import BUILTIN, _load

    cls = _load(BUILTIN[name])
    if name == "modal":
        from crucible.sandboxes.modal.params import ModalParams

        out = []
        for f in dataclasses.fields(ModalParams):
            default = default_of(
                f.default, None if f.default_factory is dataclasses.MISSING else f.default_factory
            )
            out.append((f.name, type_name(eval_hint(ModalParams, f.name)), default))
        from crucible.sandboxes.modal.params import ALIASES

        by_name = {k: (t, d) for k, t, d in out}
        out += [(alias, *by_name[name]) for alias, name in ALIASES.items()]
        return out
    out = []
    hints = typing.get_type_hints(cls.__init__)
    for p in inspect.signature(cls.__init__).parameters.values():
        if p.name == "self" or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL, p.KEYWORD_ONLY):
            continue
        default = "" if p.default is None else default_of(p.default)
        out.append((p.name, type_name(hints.get(p.name, str)), default))
    return out


def eval_hint(cls: type, name: str) -> Any:
    return typing.get_type_hints(cls)[name]


def env_params_page() -> str:
    from crucible.sandboxes.registry import BUILTIN

    parts = [
        BANNER,
        "# `--env-param` reference\n\n",
        "`crucible run --env NAME --env-param key=value` (repeatable; or an `[env_params]` "
        "table in a [config file](config.md)) passes these to the provider. Values are "
        "strings, checked by the provider when the job starts; a key the provider does not "
        "read is an error (exit 2) that names the closest one and lists the known ones. "
        "`cpu`, `memory`, `timeout` and `env_variables` mean the same on every provider "
        "(sandboxes/overrides.py).\n\n",
    ]
    for name in BUILTIN:
        params = provider_params(name)
        helps = ENV_PARAM_HELP.get(name, {})
        keys = [k for k, _, _ in params]
        if sorted(keys) != sorted(helps):
            raise SystemExit(
                f"gen-docs: provider {name}'s env params {sorted(keys)} != described {sorted(helps)}"
            )
        parts.append(f"## `{name}`\n\n{PROVIDER_INTRO[name]}\n\n")
        parts.append("| key | type | default | meaning |\n|---|---|---|---|\n")
        for key, tp, default in params:
            parts.append(f"| `{key}` | {tp} | {default} | {cell(helps[key])} |\n")
        parts.append("\n")
    return "".join(parts).rstrip() + "\n"
