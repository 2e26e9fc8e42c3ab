"""The pages about the command line: every command (cli.md) and the --config file (config.md)."""

from __future__ import annotations

import inspect
from typing import Any

from docsgen.text import BANNER, cell, code, model_table, plain, type_name


def cli_page() -> str:
    import typer

    from crucible.cli.help import polish
    from crucible.cli.main import app

    root = typer.main.get_command(app)
    polish(root)
    parts = [
        BANNER,
        "# CLI reference\n\n",
        "Every command and option of `crucible`, as `--help` shows them. "
        "Exit codes are the same everywhere: see [automation](automation.md).\n\n",
    ]

    def walk(cmd: Any, path: list[str]) -> None:
        ctx = cmd.context_class(cmd, info_name=" ".join(path))
        title = " ".join(path)
        level = "#" * min(len(path) + 1, 4)
        parts.append(f"{level} `{title}`\n\n")
        helptext = inspect.cleandoc(cmd.help or "").replace("\b\n", "")
        if helptext:
            parts.append(plain(helptext) + "\n\n")
        pieces = cmd.collect_usage_pieces(ctx)
        parts.append(f"```\n{title} {' '.join(pieces)}\n```\n\n")
        rows = []
        for p in cmd.params:
            if getattr(p, "hidden", False):
                continue
            record = p.get_help_record(ctx)
            if record is None:
                continue
            names, helpline = record
            helpline = helpline.replace("\\[", "[")
            rows.append(f"| {code(names)} | {cell(helpline)} |\n")
        rows.append("| `--help` | Show this message and exit. |\n")
        if len(rows) > 1 or not hasattr(cmd, "commands"):
            parts.append("| option | meaning |\n|---|---|\n" + "".join(rows) + "\n")
        if cmd.epilog and len(path) > 1:
            parts.append(plain(inspect.cleandoc(cmd.epilog)) + "\n\n")
        if hasattr(cmd, "commands"):
            for name in sorted(cmd.commands) if len(path) > 1 else list(cmd.commands):
                if not getattr(cmd.commands[name], "hidden", False):  # an alias, said in its help
                    walk(cmd.commands[name], [*path, name])

    walk(root, ["crucible"])
    return "".join(parts).rstrip() + "\n"


# The terminal agent's options that no `crucible run` option describes.
TERMINAL_HELP = {
    "tool_mode": "`tools` (function calling), `text` (commands in plain text), or `auto`: "
    "function calling, falling back to text when the model answers without tool calls.",
    "command_timeout_sec": "A shell command's timeout when the model asks for none.",
    "max_command_timeout_sec": "The longest timeout the model may ask for a command.",
    "output_budget_chars": "A command's output shown to the model is cut in the middle to this.",
    "max_retries": "Retries of a failed model request.",
    "request_timeout_sec": "Timeout of one model request.",
    "system_prompt": "Replaces the agent's system prompt.",
    "top_p": "Sent as the request's `top_p` (sampling options pass through as given).",
    "top_k": "Sent as `top_k` (vLLM, SGLang).",
    "min_p": "Sent as `min_p` (vLLM, SGLang).",
    "seed": "Sent as `seed`.",
    "stop": "Sent as `stop`: a string or a JSON list.",
    "presence_penalty": "Sent as `presence_penalty`.",
    "frequency_penalty": "Sent as `frequency_penalty`.",
    "repetition_penalty": "Sent as `repetition_penalty` (vLLM, SGLang).",
    "n": "Sent as `n`; only 1 (a rollout follows one choice).",
    "extra_body": "JSON object merged into every request last (server-specific fields).",
    "collect_tokens": "Ask for logprobs and token ids and keep them per turn "
    "(`turns[i].metrics`), as the server sent them.",
    "max_format_errors": "Replies in a row without a usable action before the rollout "
    "ends `format_errors`.",
    "max_cost_usd": "End the rollout `cost_limit` once its cost reaches this.",
    "max_total_tokens": "End the rollout `token_limit` once prompt + completion tokens reach this.",
    "trim_to_fraction": "A trim cuts the context down to this fraction of the window.",
    "context_strategy": "`trim`, or `summarize`: replace dropped turns with a summary "
    "made in one model call.",
    "trajectory_cap_bytes": "Cap of agent/trajectory.jsonl; past it a `truncated` line, "
    "then only the final status.",
}


