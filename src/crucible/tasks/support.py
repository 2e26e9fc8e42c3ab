"""Which of a task's Harbor features each provider can run, and which it cannot yet.

A Harbor task always loads (its fields are modelled); what crucible cannot run
is named here, field by field, so `tasks check` can print it and the launch can
refuse the task before any sandbox is made. A refusal is `resources_unavailable`,
not `task_invalid`: the task is a valid Harbor task, it is the provider (or
crucible) that lacks the feature, and the same task runs once it is there
(task_invalid is for tasks that cannot be loaded or built anywhere).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from crucible.tasks.models import AgentSection, NetworkMode, Task, VerifierSection
from crucible.tasks.sections import MAIN_SERVICE, VerifierMode, artifact_list

PROVIDERS = ("local", "docker", "modal")
COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")

# refused: the trial would mis-run without it, so it is refused at launch.
# ignored: the trial runs as Harbor's would without it (nothing graded depends on it).
Effect = Literal["refused", "ignored"]


@dataclass(frozen=True)
class Feature:
    field: str
    what: str
    uses: Callable[[Task], bool]
    supported_on: tuple[str, ...] = ()
    effect: Effect = "refused"
    # True: a provider outside supported_on refuses it itself when it makes the sandbox.
    provider_refuses: bool = False
    # True: refused on every provider outside supported_on, test stand-ins included.
    only_there: bool = False


def _separate_verifier(task: Task) -> bool:
    cfg = task.config
    if cfg.steps:
        return any(cfg.step_verifier_mode(s) == VerifierMode.separate for s in cfg.steps)
    return cfg.verifier_mode() == VerifierMode.separate


def _phase_network_differs(task: Task) -> bool:
    # A sandbox keeps one network for its life: a phase may only restate the environment's.
    # A separate verifier's sandbox is made with its own, so only in-place grading counts.
    cfg = task.config
    base = (cfg.environment.resolved_network(), cfg.environment.allowed_hosts)
    phases: list[AgentSection | VerifierSection] = [cfg.agent]
    if not cfg.steps and cfg.verifier_mode() == VerifierMode.shared:
        phases.append(cfg.verifier)
    for step in cfg.steps or []:
        phases.append(step.agent)
        if cfg.step_verifier_mode(step) == VerifierMode.shared:
            phases.append(step.verifier if step.verifier.network_mode is not None else cfg.verifier)
    return any(
        p.network_mode is not None and (p.network_mode, p.allowed_hosts) != base for p in phases
    )


def _allowlist(task: Task) -> bool:
    return task.config.environment.resolved_network() == NetworkMode.allowlist


def _on_sidecar(task: Task) -> bool:
    cfg = task.config
    return any(h.service != MAIN_SERVICE for h in cfg.verifier.collect) or any(
        a.on_sidecar for a in artifact_list(cfg.artifacts)
    )


def compose_file(task: Task) -> Path | None:
    """The task's compose file (Harbor reads docker-compose.yaml; the others are accepted)."""
    for name in COMPOSE_FILES:
        if (task.environment_dir / name).is_file():
            return task.environment_dir / name
    return None


def _compose(task: Task) -> bool:
    return compose_file(task) is not None


