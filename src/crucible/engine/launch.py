"""From a run request to a launch plan: resume rules, defaults, validation, preflight.

What `crucible run`, the grading service and the generator share. Nothing is
created or written here: the plan holds the loaded tasks, the provider (its
preflight passed), the agent, the job's config and the runner's options; the
caller runs it (`plan.runner().run()`) and closes the provider.

A request that cannot run as asked raises `LaunchRefused` (with the exit code
and error name the CLI prints); a provider whose preflight fails raises its
own `CrucibleError`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from crucible.agents.base import Agent
from crucible.agents.registry import get_agent
from crucible.engine.executor import Executor, ExecutorSettings, LocalExecutor, get_executor
from crucible.engine.job import JobOptions, JobRunner
from crucible.engine.plan import check_resumable, make_job_config, new_job_id
from crucible.engine.request import RunRequest
from crucible.errors import ExitCode, ProviderUnavailable, SandboxFailed
from crucible.records.defaults import (
    DEFAULT_AGENT,
    DEFAULT_ATTEMPTS,
    DEFAULT_CONCURRENCY,
    DEFAULT_ENV,
    DEFAULT_GPU_CONCURRENCY,
    DEFAULT_MAX_RETRIES,
)
from crucible.records.job import JobConfig
from crucible.sandboxes.base import Provider
from crucible.sandboxes.registry import get_provider
from crucible.store.layout import default_jobs_dir, read_job_config
from crucible.tasks.dataset import check_tasks
from crucible.tasks.hostvars import HostEnv, HostEnvRefused
from crucible.tasks.models import Task
from crucible.tasks.problems import Problem
from crucible.tasks.support import unsupported_features
from crucible.verifiers.pipeline import stage_problems

# Called once per invalid task found (its path and its problems), before any refusal.
OnInvalid = Callable[[Path, list[Problem]], None]


class LaunchRefused(Exception):
    """The request cannot run as asked; `code` is the exit code, `error` its stable name."""

    def __init__(self, code: int, error: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.error = error
        self.message = message
        self.hint = hint


def _usage(message: str, hint: str | None = None) -> LaunchRefused:
    return LaunchRefused(ExitCode.USAGE, "usage", message, hint=hint)


@dataclass
class LaunchPlan:
    cfg: JobConfig
    tasks: list[Task]
    provider: Provider
    agent: Agent
    options: JobOptions
    jobs_dir: Path
    resumed: bool
    executor: Executor = field(default_factory=LocalExecutor)

    def runner(self) -> JobRunner:
        return JobRunner(self.cfg, self.tasks, self.provider, self.agent, self.jobs_dir,
                         self.options, executor=self.executor)  # fmt: skip


def _executor(req: RunRequest, env: str, job_id: str) -> Executor:
    settings = ExecutorSettings(
        name=req.executor, address=req.ray_address, shared_store=req.shared_store, env=env,
        env_params=dict(req.env_params), job_id=job_id, max_builds=req.max_builds,
        create_rate=req.create_rate, max_starting=req.max_starting,
    )  # fmt: skip
    try:
        return get_executor(settings)
    except (KeyError, ValueError) as exc:
        raise _usage(str(exc).strip('"')) from exc


def load_tasks(
    req: RunRequest,
    paths: list[Path],
    on_invalid: OnInvalid | None,
    on_warnings: OnInvalid | None = None,
) -> list[Task]:
    tasks: list[Task] = []
    invalid: list[tuple[Path, list[Problem]]] = []
    missing: list[Path] = []  # paths that name no task
    try:
        host = HostEnv(req.task_env or [], os.environ)
    except HostEnvRefused as exc:
        raise _usage(str(exc)) from exc
    for check in check_tasks(paths, include=req.include, exclude=req.exclude, host=host):
        if check.valid and check.task is not None:
            tasks.append(check.task)
            if check.warnings and on_warnings is not None:
                on_warnings(check.path, check.warnings)  # what `tasks check` warns of
        else:
            invalid.append((check.path, check.problems))
            if check.not_found:
                missing.append(check.path)
    # Verifier stages are declared in [metadata] (tasks/ does not read them): checked here,
    # before an agent runs, not when the first trial is graded.
    staged = [(t, stage_problems(t)) for t in tasks]
    tasks = [t for t, problems in staged if not problems]
    invalid += [
        (t.path, [Problem(path=t.path / "task.toml", message=m) for m in p]) for t, p in staged if p
    ]
    for path, problems in invalid:
        if on_invalid is not None:
            on_invalid(path, problems)
    if missing and not req.skip_invalid:
        raise LaunchRefused(
            ExitCode.NOT_FOUND,
            "not_found",
            f"no task at {', '.join(map(str, missing))}",
            hint="a task is a folder holding task.toml, or a folder of them; "
            "--skip-invalid runs the rest",
        )
    if invalid and not req.skip_invalid:
        raise LaunchRefused(
            ExitCode.ERROR,
            "task_invalid",
            f"{len(invalid)} task(s) are invalid (listed above)",
            hint="fix them (`crucible tasks check PATH`), or pass --skip-invalid to run the rest",
        )
    if not tasks:
        raise LaunchRefused(ExitCode.NOT_FOUND, "not_found", "no tasks to run")
    return tasks


def refuse_unsupported(
    req: RunRequest, tasks: list[Task], provider_name: str, on_unsupported: OnInvalid | None
) -> list[Task]:
    """Tasks that use a Harbor feature crucible cannot run yet are refused before anything
    is created (`resources_unavailable`: the task is valid, crucible lacks the feature), or,
    with --skip-invalid, left out; each is handed to `on_unsupported` (never called
    invalid: it is not)."""
    kept: list[Task] = []
    for task in tasks:
        missing = unsupported_features(task, provider_name)
        if not missing:
            kept.append(task)
        elif on_unsupported is not None:
            on_unsupported(
                task.path, [Problem(path=task.path / "task.toml", message=m) for m in missing]
            )
    refused = len(tasks) - len(kept)
    if refused and (not req.skip_invalid or not kept):
        raise LaunchRefused(
            ExitCode.ERROR,
            "resources_unavailable",
            f"{refused} task(s) use Harbor features crucible cannot run yet on "
            f"{provider_name!r} (listed above)",
            hint="`crucible tasks check` names them; pass --skip-invalid to run the rest",
        )
    return kept


def _as_recorded(req: RunRequest, job_id: str, existing: JobConfig) -> RunRequest:
    """A resumed job runs as it was planned; options that would change it are refused."""
    for key, recorded in (
        ("agent", existing.agent),
        ("env", existing.env),
        ("attempts", existing.attempts),
        ("no_network", existing.no_network),
        ("task_env", existing.task_env),
        ("tampered", existing.tampered),
    ):
        asked = getattr(req, key)
        if key == "task_env" and asked is not None:
            asked = sorted(set(asked))
        if asked is not None and asked != recorded:
            raise _usage(
                f"job {job_id!r} was run with {key}={recorded!r}, not {asked!r}",
                hint="resume it as it was, or start a new job (another --job-name)",
            )
    return req.model_copy(
        update={
            "agent": existing.agent,
            "env": existing.env,
            "attempts": existing.attempts,
            "no_network": existing.no_network,
            "task_env": existing.task_env,
            "tampered": existing.tampered,
            "concurrency": req.concurrency or existing.concurrency,
            "agent_kwargs": req.agent_kwargs or dict(existing.agent_kwargs),
            "env_params": req.env_params or dict(existing.env_params),
        }
    )


def _provider(name: str, params: dict[str, str]) -> Provider:
    try:
        return get_provider(name, params)
    except KeyError as exc:
        raise _usage(str(exc.args[0])) from exc
    except (TypeError, ValueError) as exc:
        raise _usage(f"provider {name!r}: {exc}") from exc


def _agent(name: str, kwargs: dict[str, object]) -> Agent:
    try:
        return get_agent(name, **kwargs)
    except KeyError as exc:
        raise _usage(str(exc.args[0])) from exc
    except (TypeError, ValueError) as exc:
        raise _usage(f"agent {name!r}: {exc}") from exc


# A provider that has not answered by then is down for this run: say so (exit code 5)
# rather than let its client retry for a minute in silence.
PREFLIGHT_TIMEOUT_SEC = 20.0


async def _preflight_provider(name: str, provider: Provider) -> None:
    try:
        await asyncio.wait_for(provider.preflight(), PREFLIGHT_TIMEOUT_SEC)
    except TimeoutError as exc:
        raise ProviderUnavailable(
            f"provider {name!r} did not answer within {PREFLIGHT_TIMEOUT_SEC:g}s",
            hint="check the network and the provider's status (`crucible doctor`); "
            "no sandbox was started",
        ) from exc
    except SandboxFailed as exc:
        if isinstance(exc, ProviderUnavailable):
            raise
        # Failing before any sandbox exists means the service is not usable now.
        raise ProviderUnavailable(
            f"provider {name!r} is unavailable: {exc.message}", hint=exc.hint
        ) from exc


async def _preflight_model(agent: Agent, *, explicit_key: bool) -> None:
    from crucible.llm.client import (
        EndpointRefusedKey,
        EndpointUnreachable,
        check_endpoint,
    )

    endpoint = agent.model_endpoint()
    if endpoint is None:
        return
    base_url, key_env = endpoint
    try:
        await check_endpoint(base_url, key_env, key_required=explicit_key)
    except EndpointUnreachable as exc:
        raise LaunchRefused(
            ExitCode.BACKEND,
            "model_unreachable",
            str(exc),
            hint="check --model-base-url (an OpenAI-compatible server, e.g. "
            "http://127.0.0.1:8000/v1) and that the server is up; no sandbox was started",
        ) from exc
    except EndpointRefusedKey as exc:
        raise LaunchRefused(
            ExitCode.AUTH,
            "auth",
            str(exc),
            hint=f"export {key_env}=... (or name another variable with --model-api-key-env)",
        ) from exc


async def prepare_launch(
    req: RunRequest,
    *,
    on_invalid: OnInvalid | None = None,
    on_warnings: OnInvalid | None = None,
    agent: Agent | None = None,
    on_unsupported: OnInvalid | None = None,
) -> LaunchPlan:
    """Check the request, resolve defaults and resume, and preflight the provider.

    `agent`: the agent to run, in place of the one the request names from the registry
    (the grading service's, which is not there: each grade applies its own submission).
    `on_unsupported`: for each valid task the provider cannot run yet (default: on_invalid)."""
    jobs_dir = req.jobs_dir or default_jobs_dir()
    job_id = req.resume or req.job_name or new_job_id()
    existing = None
    if (jobs_dir / job_id / "job.json").exists():
        existing = read_job_config(jobs_dir / job_id)
    elif req.resume:
        raise LaunchRefused(ExitCode.NOT_FOUND, "not_found", f"no job {req.resume!r} in {jobs_dir}")

    if existing is not None:
        req = _as_recorded(req, job_id, existing)
        tasks = load_tasks(
            req, req.paths or [Path(t.path) for t in existing.tasks], on_invalid, on_warnings
        )
        problems = check_resumable(existing, tasks)
        if problems:
            raise LaunchRefused(
                ExitCode.ERROR,
                "task_changed",
                f"cannot resume {job_id!r}: " + "; ".join(problems),
                hint="tasks must be unchanged to resume; start a new job to run the new versions",
            )
        dataset = existing.dataset
    else:
        if not req.paths:
            raise _usage("give task paths to run (or --resume JOB)")
        tasks = load_tasks(req, req.paths, on_invalid, on_warnings)
        dataset = [str(p) for p in req.paths]

    agent_name = agent.name if agent is not None else req.agent or DEFAULT_AGENT
    env_name = req.env or DEFAULT_ENV
    if req.no_network:
        # The job's policy over the task's: every phase of every task without network.
        tasks = [t.without_network() for t in tasks]
    tasks = refuse_unsupported(req, tasks, env_name, on_unsupported or on_invalid)
    attempts = req.attempts or DEFAULT_ATTEMPTS
    if attempts < 1:
        raise _usage("--attempts must be at least 1")
    provider = _provider(env_name, req.env_params)
    if agent is None:
        agent = _agent(agent_name, req.agent_kwargs)
    concurrency = req.concurrency or min(DEFAULT_CONCURRENCY, provider.default_concurrency)
    if concurrency < 1:
        raise _usage("--concurrency must be at least 1")

    # Before anything is created or written: a wrong endpoint or key fails here in
    # seconds, not after every trial has retried it for minutes.
    await _preflight_model(agent, explicit_key="model_api_key_env" in req.agent_kwargs)
    executor = _executor(req, env_name, job_id)
    if executor.name == "local":  # a cluster's nodes preflight their own, at start
        await _preflight_provider(env_name, provider)

    cfg = existing or make_job_config(
        job_id=job_id,
        tasks=tasks,
        agent=agent_name,
        env=env_name,
        attempts=attempts,
        concurrency=concurrency,
        dataset=dataset,
        agent_kwargs=req.agent_kwargs,
        model=req.agent_kwargs.get("model"),
        env_params=req.env_params,
        max_retries=DEFAULT_MAX_RETRIES if req.max_retries is None else req.max_retries,
    )
    cfg.concurrency = concurrency
    cfg.no_network = bool(req.no_network)
    cfg.task_env = sorted(set(req.task_env or []))
    cfg.tampered = req.tampered or "flag"
    options = JobOptions(
        max_retries=cfg.max_retries if req.max_retries is None else req.max_retries,
        gpu_concurrency=req.gpu_concurrency or DEFAULT_GPU_CONCURRENCY,
        trial_timeout_sec=req.trial_timeout,
        job_timeout_sec=req.job_timeout,
        retry_errors=req.retry_errors,
        create_rate=req.create_rate,
        max_starting=req.max_starting,
        max_builds=req.max_builds,
    )
    return LaunchPlan(cfg, tasks, provider, agent, options, jobs_dir,
                      resumed=existing is not None, executor=executor)  # fmt: skip
