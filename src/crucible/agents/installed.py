"""The `command` agent: installs a CLI agent inside the sandbox and runs it on the instruction.

Templates cover claude-code, codex and mini-swe-agent; `command_template`
(and `install_command`) run anything else. The instruction reaches the
command through a file (`{instruction_file}`, quoted), never through shell
interpolation of its text. The model endpoint and API key go into the
environment of this sandbox's exec calls only: never into the SandboxSpec,
the trajectory or the logs crucible writes.

Failure policy (documented in the report of issue 8):
- a sandbox without network raises ResourcesUnavailable: the agent cannot
  run at all, which says nothing about the model;
- an install that fails or does not finish raises SandboxFailed: the model
  never got to act, so a zero would be a lie; the scheduler retries it;
- the agent command exiting non-zero or timing out is the agent's failure
  at the task: AgentResult.error, and the trial is still graded.
"""

from __future__ import annotations

import json
import os
import shlex
import string
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, ValidationError, model_validator

from crucible.agents.base import Agent, AgentContext, AgentOptions
from crucible.errors import ResourcesUnavailable, SandboxFailed
from crucible.export.atif.installed import write_installed_atif
from crucible.llm.pricing import cost_usd
from crucible.records.trial import AgentError, AgentInfo, AgentResult, ModelInfo
from crucible.records.usage import Usage

AGENT_DIR = "/tmp/crucible-agent"
INSTRUCTION_FILE = f"{AGENT_DIR}/instruction.md"
LOGS_DIR = "/logs/agent"

UsageParser = Callable[[str], tuple[Usage | None, float | None]]

_NODE = (
    "if ! command -v npm >/dev/null 2>&1; then "
    "(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm) "
    "|| apk add --no-cache nodejs npm; fi"
)
_PIP = (
    "if command -v uv >/dev/null 2>&1; then uv tool install --force {pkg}; "
    "elif command -v pipx >/dev/null 2>&1; then pipx install --force {pkg}; "
    "else python3 -m pip install --break-system-packages -q {pkg} || python3 -m pip install -q {pkg}; fi"
)


def _json_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                out.append(value)
    return out


def parse_claude_code(stdout: str) -> tuple[Usage | None, float | None]:
    """The `result` event of `claude -p --output-format stream-json`."""
    results = [e for e in _json_lines(stdout) if e.get("type") == "result"]
    if not results:
        return None, None
    last = results[-1]
    u = last.get("usage") or {}
    # Anthropic's input_tokens leaves out cache reads and writes; ours includes them.
    read = int(u.get("cache_read_input_tokens") or 0)
    write = int(u.get("cache_creation_input_tokens") or 0)
    usage = Usage(
        input_tokens=int(u.get("input_tokens") or 0) + read + write,
        cache_read_tokens=read,
        cache_write_tokens=write,
        output_tokens=int(u.get("output_tokens") or 0),
    )
    cost = last.get("total_cost_usd")
    return usage, float(cost) if isinstance(cost, int | float) else None


def parse_codex(stdout: str) -> tuple[Usage | None, float | None]:
    """Sum of `turn.completed` usage events of `codex exec --json`."""
    total: Usage | None = None
    for event in _json_lines(stdout):
        u = event.get("usage")
        if event.get("type") == "turn.completed" and isinstance(u, dict):
            part = Usage(
                input_tokens=int(u.get("input_tokens") or 0),
                cache_read_tokens=int(u.get("cached_input_tokens") or 0),
                output_tokens=int(u.get("output_tokens") or 0),
            )
            total = part if total is None else total + part
    return total, None


@dataclass(frozen=True)
class CommandTemplate:
    name: str
    install: str  # idempotent shell; {version_suffix} for a pinned version
    run: str  # shell; placeholders below, each substituted shell-quoted
    api_key_env: str  # the host variable read by default
    key_vars: tuple[str, ...]  # sandbox variables that receive the key
    base_url_vars: tuple[str, ...]  # sandbox variables that receive the endpoint
    extra_env: dict[str, str] = field(default_factory=dict)
    version_format: str = "@{version}"
    parse_usage: UsageParser | None = None


