"""The HTML report: one self-contained file (inline CSS, JS and SVG plots), no network."""

from __future__ import annotations

import os
from collections.abc import Sequence
from html import escape
from pathlib import Path
from urllib.parse import quote

from crucible.metrics.model import GroupMetrics, JobMetrics, Report
from crucible.reports import svg
from crucible.reports.cells import fmt
from crucible.reports.load import LoadedJob
from crucible.reports.tables import (
    Row,
    breakdown_rows,
    comparison_rows,
    notes,
    reason_rows,
    results_rows,
)

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px}
.meta{color:#666;font-size:12px}
table{border-collapse:collapse;margin:6px 0}
th,td{border-bottom:1px solid #e3e3e3;padding:4px 8px;text-align:right;white-space:nowrap}
th{background:#f6f6f6;position:sticky;top:0}
td:first-child,th:first-child,td.l,th.l{text-align:left}
.plots{display:flex;flex-wrap:wrap;gap:12px}
.plots figure{margin:0;border:1px solid #e3e3e3;border-radius:4px}
.plots figcaption{font-size:12px;color:#666;padding:2px 8px 6px}
.missing{color:#888;font-style:italic;padding:8px}
a.t{display:inline-block;min-width:18px;padding:0 4px;margin:1px;border-radius:3px;
  text-decoration:none;color:#fff;font-size:11px;text-align:center}
a.pass{background:#3a9a4a} a.fail{background:#c0504d} a.partial{background:#d99a2b}
a.error{background:#777} a.small{font-size:11px;color:#555;margin-left:2px}
input#filter{margin:4px 0;padding:3px 6px;width:260px}
"""

JS = """
document.getElementById('filter').addEventListener('input', function (e) {
  var q = e.target.value.toLowerCase();
  document.querySelectorAll('#tasks tbody tr').forEach(function (tr) {
    tr.style.display = tr.dataset.task.toLowerCase().indexOf(q) >= 0 ? '' : 'none';
  });
});
"""


def _table(header: Row, rows: list[Row], table_id: str = "") -> str:
    id_attr = f' id="{table_id}"' if table_id else ""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table{id_attr}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _label(j: JobMetrics) -> str:
    return j.short_name


def _figure(svg_text: str, caption: str) -> str:
    return f"<figure>{svg_text}<figcaption>{escape(caption)}</figcaption></figure>"


def _missing(kind: str, text: str) -> str:
    return f'<figure class="missing" data-plot-missing="{escape(kind)}">{escape(text)}</figure>'


def plot_pass_k(report: Report) -> str:
    series = [
        (_label(j), [(float(p.k), p.pass_at_k) for p in j.overall.pass_k]) for j in report.jobs
    ]
    hat = [
        (_label(j) + " pass^k", [(float(p.k), p.pass_hat_k) for p in j.overall.pass_k])
        for j in report.jobs
    ]
    several = max((len(pts) for _, pts in series), default=0) > 1
    n = len(series)
    chart = svg.line_chart(
        series + hat if several else series,
        kind="pass-k",
        title="pass@k (solid) and pass^k (dashed)" if several else "pass@1",
        x_label="k (attempts)",
        y_label="rate",
        y_range=(0.0, 1.0),
        styles=[(i, False) for i in range(n)] + ([(i, True) for i in range(n)] if several else []),
    )
    return _figure(
        chart,
        f"Unbiased pass@k (Chen et al. 2021), success = reward >= {report.options.threshold:g}",
    )


def _primary_values(job: LoadedJob, g: GroupMetrics) -> list[float]:
    key = g.primary
    if key is None:
        return []
    return [r.rewards[key] for r in job.records if r.graded and r.rewards and key in r.rewards]


def plot_rewards(report: Report, jobs: Sequence[LoadedJob]) -> str:
    series = [
        (_label(m), _primary_values(j, m.overall)) for m, j in zip(report.jobs, jobs, strict=True)
    ]
    if not any(v for _, v in series):
        return _missing("rewards", "No graded trials yet: no reward distribution.")
    return _figure(
        svg.histogram(series, kind="rewards", title="Reward distribution", x_label="reward"),
        "Primary reward of graded trials",
    )


def _category_key(report: Report) -> str | None:
    if report.by:
        return report.by
    for j in report.jobs:
        rs = j.overall.reward()
        if rs and rs.clustered:
            return rs.clustered.method.split(":", 1)[1]
    return None


def plot_categories(report: Report, jobs: Sequence[LoadedJob]) -> str:
    from crucible.metrics.aggregate import breakdown

    key = _category_key(report)
    if key is None:
        return _missing("categories", "Tasks carry no category (use --by KEY to split).")
    per_job = []
    for m, j in zip(report.jobs, jobs, strict=True):
        b = m.breakdown if m.breakdown and m.breakdown.key == key else None
        per_job.append(b or breakdown(j.records, key, report.options))
    cats: list[str] = []
    for b in per_job:
        cats += [c for c in b.groups if c not in cats]
    series = []
    for m, b in zip(report.jobs, per_job, strict=True):
        vals: list[tuple[float | None, float | None]] = []
        for c in cats:
            rs = b.groups[c].reward() if c in b.groups else None
            vals.append((rs.mean, rs.se) if rs else (None, None))
        series.append((_label(m), vals))
    return _figure(
        svg.bar_chart(
            cats,
            series,
            kind="categories",
            title=f"Mean reward by {key}",
            y_label="mean reward",
            y_range=_unit_range(series),
        ),
        "Bars: mean of per-task means; whiskers: ± SE",
    )


def _unit_range(
    series: Sequence[tuple[str, Sequence[tuple[float | None, float | None]]]],
) -> tuple[float, float] | None:
    """(0, 1) when every mean lies in it (rewards, rates); else the data decide."""
    means = [m for _, vals in series for m, _ in vals if m is not None]
    return (0.0, 1.0) if means and all(0.0 <= m <= 1.0 for m in means) else None


def plot_durations(jobs: Sequence[LoadedJob], report: Report) -> str:
    series = [
        (_label(m), [r.duration_sec for r in j.records if r.duration_sec is not None])
        for m, j in zip(report.jobs, jobs, strict=True)
    ]
    if not any(v for _, v in series):
        return _missing("durations", "No trial timings recorded.")
    return _figure(
        svg.histogram(series, kind="durations", title="Trial duration", x_label="seconds"),
        "Wall time from trial start to finish",
    )


def plot_costs(jobs: Sequence[LoadedJob], report: Report) -> str:
    series = [
        (_label(m), [r.cost_usd for r in j.records if r.cost_usd is not None])
        for m, j in zip(report.jobs, jobs, strict=True)
    ]
    if not any(v for _, v in series):
        if any(j.overall.cost.tokens_total for j in report.jobs):
            return _missing(
                "costs",
                "Tokens are recorded (see tokens/rollout above) but no price is known for this "
                "model: --price-table FILE prices them.",
            )
        return _missing("costs", "No cost known for any rollout (no token usage or price).")
    return _figure(
        svg.histogram(
            series,
            kind="costs",
            title="Cost per rollout",
            x_label="USD per rollout",
            x_format="${:.4g}",
        ),
        "Recorded cost, else token usage priced from the price table",
    )


def _href(link_base: Path, target: Path) -> str:
    rel = os.path.relpath(target.resolve(), link_base.resolve())
    return quote(rel.replace(os.sep, "/"))


def _badge_class(outcome: str, reward: float | None, threshold: float) -> str:
    if outcome != "graded":
        return "error"
    if reward is None:
        return "error"
    if reward >= threshold:
        return "pass"
    return "partial" if reward > 0 else "fail"


def task_table(report: Report, jobs: Sequence[LoadedJob], link_base: Path) -> str:
    names: list[str] = []
    for m in report.jobs:
        names += [t.task for t in m.tasks if t.task not in names]
    names.sort()
    head = '<th class="l">task</th>' + "".join(
        f'<th class="l">{escape(_label(m))}</th>' for m in report.jobs
    )
    rows = []
    for name in names:
        cells = [f'<td class="l">{escape(name)}</td>']
        for m, j in zip(report.jobs, jobs, strict=True):
            t = next((t for t in m.tasks if t.task == name), None)
            if t is None:
                cells.append('<td class="l">-</td>')
                continue
            links = []
            for tr in t.trials:
                folder = j.dir / (tr.folder or tr.trial_name)
                cls = _badge_class(tr.outcome, tr.reward, report.options.threshold)
                tip = f"attempt {tr.attempt}: {tr.outcome}" + (
                    f", reward {tr.reward:g}" if tr.reward is not None else ""
                )
                if tr.error:
                    tip += f" - {tr.error[:200]}"
                links.append(
                    f'<a class="t {cls}" href="{_href(link_base, folder / "trial.log")}" '
                    f'title="{escape(tip)}">{tr.attempt}</a>'
                    f'<a class="small" href="{_href(link_base, folder)}/" title="trial folder">…</a>'
                )
            err = f", {t.n_errors} err" if t.n_errors else ""
            cells.append(
                f'<td class="l"><b>{fmt(t.mean)}</b> <span class="meta">'
                f"({t.successes}/{t.n_scored}{err})</span> {''.join(links)}</td>"
            )
        rows.append(f'<tr data-task="{escape(name)}">' + "".join(cells) + "</tr>")
    return (
        '<input id="filter" placeholder="filter tasks">'
        f'<table id="tasks"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


def render_html(report: Report, jobs: Sequence[LoadedJob], *, link_base: Path) -> str:
    """`link_base`: the folder the file will be opened from; trial links are relative to it."""
    title = "crucible report: " + ", ".join(_label(j) for j in report.jobs)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<div class="meta">generated {escape(report.generated_at)} · '
        f"{escape('; '.join(notes(report)))}</div>",
        "<h2>Results</h2>",
        _table(*results_rows(report), table_id="results"),
    ]
    if (b := breakdown_rows(report)) is not None:
        parts += [f"<h2>By {escape(report.by or '')}</h2>", _table(*b, table_id="breakdown")]
    if (w := reason_rows(report)) is not None:
        parts += ["<h2>Why (errors and zeros)</h2>", _table(*w, table_id="why")]
    if (c := comparison_rows(report)) is not None:
        parts += ["<h2>Paired difference (by task)</h2>", _table(*c, table_id="comparisons")]
    parts += [
        "<h2>Plots</h2>",
        '<div class="plots">',
        plot_pass_k(report),
        plot_rewards(report, jobs),
        plot_categories(report, jobs),
        plot_durations(jobs, report),
        plot_costs(jobs, report),
        "</div>",
        "<h2>Tasks</h2>",
        '<p class="meta">mean (successes/scored) then one badge per attempt, linking to its '
        "trial.log; … opens the trial folder.</p>",
        task_table(report, jobs, link_base),
        f"<script>{JS}</script>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"
