"""Launching a TrainConfig: the run's folder and index row, then the recipe, here or in a
detached worker process; and waiting for a run to end.

`launch` writes the run's record (state pending) and either runs the recipe in this
process or starts `python -m crucible.train.worker RUN_DIR` in a session of its own (so it
outlives the launcher and a Ctrl-C in the launcher's terminal), which loads the config
module again from `source`. Either way the recipe runs through `run_recipe`, which marks
the run running, then completed, cancelled (cancel.request or SIGINT) or failed (with the
error). A smoke run is the same with `smoke_config`: one step on the tiny local model.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

from crucible.records.train import TERMINAL_STATES, TrainRun
from crucible.store.procs import pid_alive
from crucible.train.config import TINY_MODEL, TrainConfig, jobs_dir_of
from crucible.train.run import RunHandle, new_run_id, read_run

WORKER_OUT = "worker.out"  # the detached worker's stdout and stderr
SMOKE_MAX_RESPONSE = 24  # tokens: enough to see the shape of an answer


def smoke_config(config: TrainConfig) -> TrainConfig:
    """One step on a tiny random model with a tokenizer trained on the dataset's text."""
    return config.model_copy(update={
        "model": TINY_MODEL, "steps": 1, "batch_size": min(config.batch_size, 2),
        "samples_per_prompt": min(config.samples_per_prompt, 4),
        "max_response_length": min(config.max_response_length, SMOKE_MAX_RESPONSE),
        "save_interval": None, "eval_interval": None,
        "trace_samples": max(config.trace_samples, 8),
    })  # fmt: skip


def create_run(config: TrainConfig, jobs_dir: Path, *, smoke: bool = False) -> RunHandle:
    rec = TrainRun(id=new_run_id(), recipe=config.recipe.name, model=config.model,
                   dataset=config.dataset.describe(), reward=config.reward_label(),
                   knobs=config.knobs(), source=str(config.source) if config.source else None,
                   smoke=smoke, total_steps=config.steps)  # fmt: skip
    return RunHandle.create(jobs_dir, rec, trace_samples=config.trace_samples)


def run_recipe(config: TrainConfig, handle: RunHandle) -> TrainRun:
    """Run the recipe to its end in this process; the run's final record."""
    handle.start(config.steps)
    try:
        config.recipe.launch(config, handle)
    except KeyboardInterrupt:
        handle.finish("cancelled")
    except BaseException as exc:
        handle.finish("failed", "".join(traceback.format_exception(exc)))
        if not isinstance(exc, Exception):
            raise
    else:
        handle.finish("cancelled" if handle.cancel_requested() else "completed")
    return handle.record


def launch(config: TrainConfig, *, detach: bool | None = None, jobs_dir: Path | None = None,
           smoke: bool = False) -> str:  # fmt: skip
    """Start a run of `config`; its id. Detached by default when the config has a source."""
    if detach is None:
        detach = config.source is not None
    if detach and config.source is None:
        raise ValueError("a detached run loads its config again: launch it from a config "
                         "file (`crucible train launch FILE`), or pass detach=False")  # fmt: skip
    root = jobs_dir_of(config, jobs_dir)
    run_cfg = smoke_config(config) if smoke else config
    handle = create_run(run_cfg, root, smoke=smoke)
    if not detach:
        run_recipe(run_cfg, handle)
        return handle.id
    with (handle.folder / WORKER_OUT).open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "crucible.train.worker", str(handle.folder.resolve())],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, env=_worker_env(), cwd=os.getcwd(),
        )  # fmt: skip
    handle.log(f"worker started: pid {proc.pid}")
    return handle.id


def _worker_env() -> dict[str, str]:
    env = dict(os.environ)
    # the worker imports crucible as this process did (a checkout's src/ on sys.path)
    here = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH", "")) if p)
    return env


def wait(run_id: str, *, jobs_dir: Path, timeout_s: float | None = None,
         poll_s: float = 0.5) -> TrainRun:  # fmt: skip
    """Block until the run ends (or its process is gone); its record. TimeoutError after
    `timeout_s`."""
    folder = jobs_dir / run_id
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        rec = read_run(folder)
        if rec.state in TERMINAL_STATES:
            return rec
        if rec.state == "running" and rec.pid and not pid_alive(rec.pid):
            return rec.model_copy(update={"state": "failed",
                                          "error": "its process is gone (killed or crashed)"})  # fmt: skip
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"run {run_id} still {rec.state} after {timeout_s}s")
        time.sleep(poll_s)