TEMPLATES: dict[str, CommandTemplate] = {
    "claude-code": CommandTemplate(
        name="claude-code",
        install=f"command -v claude >/dev/null 2>&1 || {{ {_NODE} && npm install -g @anthropic-ai/claude-code{{version_suffix}}; }}",
        run=(
            'claude --verbose --output-format stream-json --dangerously-skip-permissions {model_flag} {max_turns_flag} -p "$(cat {instruction_file})"'
        ),
        api_key_env="ANTHROPIC_API_KEY",
        key_vars=("ANTHROPIC_API_KEY",),
        base_url_vars=("ANTHROPIC_BASE_URL",),
        # claude refuses --dangerously-skip-permissions as root outside a declared sandbox.
        extra_env={"IS_SANDBOX": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1"},
        parse_usage=parse_claude_code,
    ),
    "codex": CommandTemplate(
        name="codex",
        install=f"command -v codex >/dev/null 2>&1 || {{ {_NODE} && npm install -g @openai/codex{{version_suffix}}; }}",
        run=(
            "codex exec --json --dangerously-bypass-approvals-and-sandbox --skip-git-repo-check "
            '{model_flag} -- "$(cat {instruction_file})"'
        ),
        api_key_env="OPENAI_API_KEY",
        key_vars=("OPENAI_API_KEY", "CODEX_API_KEY"),
        base_url_vars=("OPENAI_BASE_URL",),
        parse_usage=parse_codex,
    ),
    "mini-swe-agent": CommandTemplate(
        name="mini-swe-agent",
        install="command -v mini >/dev/null 2>&1 || { "
        + _PIP.format(pkg="mini-swe-agent{version_suffix}")
        + "; }",
        run=(
            'mini --yolo --exit-immediately {model_flag} -o {logs_dir}/mini-trajectory.json -t "$(cat {instruction_file})"'
        ),
        api_key_env="OPENAI_API_KEY",
        key_vars=("OPENAI_API_KEY",),
        base_url_vars=("OPENAI_API_BASE", "OPENAI_BASE_URL"),
        extra_env={"MSWEA_CONFIGURED": "true"},
        version_format="=={version}",
    ),
}


class CommandConfig(AgentOptions):
    template: str | None = None  # claude-code | codex | mini-swe-agent
    command_template: str | None = None  # a run command of one's own (same placeholders)
    install_command: str | None = None  # replaces the template's install
    version: str | None = None
    model: str | None = None
    model_base_url: str | None = None
    model_api_key_env: str | None = None
    context_window: int | None = Field(default=None, gt=0)
    max_output_tokens: int | None = Field(default=None, gt=0)
    temperature: float | None = None
    max_turns: int | None = Field(default=None, gt=0)
    docs_index: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    install_timeout_sec: float = Field(default=600.0, gt=0)

    @model_validator(mode="after")
    def _check(self) -> CommandConfig:
        if self.template is None and self.command_template is None:
            raise ValueError(f"give template= ({', '.join(TEMPLATES)}) or command_template=")
        if self.template is not None and self.template not in TEMPLATES:
            raise ValueError(f"unknown template {self.template!r}; known: {', '.join(TEMPLATES)}")
        if self.docs_index is not None:
            raise ValueError(
                "docs_index is a tool of the terminal agent; installed CLI agents cannot use it"
            )
        if self.model_api_key_env and self.model_api_key_env not in os.environ:
            raise ValueError(
                f"--model-api-key-env names ${self.model_api_key_env}, which is not set"
            )
        return self


class _Quoted(dict[str, str]):
    def __missing__(self, key: str) -> str:
        raise KeyError(
            f"unknown placeholder {{{key}}} in command template; known: {', '.join(sorted(self))}"
        )


def render(template: str, values: dict[str, str]) -> str:
    """Fill {placeholders}; values are shell-quoted unless they are pre-built flags."""
    return string.Formatter().vformat(template, (), _Quoted(values))


class CommandAgent(Agent):
    name = "command"
    version = "1"
    requires_network = True

    def __init__(self, **options: Any) -> None:
        try:
            self.config = CommandConfig.model_validate(options)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'options'}: {e['msg']}"
                for e in exc.errors()
            )
            known = ", ".join(CommandConfig.model_fields)
            raise ValueError(
                f"invalid command agent options: {problems} (known options: {known})"
            ) from None
        self.template = TEMPLATES.get(self.config.template or "")
        if self.template is not None:
            self.name = self.template.name
        self.run_command = self.config.command_template or (
            self.template.run if self.template else ""
        )
        if self.config.max_turns is not None and "{max_turns_flag}" not in self.run_command:
            # codex exec and mini have no turn-limit flag: refuse rather than ignore it.
            raise ValueError(
                f"max_turns: the {self.config.template or 'custom'} command has no turn limit "
                "(no {max_turns_flag} in its template), so crucible cannot honour "
                f"max_turns={self.config.max_turns}; drop it, or bound the run with a timeout"
            )
        try:  # a bad placeholder fails now, not once per trial
            render(self.run_command, self._placeholders("/app"))
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"command template: {exc.args[0] if exc.args else exc}") from None

    def info(self) -> AgentInfo:
        model = ModelInfo(name=self.config.model) if self.config.model else None
        return AgentInfo(
            name=self.name, version=self.config.version or self.version, model_info=model
        )

    def _placeholders(self, workdir: str, base_url: str | None = None) -> dict[str, str]:
        cfg = self.config
        q = shlex.quote
        return {
            "instruction_file": q(INSTRUCTION_FILE),
            "model": q(cfg.model or ""),
            "model_flag": f"--model {q(cfg.model)}" if cfg.model else "",
            "max_turns_flag": f"--max-turns {cfg.max_turns}" if cfg.max_turns else "",
            "workdir": q(workdir),
            "logs_dir": q(LOGS_DIR),
            "base_url": q(base_url or cfg.model_base_url or ""),
        }

    def _install_command(self) -> str | None:
        if self.config.install_command is not None:
            return self.config.install_command or None
        if self.template is None:
            return None
        suffix = (
            self.template.version_format.format(version=self.config.version)
            if self.config.version
            else ""
        )
        return self.template.install.replace(
            "{version_suffix}", shlex.quote(suffix) if suffix else ""
        )

    def _env(self, base_url: str | None = None) -> dict[str, str]:
        """The exec environment: endpoint (as the sandbox reaches it), key, model. Built
        per call, kept nowhere."""
        cfg = self.config
        tpl = self.template
        env: dict[str, str] = dict(tpl.extra_env) if tpl else {}
        key_vars = tpl.key_vars if tpl else ("OPENAI_API_KEY",)
        url_vars = tpl.base_url_vars if tpl else ("OPENAI_BASE_URL", "OPENAI_API_BASE")
        host_var = cfg.model_api_key_env or (tpl.api_key_env if tpl else "OPENAI_API_KEY")
        key = os.environ.get(host_var)
        if key:
            for var in key_vars:
                env[var] = key
        url = base_url or cfg.model_base_url
        if url:
            for var in url_vars:
                env[var] = url
            env["CRUCIBLE_MODEL_BASE_URL"] = url
        if cfg.model:
            env["CRUCIBLE_MODEL"] = cfg.model
        if cfg.temperature is not None:
            env["CRUCIBLE_TEMPERATURE"] = str(cfg.temperature)
        env["CRUCIBLE_INSTRUCTION_FILE"] = INSTRUCTION_FILE
        env.update(cfg.env)
        return env

    async def run(self, ctx: AgentContext) -> AgentResult:
        if ctx.sandbox.spec.network == "none":
            raise ResourcesUnavailable(
                f"agent {self.name!r} installs and calls its model over the network, "
                f"but the sandbox of {ctx.task.name!r} has none",
                hint="run it on a task with network_mode = 'public'",
            )
        deadline = time.monotonic() + ctx.timeout_sec
        workdir = ctx.task.workdir
        user = ctx.task.config.agent.user
        user_s = str(user) if user is not None else None
        ctx.logs_dir.mkdir(parents=True, exist_ok=True)
        await ctx.sandbox.exec(["mkdir", "-p", AGENT_DIR, LOGS_DIR], timeout=60)
        await ctx.sandbox.write_file(INSTRUCTION_FILE, ctx.task.instruction)
        if user_s is not None:
            await ctx.sandbox.exec(["chmod", "-R", "a+rX", AGENT_DIR], timeout=60)

        # A model server on the host's loopback is out of a local sandbox's reach: this
        # one endpoint is forwarded onto the sandbox's own loopback (sandboxes/local/forward.py).
        base_url = None
        if self.config.model_base_url:
            base_url = await ctx.sandbox.expose_url(self.config.model_base_url)
        install_sec = 0.0
        install = self._install_command()
        if install:
            t0 = time.monotonic()
            budget = max(min(self.config.install_timeout_sec, deadline - time.monotonic()), 1.0)
            res = await ctx.sandbox.exec(
                ["bash", "-c", install], timeout=budget, cwd=workdir, env=self._env(base_url)
            )
            install_sec = time.monotonic() - t0
            (ctx.logs_dir / "install.log").write_text(
                f"$ {install}\n{res.stdout}\n--- stderr ---\n{res.stderr}\n--- exit {res.exit_code}"
                f"{' (timed out)' if res.timed_out else ''} ---\n"
            )
            if not res.ok:
                tail = (res.stderr or res.stdout).strip()[-600:]
                why = f"timed out after {budget:g}s" if res.timed_out else f"exited {res.exit_code}"
                raise SandboxFailed(
                    f"installing agent {self.name!r} {why}: {tail}",
                    hint="installs need network and a package manager in the image; see agent/install.log",
                )

        command = render(self.run_command, self._placeholders(workdir, base_url))
        remaining = max(deadline - time.monotonic(), 1.0)
        res = await ctx.sandbox.exec(
            ["bash", "-c", command],
            timeout=remaining,
            cwd=workdir,
            env=self._env(base_url),
            user=user_s,
            input="",
        )
        (ctx.logs_dir / "command.txt").write_text(command + "\n")
        (ctx.logs_dir / "stdout.txt").write_text(res.stdout)
        (ctx.logs_dir / "stderr.txt").write_text(res.stderr)
        write_installed_atif(
            self.template.name if self.template else None, res.stdout, ctx.logs_dir
        )

        usage, cost = None, None
        if self.template is not None and self.template.parse_usage is not None:
            usage, cost = self.template.parse_usage(res.stdout)
        if usage is None and self.template is not None and self.template.name == "mini-swe-agent":
            cost = await _mini_cost(ctx)
        if cost is None and usage is not None:
            cost = cost_usd(self.config.model, usage)

        error = None
        if res.timed_out:
            error = AgentError(
                type="timeout", message=f"{self.name} timed out after {ctx.timeout_sec:g}s"
            )
        elif res.exit_code != 0:
            error = AgentError(type="nonzero_exit", message=f"{self.name} exited {res.exit_code}")
        return AgentResult(
            exit_code=res.exit_code,
            error=error,
            n_input_tokens=usage.input_tokens if usage else None,
            n_cache_tokens=usage.cache_read_tokens if usage else None,
            n_cache_write_tokens=usage.cache_write_tokens if usage else None,
            n_output_tokens=usage.output_tokens if usage else None,
            cost_usd=cost,
            metadata={
                "template": self.template.name if self.template else "custom",
                "install_sec": round(install_sec, 3),
                "output_truncated": res.truncated,
            },
        )


async def _mini_cost(ctx: AgentContext) -> float | None:
    try:
        data = json.loads(await ctx.sandbox.read_file(f"{LOGS_DIR}/mini-trajectory.json"))
        cost = data["info"]["model_stats"]["instance_cost"]
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None
    return float(cost) if isinstance(cost, int | float) else None
