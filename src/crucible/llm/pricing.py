"""Model prices (USD per 1M tokens) and the cost of a call or a rollout.

A built-in table covers a few common models; users extend or override it
with TOML or JSON files, read in this order (later wins):
~/.config/crucible/prices.toml, the file named by $CRUCIBLE_PRICES, and an
explicit path (`--price-table FILE`). A file maps model names to prices:

    [models."my-org/my-model"]      # or top-level ["my-org/my-model"]
    input = 0.50                    # USD per 1M prompt tokens
    cached_input = 0.05             # optional; defaults to input
    cache_write = 0.625             # optional; defaults to input
    output = 1.50

An unknown model costs None, never 0: a missing price must not read as free.

A self-hosted model is priced by the time of the server it runs on, not by the
token: `[self_hosted."my-model"]` gives the server's price per hour (for
example 2 H100s at a cloud's list price) and, optionally, its aggregate output
throughput. A rollout then costs its output tokens over that throughput, times
the price per second; without a throughput the report measures it from the job
(every rollout's output tokens over the job's span). Reports mark such costs.

    [self_hosted."my-org/my-model"]
    usd_per_hour = 7.90             # the whole server
    output_tokens_per_sec = 2400    # optional; measured from the job when absent
    note = "2x H100 80GB, on-demand list price"
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, Field, ValidationError

from crucible.records.usage import Usage

PRICES_ENV = "CRUCIBLE_PRICES"
USER_PRICES = Path("~/.config/crucible/prices.toml")


class ModelPrice(BaseModel):
    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None


def _p(i: float, o: float, cached: float | None = None, write: float | None = None) -> ModelPrice:
    return ModelPrice(input=i, output=o, cached_input=cached, cache_write=write)


# List prices as published by the vendors (2025); override with a price file when they change.
BUILTIN_PRICES: dict[str, ModelPrice] = {
    "gpt-4o": _p(2.50, 10.00, 1.25),
    "gpt-4o-mini": _p(0.15, 0.60, 0.075),
    "gpt-4.1": _p(2.00, 8.00, 0.50),
    "gpt-4.1-mini": _p(0.40, 1.60, 0.10),
    "gpt-4.1-nano": _p(0.10, 0.40, 0.025),
    "gpt-5": _p(1.25, 10.00, 0.125),
    "gpt-5-mini": _p(0.25, 2.00, 0.025),
    "gpt-5-nano": _p(0.05, 0.40, 0.005),
    "o3": _p(2.00, 8.00, 0.50),
    "o4-mini": _p(1.10, 4.40, 0.275),
    "claude-opus-4-1": _p(15.00, 75.00, 1.50, 18.75),
    "claude-sonnet-4": _p(3.00, 15.00, 0.30, 3.75),
    "claude-sonnet-4-5": _p(3.00, 15.00, 0.30, 3.75),
    "claude-haiku-4-5": _p(1.00, 5.00, 0.10, 1.25),
    "claude-3-5-haiku": _p(0.80, 4.00, 0.08, 1.00),
    "deepseek-chat": _p(0.27, 1.10, 0.07),
    "deepseek-reasoner": _p(0.55, 2.19, 0.14),
}


class ServerPrice(BaseModel):
    """A self-hosted model's server, priced by the hour."""

    usd_per_hour: float = Field(gt=0)
    output_tokens_per_sec: float | None = Field(default=None, gt=0)
    note: str | None = None


class PriceTableError(ValueError):
    """A price file that cannot be read or does not hold prices."""


def parse_price_file(path: Path) -> dict[str, ModelPrice]:
    try:
        text = path.read_text()
        data: Any = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (OSError, ValueError) as exc:  # tomllib/json errors are ValueErrors
        raise PriceTableError(f"cannot read price table {path}: {exc}") from exc
    if not isinstance(data, Mapping):
        raise PriceTableError(f"price table {path}: expected a table of models")
    models = data.get("models", data)
    if not isinstance(models, Mapping):
        raise PriceTableError(f"price table {path}: 'models' must be a table")
    out: dict[str, ModelPrice] = {}
    for name, entry in models.items():
        if name == "self_hosted" and models is data:
            continue  # servers' prices (parse_server_prices)
        try:
            out[str(name)] = ModelPrice.model_validate(entry)
        except ValidationError as exc:
            raise PriceTableError(f"price table {path}: model {name!r}: {exc}") from exc
    return out


