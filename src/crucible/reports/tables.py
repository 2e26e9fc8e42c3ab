"""The side-by-side tables of a Report, as rich tables (terminal) or Markdown."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from crucible.metrics.model import GroupMetrics, JobMetrics, Report
from crucible.metrics.stats import Estimate
from crucible.records.verifier import not_fully_graded_text
from crucible.reports.cells import (
    fmt,
    fmt_ci,
    fmt_errors,
    fmt_mean_se,
    fmt_tokens_per_rollout,
    fmt_usd,
    unit_bounded,
)

Row = list[str]


def max_k(jobs: Sequence[JobMetrics]) -> int:
    return max((p.k for j in jobs for p in j.overall.pass_k if p.pass_at_k is not None), default=1)


def results_rows(report: Report) -> tuple[Row, list[Row]]:
    k = max_k(report.jobs)
    header = ["job", "agent / model", "tasks", "runs", "trials", mean_header(report), "95% CI"]
    header.append("pass@1")
    if k > 1:
        header += [f"pass@{k}", f"pass^{k}"]
    header += ["errors", "tokens/rollout", "cost/rollout"]
    components = stage_components(report.jobs)
    header += components
    judged = any(j.overall.cost.verifier_n_judged for j in report.jobs)
    if judged:
        header.append("judge cost/rollout")
    tampering = any(j.overall.n_tampered for j in report.jobs)
    if tampering:
        header.append("tampered")
    rows = []
    for j in report.jobs:
        g = j.overall
        rs = g.reward()
        row = [
            j.short_name,
            " / ".join(x for x in (j.agent, j.model) if x) or "-",
            str(g.n_tasks),
            str(g.n_runs),
            str(g.n_trials) if j.n_planned is None else f"{g.n_trials}/{j.n_planned}",
            fmt_mean_se(g),
            fmt_ci(rs.ci_low, rs.ci_high, (0.0, 1.0) if unit_bounded(j) else None) if rs else "-",
            fmt(g.pass_at(1)),
        ]
        if k > 1:
            pk = next((p for p in g.pass_k if p.k == k), None)
            row += [fmt(pk.pass_at_k if pk else None), fmt(pk.pass_hat_k if pk else None)]
        cost = fmt_usd(g.cost.per_rollout_usd)
        if g.cost.sources.get("self-hosted") and cost != "-":
            cost += " (self-hosted)"  # server time, not tokens: see the notes
        row += [fmt_errors(g), fmt_tokens_per_rollout(g), cost]
        row += [_component_mean(g, c) for c in components]
        if judged:
            row.append(fmt_judge_cost(g))
        if tampering:
            row.append(str(g.n_tampered))
        rows.append(row)
    return header, rows


def stage_components(jobs: Sequence[JobMetrics]) -> list[str]:
    """Every reward key but the primary one (a task's other keys, and the keys host-side
    stages added, "<stage>.<component>"): a column of means each."""
    out: list[str] = []
    for j in jobs:
        for key in j.overall.rewards:
            if key != j.overall.primary and key not in out:
                out.append(key)
    return out


def mean_header(report: Report) -> str:
    """The means are of the primary reward key: the header says which."""
    keys = list(dict.fromkeys(j.overall.primary for j in report.jobs if j.overall.primary))
    return f"mean ± SE ({', '.join(keys)})" if keys else "mean ± SE"


def _component_mean(g: GroupMetrics, key: str) -> str:
    rs = g.rewards.get(key)
    return fmt(rs.mean) if rs is not None else "-"


def fmt_judge_cost(g: GroupMetrics) -> str:
    c = g.cost
    if not c.verifier_n_judged:
        return "-"
    if c.verifier_per_rollout_usd is not None:
        return fmt_usd(c.verifier_per_rollout_usd)
    return f"{c.verifier_tokens_total / c.verifier_n_judged:.0f} tok (unpriced)"


def breakdown_rows(report: Report) -> tuple[Row, list[Row]] | None:
    if not report.by:
        return None
    values: list[str] = []
    for j in report.jobs:
        for v in j.breakdown.groups if j.breakdown else {}:
            if v not in values:
                values.append(v)
    header = ["job", "all", *(f"{report.by}={v}" for v in values)]
    rows = []
    for j in report.jobs:
        groups = j.breakdown.groups if j.breakdown else {}
        row = [j.short_name, _cell(j.overall)]
        row += [_cell(groups[v]) if v in groups else "-" for v in values]
        rows.append(row)
    return header, rows


def _cell(g: GroupMetrics) -> str:
    return f"{fmt_mean_se(g)} (n={g.n_tasks})"


def task_rows(report: Report) -> tuple[Row, list[Row]]:
    """One row per task; per job its mean reward, scored/trials and errors in one cell."""
    names: list[str] = []
    for j in report.jobs:
        names += [t.task for t in j.tasks if t.task not in names]
    header = ["task", *(j.short_name for j in report.jobs)]
    rows = []
    for name in sorted(names):
        row = [name]
        for j in report.jobs:
            t = next((t for t in j.tasks if t.task == name), None)
            if t is None:
                row.append("-")
                continue
            cell = f"{fmt(t.mean)} ({t.n_scored}/{t.n_trials}"
            row.append(cell + (f", {t.n_errors} err)" if t.n_errors else ")"))
        rows.append(row)
    return header, rows


def step_rows(report: Report) -> tuple[Row, list[Row]] | None:
    """Multi-step tasks: per job and task, each step's mean reward over the trials that
    graded it (graded/trials beside it: a gate that stopped a trial early shows there)."""
    names: list[str] = []
    rows_of: list[tuple[str, str, list[dict[str, float | None]], int]] = []
    for j in report.jobs:
        for t in j.tasks:
            stepped = [tr.step_rewards for tr in t.trials if tr.step_rewards is not None]
            if not stepped:
                continue
            names += [n for n in dict.fromkeys(k for s in stepped for k in s) if n not in names]
            rows_of.append((j.short_name, t.task, stepped, len(t.trials)))
    if not rows_of:
        return None
    rows = []
    for job, task, stepped, n in rows_of:
        row = [job, task]
        for name in names:
            got = [v for s in stepped if (v := s.get(name)) is not None]
            row.append(f"{fmt(sum(got) / len(got))} ({len(got)}/{n})" if got else "-")
        rows.append(row)
    return ["job", "task", *(f"step {n}" for n in names)], rows


MAX_REASONS = 10  # per job: the rest are counted in the errors column


def reason_rows(report: Report) -> tuple[Row, list[Row]] | None:
    """Why trials errored or scored 0: the error's first line, else the verifier's last line."""
    from pathlib import Path

    from crucible.store.log_reader import verifier_tail

    rows: list[Row] = []
    for j in report.jobs:
        n = 0
        for t in j.tasks:
            for tr in t.trials:
                if n >= MAX_REASONS or tr.outcome == "cancelled":
                    continue
                if tr.outcome == "graded" and tr.reward:
                    continue
                tail = (
                    verifier_tail(Path(j.path) / (tr.folder or tr.trial_name), 1) if j.path else []
                )
                first = tr.error.splitlines()[0] if tr.error else ""
                reason = " | ".join(x for x in (first[:160], *tail) if x)
                # graded without the primary key: counted 0, as Harbor counts a missing key
                missing = tr.outcome == "graded" and tr.reward is None
                if not reason and not tr.stages and not missing:
                    continue
                label = "reward 0" if tr.outcome == "graded" else tr.outcome
                if missing:
                    label = f"no {j.overall.primary!r} key: 0"
                name = tr.folder or tr.trial_name
                if reason or missing:
                    rows.append([j.short_name, name, label, reason or "-"])
                for st in tr.stages:  # a row per verifier stage: which one zeroed it, and why
                    why = f"{st.status}: {st.reason[:300]}" if st.reason else st.status
                    rows.append([j.short_name, name, f"stage {st.name}", why])
                n += 1
    return (
        (
            ["job", "trial", "outcome", "why (error, else the verifier's last line; each stage)"],
            rows,
        )
        if rows
        else None
    )


def comparison_rows(report: Report) -> tuple[Row, list[Row]] | None:
    if not report.comparisons:
        return None
    names = {j.job_id: j.short_name for j in report.jobs}
    header = ["difference", "key", "common tasks", "mean a", "mean b", "a - b ± SE", "95% CI"]
    rows = []
    for c in report.comparisons:
        d: Estimate = c.difference
        diff = (
            "-"
            if d.mean is None
            else (fmt(d.mean) + (f" ± {fmt(d.se)}" if d.se is not None else ""))
        )
        rows.append(
            [
                f"{names.get(c.a, c.a)} - {names.get(c.b, c.b)}",
                c.key,
                str(c.n_common),
                fmt(c.mean_a),
                fmt(c.mean_b),
                diff,
                fmt_ci(
                    d.ci_low,
                    d.ci_high,
                    (-1.0, 1.0) if all(map(unit_bounded, report.jobs)) else None,
                ),
            ]
        )
    return header, rows


ERRORS_NOTE = {
    "blame": "verifier_failed counts as 0, infrastructure errors left out of means",
    "excluded": "errors excluded from means",
    "zero": "errors zero (trials without a reward count as 0)",
}


def tampered_trials(report: Report, limit: int = 5) -> list[str]:
    """Trials that changed code grading runs, as 'trial (first change, ...)', under any
    policy; those `--tampered zero` counted 0 say so."""
    out = []
    for j in report.jobs:
        for t in j.tasks:
            for tr in t.trials:
                if tr.tampered_paths:
                    more = f", +{len(tr.tampered_paths) - 2}" if len(tr.tampered_paths) > 2 else ""
                    zero = " counted 0" if (tr.error or "").startswith("tampered:") else ""
                    out.append(f"{tr.trial_name}{zero} ({', '.join(tr.tampered_paths[:2])}{more})")
    return out[:limit] + ([f"{len(out) - limit} more"] if len(out) > limit else [])


def notes(report: Report) -> list[str]:
    o = report.options
    out = [ERRORS_NOTE[o.errors_as], f"success: reward >= {o.threshold:g}"]
    if tampered := tampered_trials(report):
        out.append("TAMPERING (changed code that grading runs): " + ", ".join(tampered))
    out += [f"{j.short_name}: " + not_fully_graded_text(j.overall.n_not_fully_graded,
            j.overall.not_fully_graded) for j in report.jobs if j.overall.n_not_fully_graded]  # fmt: skip
    out += [f"cost/rollout of {j.short_name}: {j.cost_basis}"
            for j in report.jobs if j.cost_basis]  # fmt: skip
    methods = {rs.se_method for j in report.jobs if (rs := j.overall.reward()) and rs.se_method}
    if methods:
        out.append("SE across " + " / ".join(sorted(methods)) + " (run i = attempt i of each task)")
    ci = f"{int(o.confidence * 100)}% CI with Student's t"
    if any(unit_bounded(j) for j in report.jobs):
        ci += ", cut to [0, 1] for rewards in [0, 1]"
    out.append(ci)
    return out


def _width(cells: list[str]) -> int:
    return max((len(c) for c in cells), default=0) + 3  # padding and a rule


def fit_columns(header: Row, rows: list[Row], keep: int, width: int) -> list[list[int]]:
    """Column index groups, each with the first `keep` columns, each as wide as `width` at
    most: a table too wide for the terminal is split, so no id is cut and no number wraps."""
    widths = [_width([h, *(r[i] for r in rows)]) for i, h in enumerate(header)]
    base = list(range(keep))
    groups: list[list[int]] = []
    current = list(base)
    used = 1 + sum(widths[i] for i in base)
    for i in range(keep, len(header)):
        if current != base and used + widths[i] > width:
            groups.append(current)
            current, used = list(base), 1 + sum(widths[j] for j in base)
        current.append(i)
        used += widths[i]
    groups.append(current)
    return groups


def _rich_tables(
    title: str, header: Row, rows: list[Row], *, width: int, keep: int = 1, text_cols: int = 1
) -> list[RenderableType]:
    out: list[RenderableType] = []
    for n, cols in enumerate(fit_columns(header, rows, keep, width)):
        t = Table(
            title=title if n == 0 else f"{title} (continued)",
            title_justify="left",
            header_style="bold",
        )
        for i in cols:
            t.add_column(header[i], justify="left" if i < text_cols else "right", no_wrap=True)
        for r in rows:
            t.add_row(*(Text(r[i]) for i in cols))  # cells are text, never markup
        out.append(t)
    return out


def _why_table(header: Row, rows: list[Row]) -> Table:
    """Reasons are prose: that column folds, the others stay whole."""
    t = Table(title="Why (errors and zeros)", title_justify="left", header_style="bold")
    for i, h in enumerate(header):
        t.add_column(h, no_wrap=i < 3, overflow="fold")
    for r in rows:
        t.add_row(*(Text(c) for c in r))
    return t


def render_rich(report: Report, width: int = 160) -> RenderableType:
    parts: list[RenderableType] = []
    parts += _rich_tables("Results", *results_rows(report), width=width, text_cols=2)
    parts += _rich_tables("By task", *task_rows(report), width=width)
    if (b := breakdown_rows(report)) is not None:
        parts += _rich_tables(f"By {report.by}", *b, width=width)
    if (st := step_rows(report)) is not None:
        parts += _rich_tables("By step", *st, width=width, keep=2, text_cols=2)
    if (c := comparison_rows(report)) is not None:
        parts += _rich_tables("Paired difference (by task)", *c, width=width, keep=2, text_cols=2)
    if (w := reason_rows(report)) is not None:
        parts.append(_why_table(*w))
    parts.append(Text("; ".join(notes(report)), style="dim"))
    return Group(*parts)


def _md_table(header: Row, rows: list[Row]) -> str:
    def esc(s: str) -> str:
        return s.replace("|", "\\|")

    lines = ["| " + " | ".join(esc(h) for h in header) + " |"]
    lines.append("|" + "|".join("---" if i < 2 else "---:" for i in range(len(header))) + "|")
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def render_markdown(report: Report) -> str:
    out = ["## Results", "", _md_table(*results_rows(report))]
    out += ["", "## By task", "", _md_table(*task_rows(report))]
    if (b := breakdown_rows(report)) is not None:
        out += ["", f"## By {report.by}", "", _md_table(*b)]
    if (st := step_rows(report)) is not None:
        out += ["", "## By step", "", _md_table(*st)]
    if (c := comparison_rows(report)) is not None:
        out += ["", "## Paired difference (by task)", "", _md_table(*c)]
    if (w := reason_rows(report)) is not None:
        out += ["", "## Why (errors and zeros)", "", _md_table(*w)]
    out += ["", "_" + "; ".join(notes(report)) + "_", ""]
    return "\n".join(out)
