"""The terminal agent's options (validated; unknown keys are an error) and its system prompts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from crucible.agents.base import AgentOptions
from crucible.llm.client import DEFAULT_API_KEY_ENV

ToolMode = Literal["auto", "tools", "text"]
ContextStrategy = Literal["trim", "summarize"]
# Request fields passed through as sampling options (--agent-kwarg top_p=0.9 and the like).
SAMPLING_KEYS = (
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "n",
)
ShellTool = Literal["bash", "tmux"]


class TerminalConfig(AgentOptions):
    """Everything the terminal agent accepts; unknown keys are an error."""

    model: str
    model_base_url: str  # --model-base-url or $OPENAI_BASE_URL, filled in by the agent
    model_api_key_env: str = DEFAULT_API_KEY_ENV
    context_window: int | None = Field(default=None, gt=0)
    max_output_tokens: int | None = Field(default=None, gt=0)
    temperature: float | None = Field(default=None, ge=0)
    max_turns: int = Field(default=100, gt=0)
    docs_index: Path | None = None
    tool_mode: ToolMode = "auto"
    command_timeout_sec: float = Field(default=120.0, gt=0)
    max_command_timeout_sec: float = Field(default=900.0, gt=0)
    output_budget_chars: int = Field(default=10_000, ge=200)
    max_retries: int = Field(default=6, ge=0)
    request_timeout_sec: float = Field(default=600.0, gt=0)
    price_table: Path | None = None
    system_prompt: str | None = None
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = None
    min_p: float | None = Field(default=None, ge=0, le=1)
    seed: int | None = None
    stop: list[str] | str | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    n: int | None = Field(default=None, ge=1, le=1)
    extra_body: dict[str, Any] = Field(default_factory=dict)
    collect_tokens: bool = False
    max_format_errors: int = Field(default=3, ge=1)
    max_cost_usd: float | None = Field(default=None, gt=0)
    max_total_tokens: int | None = Field(default=None, gt=0)
    trim_to_fraction: float = Field(default=0.5, gt=0, lt=1)
    context_strategy: ContextStrategy = "trim"
    trajectory_cap_bytes: int = Field(default=32 * 1024 * 1024, ge=8192)

    @field_validator("extra_body", "stop", mode="before")
    @classmethod
    def _json_text(cls, value: Any) -> Any:
        # --agent-kwarg gives text: extra_body='{"return_tokens_as_token_ids": true}'.
        if isinstance(value, str) and value.lstrip().startswith(("{", "[")):
            try:
                return json.loads(value)
            except ValueError as exc:
                raise ValueError(f"not valid JSON: {exc}") from None
        return value

    def sampling(self) -> dict[str, Any]:
        """The sampling options that were set, as request fields."""
        return {k: getattr(self, k) for k in SAMPLING_KEYS if getattr(self, k) is not None}

    # Shell tools offered with function calling: `bash` (a fresh shell per call) and/or `tmux`
    # (one persistent interactive terminal). `--agent-kwarg tools=bash,tmux` on the CLI.
    tools: list[ShellTool] = Field(default_factory=lambda: list[ShellTool](["bash"]), min_length=1)

    @field_validator("tools", mode="before")
    @classmethod
    def _split_tools(cls, value: object) -> object:
        return (
            [t.strip() for t in value.split(",") if t.strip()] if isinstance(value, str) else value
        )

    @field_validator("docs_index")
    @classmethod
    def _index_exists(cls, value: Path | None) -> Path | None:
        if value is not None:
            from crucible.docs.index import index_file

            if not index_file(value.expanduser()).is_file():
                raise ValueError(
                    f"no docs index at {value}; build one with `crucible docs index SOURCE --out {value}`"
                )
            return value.expanduser().resolve()
        return value


SYSTEM_TOOLS = """\
You are an autonomous agent solving a task inside a Linux sandbox. There is no user to answer \
questions: work on your own until the task is done.

{environment}

You act through tools. `bash` runs one shell command with bash and returns its exit code and \
combined output (long output is cut in the middle to {budget} characters). The first call starts \
in {workdir}; the working directory and exported variables carry over to the next call. \
{noninteractive}{docs}

Work step by step: look around, make the change, check that it works. When the task is complete, \
call `submit`."""

SYSTEM_TEXT = """\
You are an autonomous agent solving a task inside a Linux sandbox. There is no user to answer \
questions: work on your own until the task is done.

Each reply: think briefly, then give exactly one shell command in a fenced block:

```bash
ls -la
```

{environment}

It runs with bash (the first one in {workdir}) and you will see its exit code and combined output \
(long output is cut in the middle to {budget} characters). The working directory and exported \
variables carry over to the next command. {noninteractive}{docs}

When the task is complete, reply with the word SUBMIT on a line of its own and no code block."""

NONINTERACTIVE = (
    "Commands run without a terminal and with no input: avoid interactive programs and "
    "commands that never exit (PAGER, GIT_PAGER and the like are set so pagers do not wait). "
    "To run a server, start it in the background with its output in a file, e.g. "
    "`nohup python -m http.server 8000 > /tmp/server.log 2>&1 &`, then check it with a "
    "separate command."
)

# Set for every command (the model may override them): nothing waits for a keypress.
NONINTERACTIVE_ENV: dict[str, str] = {
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "MANPAGER": "cat",
    "SYSTEMD_PAGER": "",
    "LESS": "-R",
    "TERM": "dumb",
    "DEBIAN_FRONTEND": "noninteractive",
    "PIP_NO_INPUT": "1",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "NO_COLOR": "1",
    "PYTHONUNBUFFERED": "1",
    "CI": "1",
}


def environment_line(os_name: str, user: str, workdir: str, network: bool) -> str:
    net = (
        "The sandbox has network access."
        if network
        else "The sandbox has NO network access: nothing can be downloaded or installed from the internet."
    )
    return f"Environment: {os_name}, user {user}, working directory {workdir}. {net}"


DOCS_TOOLS_LINE = (
    "\n\n`docs` searches the documentation of the libraries involved (action=query with keys) and "
    "reads pages in windows (action=show with page and offset). Use it when unsure of an API."
)
TMUX_TOOLS_LINE = (
    "\n\n`tmux` is a persistent interactive terminal (a TTY): use it for REPLs, editors, prompts "
    "and anything that must keep running, and for commands whose `cd` or variables should persist."
)
DOCS_TEXT_LINE = (
    "\n\nTo search the documentation, use a ```docs block holding `query WORDS...`; to read a page, "
    "`show PAGE [OFFSET [LIMIT]]`."
)
