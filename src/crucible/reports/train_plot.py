"""Training runs in reports: reward and each reward component per step as an SVG line
chart, and a small self-contained HTML page (`crucible report RUN --format html`, and the
viewer's /api/train/<id>/plot.svg).

A training run's folder is found by its run.json (store/train_runs.py reads it, capped);
every name in the chart (the components are the reward function's keys) is escaped by
svg.py, and the page holds no script.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from crucible.records.train import RUN_FILE, StepMetrics, TrainRun
from crucible.reports.svg import line_chart
from crucible.store.train_runs import read_metrics, read_run

MAX_COMPONENTS = 12  # more lines than this say nothing on one chart


def is_train_dir(path: Path) -> bool:
    return (path / RUN_FILE).is_file() and not (path / "job.json").exists()


def reward_series(metrics: list[StepMetrics]) -> list[tuple[str, list[tuple[float, float | None]]]]:
    series: list[tuple[str, list[tuple[float, float | None]]]] = [
        ("reward", [(float(m.step), m.reward_mean) for m in metrics])
    ]
    names: list[str] = []
    for m in metrics:
        names += [k for k in m.components if k not in names]
    for name in names[:MAX_COMPONENTS]:
        series.append((name, [(float(m.step), m.components.get(name)) for m in metrics]))
    return series


def reward_chart(run: TrainRun, metrics: list[StepMetrics]) -> str:
    return line_chart(reward_series(metrics), kind="train-reward",
                      title=f"{run.id}: reward per step", x_label="step",
                      y_label="mean reward")  # fmt: skip


def train_summary(folder: Path) -> dict[str, Any]:
    """What `crucible report RUN --format json` prints of a training run."""
    run = read_run(folder)
    metrics, skipped = read_metrics(folder)
    return {"run": run.model_dump(mode="json"),
            "reward_per_step": [m.model_dump(mode="json") for m in metrics],
            "skipped_lines": skipped}  # fmt: skip


def render_train_html(folder: Path) -> str:
    run = read_run(folder)
    metrics, _ = read_metrics(folder)
    comps = sorted({k for m in metrics for k in m.components})
    head = "".join(f"<th>{escape(c)}</th>" for c in ["step", "reward", *comps, "seconds"])
    rows = []
    for m in metrics:
        cells = [str(m.step), _fmt(m.reward_mean), *(_fmt(m.components.get(c)) for c in comps),
                 _fmt(m.step_time_s, 2)]  # fmt: skip
        rows.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>")
    info = (f"{escape(run.recipe)} · model {escape(run.model)} · dataset {escape(run.dataset)}"
            f" · reward {escape(run.reward)} · {escape(run.state)} · step {run.step}"
            f"/{run.total_steps or '?'}")  # fmt: skip
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{escape(run.id)}</title></head><body>"
        f"<h1>{escape(run.id)}</h1><p>{info}</p>"
        f"<figure>{reward_chart(run, metrics)}</figure>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        "</body></html>\n"
    )


def _fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"