FEATURES: tuple[Feature, ...] = (
    Feature(
        "steps",
        "multi-step tasks ([[steps]]: one sandbox, each step graded in it)",
        lambda t: bool(t.config.steps),
        supported_on=PROVIDERS,
    ),
    Feature(
        "steps.artifacts",
        "per-step artifacts (with the task's, collected after each step)",
        lambda t: any(s.artifacts for s in t.config.steps or []),
        supported_on=PROVIDERS,
    ),
    Feature(
        "verifier.environment_mode",
        "a separate verifier environment (environment_mode = 'separate' or [verifier.environment]; "
        "per step in a multi-step task)",
        _separate_verifier,
        supported_on=PROVIDERS,
    ),
    Feature(
        "verifier.collect",
        "collect hooks ([[verifier.collect]]) in the main service",
        lambda t: any(h.service == MAIN_SERVICE for h in t.config.verifier.collect),
        supported_on=PROVIDERS,
    ),
    Feature(
        "verifier.collect.service / artifacts.service",
        "collect hooks and artifacts of a compose sidecar",
        _on_sidecar,
        supported_on=("docker",),
        only_there=True,
    ),
    Feature(
        "environment/docker-compose.yaml",
        "multi-container environments (compose sidecars on a private network of the trial)",
        _compose,
        supported_on=("docker",),
        only_there=True,
    ),
    Feature(
        "environment.healthcheck",
        "an environment healthcheck (run before the agent; failing: sandbox_failed)",
        lambda t: t.config.environment.healthcheck is not None,
        supported_on=PROVIDERS,
    ),
    Feature(
        "agent.network_mode / verifier.network_mode",
        "a per-phase network policy that differs from the environment's",
        _phase_network_differs,
    ),
    Feature("environment.tpu", "TPUs", lambda t: t.config.environment.tpu is not None),
    Feature(
        "environment.os",
        "containers of an OS other than linux",
        lambda t: t.config.environment.os != "linux",
    ),
    Feature(
        "environment.network_mode",
        "a network allowlist (refused by the provider when it creates the sandbox)",
        _allowlist,
        supported_on=("modal",),
        provider_refuses=True,
    ),
    Feature(
        "artifacts",
        "declared artifacts (collected to <trial>/sandbox/artifacts/)",
        lambda t: bool(t.config.artifacts),
        supported_on=PROVIDERS,
    ),
    Feature(
        "environment.mcp_servers",
        "MCP servers (the agent gets none)",
        lambda t: bool(t.config.environment.mcp_servers),
        effect="ignored",
    ),
    Feature(
        "environment.skills_dir",
        "skills directories (not copied to the agent)",
        lambda t: t.config.environment.skills_dir is not None,
        effect="ignored",
    ),
)


@dataclass(frozen=True)
class FeatureUse:
    """One feature a task uses, and whether the given provider runs it."""

    feature: Feature
    supported: bool

    def describe(self) -> str:
        f = self.feature
        where = ", ".join(f.supported_on) if f.supported_on else "no provider yet"
        if self.supported:
            return f"{f.field}: {f.what}: supported on: {where}"
        if f.effect == "ignored":
            return f"{f.field}: {f.what}: not supported yet, ignored (supported on: {where})"
        return (
            f"{f.field}: {f.what}: not supported yet, refused as resources_unavailable "
            f"(supported on: {where})"
        )


def feature_uses(task: Task, provider_name: str | None = None) -> list[FeatureUse]:
    """The listed features `task` uses; `supported` for `provider_name` (None: any provider)."""
    out = []
    for feature in FEATURES:
        if feature.uses(task):
            ok = (
                bool(feature.supported_on)
                if provider_name is None
                else provider_name in feature.supported_on
            )
            out.append(FeatureUse(feature, ok))
    return out


def unsupported_features(task: Task, provider_name: str) -> list[str]:
    """What `task` needs that crucible cannot run on `provider_name`: the launch refuses these.

    A network allowlist is refused by the provider itself; features whose absence
    changes nothing graded are not listed.
    """
    return [
        _refusal(use.feature, provider_name)
        for use in feature_uses(task, provider_name)
        if not use.supported
        and use.feature.effect == "refused"
        and not use.feature.provider_refuses
        # a provider outside crucible's own (a test stand-in) is held to the unsupported only
        and (not use.feature.supported_on or use.feature.only_there or provider_name in PROVIDERS)
    ]


def _refusal(feature: Feature, provider_name: str) -> str:
    if not feature.supported_on:
        return f"{feature.field}: {feature.what} is not supported yet"
    return (
        f"{feature.field}: {feature.what} is not supported on this provider "
        f"({provider_name!r}; runs on: {', '.join(feature.supported_on)})"
    )
