"""A run request: everything `crucible run` (or the service, or the generator) asks of a job.

Typed and cheap to import (records and pydantic only), so the CLI can build it
at start-up. Options left as None take their defaults in launch.py, or, on
resume, the values the job was planned with. `from_sources` merges the three
places a CLI run gets its options from, in the order CLI, config file, default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from crucible.errors import UnknownKey
from crucible.records.tamper import TamperPolicy

# Agent options that map one-to-one onto agent constructor keywords.
MODEL_OPTIONS = (
    "model",
    "model_base_url",
    "model_api_key_env",
    "context_window",
    "max_output_tokens",
    "temperature",
    "max_turns",
    "docs_index",
    "price_table",
)

# Job options a config file may set (CLI values win); MODEL_OPTIONS may be set there too.
JOB_OPTIONS = (
    "agent",
    "attempts",
    "concurrency",
    "env",
    "max_retries",
    "trial_timeout",
    "job_timeout",
    "gpu_concurrency",
    "create_rate",
    "max_starting",
    "max_builds",
    "no_network",
    "task_env",
    "tampered",
)

# Every key a config file may hold (a `-` in a key reads as `_`); any other is an error.
CONFIG_KEYS = (*JOB_OPTIONS, *MODEL_OPTIONS, "paths", "jobs_dir", "env_params", "agent_kwargs")
# Options of `crucible run` a config file cannot set: said so, rather than "unknown".
CLI_ONLY = ("job_name", "resume", "retry_errors", "include", "exclude", "skip_invalid",
            "dataset", "registry", "datasets_dir", "quiet", "json", "config",
            "executor", "ray_address", "shared_store")  # fmt: skip


class RunRequest(BaseModel):
    """What to run and how; None means "the default" (or, on resume, "as recorded")."""

    model_config = ConfigDict(extra="forbid")

    paths: list[Path] = Field(default_factory=list)
    agent: str | None = None
    agent_kwargs: dict[str, Any] = Field(default_factory=dict)
    env: str | None = None
    env_params: dict[str, str] = Field(default_factory=dict)
    attempts: int | None = None
    concurrency: int | None = None
    jobs_dir: Path | None = None
    job_name: str | None = None
    resume: str | None = None
    retry_errors: bool = False
    include: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)
    skip_invalid: bool = False
    max_retries: int | None = None
    trial_timeout: float | None = None
    job_timeout: float | None = None
    create_rate: float | None = None
    max_starting: int | None = None
    # Image builds at once, job-wide, on every provider (None: half the cores, at least 1).
    max_builds: int | None = Field(default=None, ge=1)
    gpu_concurrency: int | None = None
    # True locks every task to no network, whatever its task.toml says (None: off, or as recorded).
    no_network: bool | None = None
    # The host variables tasks may read through `${VAR}` (None: none, or as recorded).
    task_env: list[str] | None = None
    # "flag" (the default) or "zero": see records/tamper.py (None: the default, or as recorded).
    # The grading service and task generation ask for "zero".
    tampered: TamperPolicy | None = None
    # Where trials run: "local" (this process, the default) or "ray" (engine/executor.py);
    # the Ray cluster's address (None: RAY_ADDRESS, else a Ray started here) and the
    # shared store for trial folders too large to send back inline.
    executor: str = "local"
    ray_address: str | None = None
    shared_store: str | None = None

    @field_validator("job_name", "resume")
    @classmethod
    def _plain_name(cls, value: str | None) -> str | None:
        # A job id names a folder under the jobs dir: never a path out of it.
        if value is not None and (
            not value.strip() or value.startswith(".") or any(c in value for c in "/\\\0")
        ):
            raise ValueError(
                f"a job name is a plain folder name (no '/', not starting with '.'): {value!r}"
            )
        return value

    @classmethod
    def from_sources(
        cls,
        cli: dict[str, Any],
        config: dict[str, Any],
        *,
        env_params: dict[str, str],
        agent_kwargs: dict[str, Any],
    ) -> RunRequest:
        """`cli`: option values (None when not given), `config`: a parsed config file,
        `env_params`/`agent_kwargs`: the CLI's key=value pairs. Raises UnknownKey for a
        config key no option reads (a typo), pydantic's ValidationError when a value has
        the wrong type."""
        config = {key.replace("-", "_"): value for key, value in config.items()}
        for key in config:
            if key in CLI_ONLY:
                flag = "--" + key.replace("_", "-")
                raise ValueError(f"config key {key!r} is a command-line option: pass {flag}")
            if key not in CONFIG_KEYS:
                raise UnknownKey("config key", key, CONFIG_KEYS)
        opts = {k: cli.get(k) for k in (*JOB_OPTIONS, *MODEL_OPTIONS)}
        for k, value in config.items():
            if k in opts and opts[k] is None:
                opts[k] = value
        kwargs: dict[str, Any] = {k: opts[k] for k in MODEL_OPTIONS if opts[k] is not None}
        kwargs.update(config.get("agent_kwargs", {}))
        kwargs.update(agent_kwargs)
        params = {str(k): str(v) for k, v in config.get("env_params", {}).items()}
        params.update(env_params)
        jobs_dir = cli.get("jobs_dir") or (
            Path(config["jobs_dir"]) if "jobs_dir" in config else None
        )
        return cls(
            **{k: opts[k] for k in JOB_OPTIONS},
            paths=cli.get("paths") or [Path(p) for p in config.get("paths", [])],
            agent_kwargs=kwargs,
            env_params=params,
            jobs_dir=jobs_dir,
            job_name=cli.get("job_name"),
            resume=cli.get("resume"),
            retry_errors=bool(cli.get("retry_errors")),
            include=list(cli.get("include") or []),
            exclude=list(cli.get("exclude") or []),
            skip_invalid=bool(cli.get("skip_invalid")),
            executor=cli.get("executor") or "local",
            ray_address=cli.get("ray_address"),
            shared_store=cli.get("shared_store"),
        )