def parse_server_prices(path: Path) -> dict[str, ServerPrice]:
    """The `[self_hosted]` table of a price file ({} when it has none)."""
    try:
        text = path.read_text()
        data: Any = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (OSError, ValueError) as exc:
        raise PriceTableError(f"cannot read price table {path}: {exc}") from exc
    table = data.get("self_hosted", {}) if isinstance(data, Mapping) else {}
    if not isinstance(table, Mapping):
        raise PriceTableError(f"price table {path}: 'self_hosted' must be a table")
    out: dict[str, ServerPrice] = {}
    for name, entry in table.items():
        try:
            out[str(name)] = ServerPrice.model_validate(entry)
        except ValidationError as exc:
            raise PriceTableError(f"price table {path}: self-hosted {name!r}: {exc}") from exc
    return out


def _price_files(path: Path | str | None) -> list[Path]:
    files = [USER_PRICES.expanduser()] if USER_PRICES.expanduser().is_file() else []
    if env := os.environ.get(PRICES_ENV):
        files.append(Path(env).expanduser())
    if path is not None:
        files.append(Path(path).expanduser())
    return files


def load_server_prices(path: Path | str | None = None) -> dict[str, ServerPrice]:
    """Self-hosted servers' prices from the same files as the token prices (later wins)."""
    out: dict[str, ServerPrice] = {}
    for file in _price_files(path):
        out.update(parse_server_prices(file))
    return out


def load_price_table(path: Path | str | None = None) -> dict[str, ModelPrice]:
    """The built-in table overlaid with the user's files (see the module docstring)."""
    table = dict(BUILTIN_PRICES)
    for file in _price_files(path):
        table.update(parse_price_file(file))
    return table


@lru_cache(maxsize=8)
def _default_table(env_value: str | None, user_mtime: float | None) -> dict[str, ModelPrice]:
    # Cached on what it depends on, so a changed file or env var is seen.
    return load_price_table()


def default_price_table() -> dict[str, ModelPrice]:
    user = USER_PRICES.expanduser()
    mtime = user.stat().st_mtime if user.is_file() else None
    return _default_table(os.environ.get(PRICES_ENV), mtime)


P = TypeVar("P", bound=BaseModel)


def lookup_price(model: str, table: Mapping[str, P]) -> P | None:
    """Exact name; then without a provider prefix ('openai/gpt-4o'); then the
    longest entry the name extends with '-' (a dated snapshot, 'gpt-4o-2024-08-06')."""
    candidates = [model]
    if "/" in model:
        candidates.append(model.rsplit("/", 1)[1])
    for name in candidates:
        if name in table:
            return table[name]
    for name in candidates:
        matches = [key for key in table if name.startswith(key + "-")]
        if matches:
            return table[max(matches, key=len)]
    return None


def cost_usd(
    model: str | None,
    usage: Usage | Mapping[str, Any],
    table: Mapping[str, ModelPrice] | None = None,
) -> float | None:
    """USD for `usage` on `model`; None when the model has no price.

    Prompt tokens are billed in three parts: cache reads at the cached rate,
    cache writes at the write rate, and the rest at the input rate.
    """
    if not model:
        return None
    price = lookup_price(model, default_price_table() if table is None else table)
    if price is None:
        return None
    u = Usage.coerce(usage)
    cached_rate = price.input if price.cached_input is None else price.cached_input
    write_rate = price.input if price.cache_write is None else price.cache_write
    fresh = max(u.input_tokens - u.cache_read_tokens - u.cache_write_tokens, 0)
    total = (
        fresh * price.input
        + u.cache_read_tokens * cached_rate
        + u.cache_write_tokens * write_rate
        + u.output_tokens * price.output
    )
    return total / 1_000_000