def terminal_help(run_helps: dict[str, str]) -> dict[str, str]:
    from crucible.agents.terminal.config import TerminalConfig

    stale = set(TERMINAL_HELP) - set(TerminalConfig.model_fields)
    if stale:
        raise SystemExit(f"gen-docs: TERMINAL_HELP describes no such option: {sorted(stale)}")
    return {**run_helps, **TERMINAL_HELP}


def config_page() -> str:
    import typer

    from crucible.agents.terminal.config import TerminalConfig
    from crucible.cli.help import polish
    from crucible.cli.main import app
    from crucible.engine.request import CONFIG_KEYS, RunRequest
    from crucible.llm.pricing import BUILTIN_PRICES, PRICES_ENV, USER_PRICES, ModelPrice

    root = typer.main.get_command(app)
    polish(root)
    run = root.commands["run"]  # type: ignore[attr-defined]
    helps = {p.name: (p.help or "").replace("\\[", "[") for p in run.params}
    flags = {
        p.name: (p.opts[0] if p.param_type_name == "option" else f"{p.name.upper()} (arguments)")
        for p in run.params
    }
    keys = CONFIG_KEYS
    rows = ["| key | type | `crucible run` option | meaning |\n|---|---|---|---|\n"]
    for key in keys:
        if key in RunRequest.model_fields:
            tp = RunRequest.model_fields[key].annotation
        else:
            tp = TerminalConfig.model_fields[key].annotation
        extra = {
            "env_params": "A table of provider parameters (strings), under the CLI's `--env-param`s.",
            "agent_kwargs": "A table of agent options, under the CLI's `--agent-kwarg`s and the model keys.",
        }
        opt = {"env_params": "--env-param", "agent_kwargs": "--agent-kwarg"}.get(
            key, flags.get(key, "")
        )
        meaning = extra.get(key) or helps.get(key, "")
        if key == "env_params":
            tp = dict[str, str]
        rows.append(f"| `{key}` | {type_name(tp)} | {code(opt)} | {cell(meaning)} |\n")
    prices = ["| model | input | cached input | cache write | output |\n|---|---|---|---|---|\n"]
    for name, p in BUILTIN_PRICES.items():
        prices.append(
            f"| `{name}` | {p.input} | {p.cached_input if p.cached_input is not None else ''}"
            f" | {p.cache_write if p.cache_write is not None else ''} | {p.output} |\n"
        )
    return (
        BANNER
        + "# Config file reference\n\n"
        + "`crucible run --config FILE` reads a TOML file that may set any of these keys "
        "(a `-` in a key reads as `_`; any other key is an error that names the closest "
        "known one). A value given on the command line wins over the "
        "file's; what neither sets takes its default (or, on `--resume`, the value the job "
        "was planned with).\n\n"
        + '```toml\nagent = "terminal"\nattempts = 3\nconcurrency = 8\nmodel = "my-model"\n'
        'model_base_url = "http://127.0.0.1:8000/v1"\n\n[env_params]\nuserland = "image"\n\n'
        "[agent_kwargs]\nmax_turns = 50\n```\n\n"
        + "".join(rows)
        + "\n## Terminal agent options\n\n"
        + "What `--agent terminal` accepts, from the model options above, `--agent-kwarg "
        "key=value` or `[agent_kwargs]`; an unknown key is an error.\n\n"
        + model_table(TerminalConfig, link=False, fallback=terminal_help(helps))
        + "\n## Price table\n\n"
        + "Costs are computed from USD prices per million tokens. The built-in table is "
        f"overlaid by `{USER_PRICES}`, then the file named by `${PRICES_ENV}`, then "
        "`--price-table FILE` (TOML or JSON, later wins). An unknown model costs nothing "
        "known (shown as no cost, never as 0).\n\n"
        + '```toml\n[models."my-org/my-model"]\ninput = 0.50\ncached_input = 0.05\n'
        "cache_write = 0.625\noutput = 1.50\n```\n\n"
        + model_table(ModelPrice, link=False)
        + "\nThe built-in prices (USD per 1M tokens):\n\n"
        + "".join(prices)
    )
