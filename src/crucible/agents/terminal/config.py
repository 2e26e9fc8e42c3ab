"""The terminal agent's options (validated; unknown keys are an error) and its system prompts."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from crucible.agents.base import AgentOptions
from crucible.llm.client import DEFAULT_API_KEY_ENV

ToolMode = Literal["auto", "tools", "text"]
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

You act through tools. `bash` runs one shell command in {workdir} with bash and returns its exit \
code and combined output (long output is cut in the middle to {budget} characters). Every call \
is a fresh shell: files persist between calls, but `cd` and variables do not, so chain with `&&` \
or use absolute paths. Avoid interactive programs and commands that never exit.{docs}

Work step by step: look around, make the change, check that it works. When the task is complete, \
call `submit`."""

SYSTEM_TEXT = """\
You are an autonomous agent solving a task inside a Linux sandbox. There is no user to answer \
questions: work on your own until the task is done.

Each reply: think briefly, then give exactly one shell command in a fenced block:

```bash
ls -la
```

It runs with bash in {workdir} and you will see its exit code and combined output (long output \
is cut in the middle to {budget} characters). Every command is a fresh shell: files persist, but \
`cd` and variables do not. Avoid interactive programs and commands that never exit.{docs}

When the task is complete, reply with the word SUBMIT on a line of its own and no code block."""

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
