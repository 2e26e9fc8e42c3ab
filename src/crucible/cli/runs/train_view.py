"""`crucible runs get` of a training run: state, step, reward per step, checkpoints."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape

from crucible.cli.common import console, fail, print_json
from crucible.cli.runs.common import fmt_reward, fmt_time, status_style
from crucible.errors import ExitCode

if TYPE_CHECKING:
    from crucible.store.queries import JobRecord


def print_train(rec: JobRecord, *, verbose: bool, as_json: bool) -> None:
    from crucible.store.job_views import resume_hint
    from crucible.store.train_runs import train_detail

    try:
        d = train_detail(rec.path, status=rec.status, interrupted=rec.interrupted,
                         hint=resume_hint(rec.job_id, rec.kind) if rec.interrupted else None,
                         verbose=verbose)  # fmt: skip
    except (OSError, ValueError) as exc:
        fail(ExitCode.NOT_FOUND, "not_found", f"training run {rec.job_id}: {exc}",
             as_json=as_json)  # fmt: skip
    if as_json:
        print_json(d.model_dump(mode="json"))
        return
    style = status_style(d.status)
    console.print(f"[bold]{d.run_id}[/]  train  [{style}]{d.status}[/]", highlight=False)
    if d.hint:
        console.print(f"  [yellow]{d.hint}[/]", highlight=False)
    console.print(f"  recipe {d.recipe}  model {d.model}" + ("  (smoke)" if d.smoke else ""),
                  highlight=False)  # fmt: skip
    console.print(f"  dataset {escape(d.dataset)}  reward {escape(d.reward)}", highlight=False)
    console.print(f"  step {d.step}/{d.total_steps or '?'}  reward {fmt_reward(d.reward_mean)}"
                  + "".join(f"  {escape(k)} {v:.3f}" for k, v in d.components.items()),
                  highlight=False)  # fmt: skip
    console.print(f"  created {fmt_time(d.created_at)}  finished {fmt_time(d.finished_at)}  "
                  f"samples {d.n_samples}", highlight=False)  # fmt: skip
    for c in d.checkpoints:
        console.print(f"  checkpoint step {c.step}: {escape(c.path)}", highlight=False)
    if d.error:
        console.print("  error: " + escape(d.error.strip().splitlines()[-1]), style="red",
                      highlight=False)  # fmt: skip
    if verbose and d.reward_per_step:
        console.print("  reward per step:")
        for p in d.reward_per_step:
            comps = "".join(f"  {escape(k)} {v:.3f}" for k, v in p.components.items())
            secs = f"  {p.step_time_s:.2f}s" if p.step_time_s is not None else ""
            console.print(f"    step {p.step:<5} {fmt_reward(p.reward_mean)}{comps}{secs}",
                          highlight=False)  # fmt: skip
