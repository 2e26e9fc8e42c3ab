"""`crucible report JOB...`: metrics of one or more jobs as a table, Markdown, JSON or HTML."""

from __future__ import annotations

import enum
from pathlib import Path

import typer

from crucible.cli.common import (
    JobsDirOpt,
    JsonOpt,
    console,
    fail,
    print_json,
    warn_skipped,
    write_text,
)
from crucible.errors import ExitCode
from crucible.records.text import terminal_safe


class Format(enum.StrEnum):
    table = "table"
    markdown = "markdown"
    json = "json"
    html = "html"


class ErrorsAs(enum.StrEnum):
    blame = "blame"
    excluded = "excluded"
    zero = "zero"


def register(app: typer.Typer) -> None:
    app.command("report")(report)


def report(
    jobs: list[str] = typer.Argument(
        ..., help="Job ids under the jobs dir, job names, or job folders."
    ),
    jobs_dir: Path | None = JobsDirOpt,
    by: str | None = typer.Option(
        None, "--by", help="Split results by a task metadata key (split, category, source...)."
    ),
    fmt: Format = typer.Option(Format.table, "--format", "-f", help="Output format."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write to this file."),
    errors_as: ErrorsAs = typer.Option(
        ErrorsAs.blame,
        "--errors-as",
        help="Trials without a reward. blame (default): verifier_failed (the attempt broke "
        "its own grading) counts as 0, infrastructure errors are left out; excluded: all "
        "left out of means; zero: all counted as 0.",
    ),
    threshold: float = typer.Option(
        1.0, "--threshold", help="An attempt succeeds (pass@k) when its reward >= this."
    ),
    reward_key: str | None = typer.Option(
        None, "--reward-key", help="Primary reward key (default 'reward', else the first)."
    ),
    cluster_by: str | None = typer.Option(
        None, "--cluster-by", help="Metadata key for the clustered SE (default category, source)."
    ),
    price_table: Path | None = typer.Option(
        None, "--price-table", help="Extra model prices (TOML/JSON) for rollouts without a cost."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Mean ± SE across runs, pass@k, errors and cost per rollout, jobs side by side.

    With two or more jobs, each later job is compared with the first over the
    tasks they share (paired by task: mean difference ± SE, 95% CI).
    """
    from crucible.llm.pricing import PriceTableError, load_price_table
    from crucible.metrics.model import MetricOptions
    from crucible.reports.build import build_report
    from crucible.reports.load import JobNotFound, load_job, resolve_job
    from crucible.store.layout import default_jobs_dir

    if as_json:
        fmt = Format.json
    root = jobs_dir or default_jobs_dir()
    try:
        prices = load_price_table(price_table)
    except PriceTableError as exc:
        fail(ExitCode.USAGE, "usage", str(exc), as_json=as_json)
    train = _train_dirs(jobs, root)
    if train:
        _report_train(train, fmt, output)
        return
    loaded = []
    for ref in jobs:
        try:
            loaded.append(load_job(resolve_job(ref, root), prices))
        except JobNotFound as exc:
            fail(
                ExitCode.NOT_FOUND,
                "not_found",
                str(exc),
                hint="`crucible runs list` shows the jobs; --jobs-dir picks another folder.",
                as_json=as_json,
            )
    warn_skipped([s for job in loaded for s in job.skipped], as_json=as_json)
    options = MetricOptions(
        errors_as=errors_as.value,
        threshold=threshold,
        reward_key=reward_key,
        cluster_by=cluster_by,
    )
    if by in ("task", "name"):
        by = None  # the per-task table is always shown; a split by task is that table
    rep = build_report(loaded, options, by=by)
    if by and all(set(j.breakdown.groups) <= {"(none)"} for j in rep.jobs if j.breakdown):
        keys = sorted({k for j in rep.jobs for t in j.tasks for k in t.metadata})
        fail(
            ExitCode.USAGE,
            "usage",
            f"no task has metadata key {by!r}, so --by {by} splits nothing",
            hint=f"keys these tasks have: {', '.join(keys) or 'none'} (the per-task table "
            "is always shown)",
            as_json=as_json,
        )

    if fmt is Format.json:
        data = rep.model_dump(mode="json")
        if output:
            import json

            output.write_text(json.dumps(data, indent=2) + "\n")
        else:
            print_json(data)
    elif fmt is Format.markdown:
        from crucible.reports.tables import render_markdown

        _emit(render_markdown(rep), output)
    elif fmt is Format.html:
        from crucible.reports.html import render_html

        base = output.parent if output else Path.cwd()
        _emit(render_html(rep, loaded, link_base=base), output)
    else:
        from crucible.reports.tables import render_rich

        if output:
            from crucible.cli.common import SafeConsole

            with output.open("w", encoding="utf-8") as fh:
                SafeConsole(file=fh, width=160, no_color=True).print(render_rich(rep, 160))
        else:
            console.print(render_rich(rep, console.width))
    if output and not as_json:
        console.print(f"[dim]wrote {output}[/]", highlight=False)


def _emit(text: str, output: Path | None) -> None:
    if output:  # a Markdown report is read in a terminal too (`cat`)
        output.write_text(terminal_safe(text), encoding="utf-8")
    else:
        write_text(text if text.endswith("\n") else text + "\n")


def _train_dirs(refs: list[str], root: Path) -> list[Path]:
    """The training runs' folders when every ref names one (a run id or its folder)."""
    from crucible.reports.train_plot import is_train_dir

    dirs = [Path(r) if is_train_dir(Path(r)) else root / r for r in refs]
    ok = all("/" not in r or is_train_dir(Path(r)) for r in refs)
    return dirs if ok and all(is_train_dir(d) for d in dirs) else []


def _report_train(dirs: list[Path], fmt: Format, output: Path | None) -> None:
    """Training runs: reward and components per step (HTML: a chart per run)."""
    from crucible.reports.train_plot import render_train_html, train_summary

    if fmt is Format.html:
        _emit("".join(render_train_html(d) for d in dirs), output)
        return
    data = [train_summary(d) for d in dirs]
    if fmt is Format.json:
        import json

        text = json.dumps({"train_runs": data}, indent=2) + "\n"
        if output:
            output.write_text(text)
        else:
            print_json({"train_runs": data})
        return
    lines = []
    for d in data:
        lines.append(f"{d['run']['id']} ({d['run']['state']}, {d['run']['recipe']})")
        for m in d["reward_per_step"]:
            comps = "  ".join(f"{k} {v:.3f}" for k, v in m["components"].items())
            reward = "-" if m["reward_mean"] is None else f"{m['reward_mean']:.3f}"
            lines.append(f"  step {m['step']:<5} reward {reward}  {comps}".rstrip())
    _emit(terminal_safe("\n".join(lines)) + "\n", output)
