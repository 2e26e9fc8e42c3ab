"""The viewer's training runs: the list beside the jobs, one run (its steps, reward and
components, latest samples), and its reward chart as SVG (reports/train_plot.py).

Run names come from the URL: each must be one plain segment naming a direct child of the
jobs dir (viewer_api._child); samples are model output and go to the page as JSON text,
which the page sets as text, never as markup.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crucible.reports.train_plot import is_train_dir, reward_chart
from crucible.store.train_runs import read_metrics, read_run, read_samples

LAST_SAMPLES = 50  # the newest samples a run's page shows (`runs trace` exports them all)


def train_runs(jobs_dir: Path) -> list[dict[str, Any]]:
    out = []
    if jobs_dir.is_dir():
        for d in jobs_dir.iterdir():
            if d.name.startswith(".") or not is_train_dir(d):
                continue
            try:
                run = read_run(d)
                metrics, _ = read_metrics(d)
            except (OSError, ValueError):
                continue
            out.append({"run_id": run.id, "kind": run.kind, "state": run.state,
                        "recipe": run.recipe, "model": run.model, "step": run.step,
                        "total_steps": run.total_steps,
                        "reward_mean": metrics[-1].reward_mean if metrics else None,
                        "created_at": run.created_at.isoformat()})  # fmt: skip
    out.sort(key=lambda r: (r["created_at"], r["run_id"]), reverse=True)
    return out


def train_run(folder: Path) -> dict[str, Any]:
    run = read_run(folder)
    metrics, bad = read_metrics(folder)
    samples, bad_s = read_samples(folder)
    return {"run": run.model_dump(mode="json"),
            "reward_per_step": [m.model_dump(mode="json") for m in metrics],
            "samples": [s.model_dump(mode="json") for s in samples[-LAST_SAMPLES:]],
            "n_samples": len(samples), "skipped_lines": bad + bad_s}  # fmt: skip


def train_plot(folder: Path) -> bytes:
    run = read_run(folder)
    metrics, _ = read_metrics(folder)
    return reward_chart(run, metrics).encode()
