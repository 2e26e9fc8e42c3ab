"""Reading rewards the Harbor way: /logs/verifier/reward.json (a flat map of
finite numbers) wins over reward.txt (one float)."""

from __future__ import annotations

import json
import math
from typing import Any

from crucible.errors import VerifierFailed
from crucible.records.text import storable

REWARD_DIR = "/logs/verifier"
REWARD_JSON = f"{REWARD_DIR}/reward.json"
REWARD_TXT = f"{REWARD_DIR}/reward.txt"
# Rewards a reward.json may hold. Each is aggregated (mean, SE, CI) in every report of
# the jobs folder: 60,000 keys in one trial's file took `report` 13 s. Harbor's tasks
# use a handful.
MAX_REWARD_KEYS = 256


def _finite(key: str, value: object) -> float:
    # bool is an int subclass; a reward of `true` is a mistake worth reporting
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise VerifierFailed(f"reward.json: {key!r} is {type(value).__name__}, not a number")
    try:
        f = float(value)
    except OverflowError:  # a 400-digit integer is valid JSON and no float
        raise VerifierFailed(f"reward.json: {key!r} is too large for a number") from None
    if not math.isfinite(f):
        raise VerifierFailed(f"reward.json: {key!r} is not finite ({value})")
    return f


def _load_object(text: str) -> dict[str, Any]:
    try:
        data = storable(json.loads(text))  # a "\udcff" escape is valid JSON, not storable
    except ValueError as exc:  # JSONDecodeError, or an integer past Python's digit limit
        raise VerifierFailed(f"reward.json is not valid JSON: {str(exc)[:200]}") from exc
    except RecursionError as exc:
        raise VerifierFailed("reward.json is nested too deeply") from exc
    if not isinstance(data, dict):
        raise VerifierFailed("reward.json must be a flat object of numbers")
    if not data:
        raise VerifierFailed("reward.json is an empty object")
    return data


def _few(rewards: dict[str, float]) -> dict[str, float]:
    if len(rewards) > MAX_REWARD_KEYS:
        raise VerifierFailed(
            f"reward.json holds {len(rewards)} rewards, more than {MAX_REWARD_KEYS}"
        )
    return rewards


def parse_reward_json(text: str) -> dict[str, float]:
    """reward.json strictly: every value a finite number."""
    return _few({str(k): _finite(str(k), v) for k, v in _load_object(text).items()})


def split_reward_json(text: str) -> tuple[dict[str, float], dict[str, Any]]:
    """reward.json as (rewards, details): numbers are rewards, any other value is a detail
    (result.json keeps it; the caller warns). No number at all is verifier_failed, and a
    number that is not finite is a broken reward, as in `parse_reward_json`.

    The primary reward (key "reward", else the file's first key: what a trial counts as)
    must be a number itself: a test that echoes the agent's answer into it beside a
    second key ({"reward": ANSWER, "format_ok": 1}) would otherwise count the second
    key whenever the answer is a string, `true` or null."""
    data = _load_object(text)
    rewards: dict[str, float] = {}
    details: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            rewards[str(key)] = _finite(str(key), value)
        else:
            details[str(key)] = value
    if not rewards:
        raise VerifierFailed("reward.json holds no number: no reward")
    primary = "reward" if "reward" in data else next(iter(data))
    if primary in details:
        kind = type(details[primary]).__name__
        raise VerifierFailed(f"reward.json: the primary reward {primary!r} is {kind}, not a number")
    return _few(rewards), details


def parse_reward_txt(text: str) -> dict[str, float]:
    s = text.strip()
    if not s:
        raise VerifierFailed("reward.txt is empty")
    try:
        f = float(s)
    except (ValueError, OverflowError) as exc:
        raise VerifierFailed(f"reward.txt does not hold one number: {s[:80]!r}") from exc
    if not math.isfinite(f):
        raise VerifierFailed(f"reward.txt is not finite ({s})")
    return {"reward": f}


def check_range(rewards: dict[str, float], lo: float, hi: float, source: str) -> None:
    """VerifierFailed naming the first reward outside [lo, hi] and its value. The bound is
    what keeps a sum of rewards finite: 1.5e308 is a float, two of them are not."""
    for key, value in rewards.items():
        if not math.isfinite(value) or not lo <= value <= hi:
            raise VerifierFailed(
                f"{source}: {key!r} is {value!r}, outside the task's reward_range "
                f"[{lo:g}, {hi:g}]: not counted (0)"
            )
