"""crucible's reward inside a remote trainer (slime or verl on Modal), and the lines it
reports back.

The Modal recipe puts crucible's source, the config's folder and the prompts in the image
and sets CRUCIBLE_TRAIN_CONFIG (the config module there) and CRUCIBLE_TRAIN_NONCE (a
secret of this launch). The trainer calls the config's reward functions through:
- slime: `--custom-rm-path crucible.train.remote.slime_rm` -> `await slime_rm(args, sample)`;
- verl: `custom_reward_function.path=.../crucible/train/remote.py`, `name=compute_score`.
Each scored sample is printed as one line, `@@crucible-train <nonce> <json>`, which the
recipe's watcher (train/modal_watch.py) turns into the run's steps and samples. The nonce
is in the sandbox's environment only: a model's response that prints a marker line of its
own (or a trainer log that echoes one) cannot forge a step without it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

MARKER = "@@crucible-train"
CONFIG_ENV = "CRUCIBLE_TRAIN_CONFIG"
NONCE_ENV = "CRUCIBLE_TRAIN_NONCE"
MAX_TEXT = 8000  # characters of prompt and response reported per sample

_lock = threading.Lock()
_loaded: dict[str, Any] = {}


def _config() -> Any:
    with _lock:
        if "config" not in _loaded:
            from crucible.train.config import load_config

            path = os.environ.get(CONFIG_ENV)
            if not path:
                raise RuntimeError(f"{CONFIG_ENV} is not set: the Modal recipe sets it")
            _loaded["config"] = load_config(Path(path))
        return _loaded["config"]


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # chat messages: the last user turn
        users = [m.get("content", "") for m in value if isinstance(m, dict)
                 and m.get("role") == "user"]  # fmt: skip
        return str(users[-1]) if users else json.dumps(value, default=str)
    return "" if value is None else str(value)


async def score_sample(prompt: Any, response: str, label: Any,
                       metadata: dict[str, Any] | None) -> tuple[float, dict[str, float]]:  # fmt: skip
    """The config's rewards on one sample, summed (several: each a component); reported."""
    from crucible.train.reward import Sample, as_args, reward_name, score

    config = _config()
    sample = Sample(prompt=_text(prompt), response=response, label=label,
                    metadata=dict(metadata or {}))  # fmt: skip
    args = as_args(config.reward_args)
    fns = config.rewards()
    if len(fns) == 1:
        total, comps = await score(fns[0], args, sample)
    else:
        total, comps = 0.0, {}
        for fn in fns:
            t, parts = await score(fn, args, sample)
            total += t
            comps[reward_name(fn)] = t
            comps.update({f"{reward_name(fn)}.{k}": v for k, v in parts.items()})
    report(sample.prompt, response, total, comps, label)
    return total, comps


def report(prompt: str, response: str, reward: float, components: dict[str, float],
           label: Any) -> None:  # fmt: skip
    nonce = os.environ.get(NONCE_ENV, "")
    body = {
        "prompt": prompt[:MAX_TEXT],
        "response": response[:MAX_TEXT],
        "reward": reward,
        "components": components,
        "label": label if isinstance(label, str | int | float | type(None)) else str(label),
    }
    # json.dumps escapes newlines: one sample is one line whatever the model wrote
    line = f"{MARKER} {nonce} {json.dumps(body, ensure_ascii=True)}\n"
    with _lock:
        sys.stdout.write(line)
        sys.stdout.flush()


async def slime_rm(args: Any, sample: Any, **kw: Any) -> float:
    """slime's custom reward model: `--custom-rm-path crucible.train.remote.slime_rm`."""
    meta = getattr(sample, "metadata", None)
    total, _ = await score_sample(getattr(sample, "prompt", ""),
                                  str(getattr(sample, "response", "") or ""),
                                  getattr(sample, "label", None),
                                  meta if isinstance(meta, dict) else {})  # fmt: skip
    return total


def compute_score(data_source: Any, solution_str: str, ground_truth: Any,
                  extra_info: dict[str, Any] | None = None, **kw: Any) -> dict[str, float]:  # fmt: skip
    """verl's custom reward function: a dict with the total under "score" and the
    components beside it (verl logs them)."""
    info = extra_info if isinstance(extra_info, dict) else {}
    meta, label = _json(info.get("metadata")), _json(ground_truth)
    job = score_sample(info.get("prompt", ""), solution_str, label,
                       meta if isinstance(meta, dict) else {})  # fmt: skip
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        total, comps = asyncio.run(job)
    else:  # called from a running loop (verl's async reward loop): score on a thread
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1) as pool:
            total, comps = pool.submit(asyncio.run, job).result()
    return {"score": total, **comps}


def _json(value: Any) -> Any:
    """write_prompts stores labels and metadata as JSON text in verl's Parquet."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value
