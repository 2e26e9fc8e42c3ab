"""`crucible generate report DIR`: the figures of a generation run, from its state.json.

Funnel (proposed -> valid -> in band -> accepted, valid yield and in-band yield
apart, as PROPEL reports them), rejections by reason, coverage and a histogram
per category, contracts per task (declared and detected), the share of
single-function references, the pass@k distribution (unbiased estimates), hardening
success by operator, tokens and cost per accepted task, and the collapse alarm:
reference solutions that shrink across rounds (lines and AST depth).
"""

from __future__ import annotations

import ast
import html
import json
from pathlib import Path
from typing import Any

from crucible.generate.state import GenState, ProposalState
from crucible.llm.pricing import cost_usd

COLLAPSE_SHRINK = 0.7  # the last round's mean below this share of the first's
BINS = ((0.0, 0.0), (0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0), (1.0, 1.0))


def solution_shape(task_dir: Path) -> tuple[int, int]:
    """(lines, AST depth) of the reference solution, failure cases aside; shell
    scripts count their non-blank, non-comment lines and depth 1."""
    from crucible.generate.checks import solution_texts

    lines, depth = 0, 0
    for text in solution_texts(task_dir):
        body = [ln for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
        lines += len(body)
        try:
            depth = max(depth, _depth(ast.parse(text)))
        except (SyntaxError, ValueError, RecursionError):
            depth = max(depth, 1 if body else 0)
    return lines, depth


def _depth(node: ast.AST) -> int:
    kids = list(ast.iter_child_nodes(node))
    return 1 + max((_depth(k) for k in kids), default=0)


def _valid(p: ProposalState) -> bool:
    return p.phase in ("proven", "rated", "done") and p.outcome != "rejected"


def _bin(x: float) -> str:
    for lo, hi in BINS:
        if (lo == hi == x) or (lo < x <= hi and lo != hi and not (hi == 1.0 and x == 1.0)):
            return f"{lo:g}" if lo == hi else f"({lo:g},{hi:g}]"
    return "(0.75,1)"


def build(
    state: GenState, *, price_model: str | None = None, min_in_band: int = 1
) -> dict[str, Any]:
    ps = [p for p in state.proposals if p.phase == "done" or _valid(p)]
    valid = [p for p in ps if _valid(p)]
    accepted = [p for p in ps if p.outcome == "accepted"]
    rejected: dict[str, int] = {}
    for p in ps:
        if p.outcome == "rejected":
            rejected[p.reason or "?"] = rejected.get(p.reason or "?", 0) + 1
    coverage = state.coverage()
    hist: dict[str, dict[str, int]] = {c: {} for c in state.categories}
    for p in ps:
        h = hist.setdefault(p.category, {})
        h[p.outcome or p.phase] = h.get(p.outcome or p.phase, 0) + 1
    passk: dict[str, int] = {}
    for p in valid:
        if p.pass_at_1 is not None:
            passk[_bin(p.pass_at_1)] = passk.get(_bin(p.pass_at_1), 0) + 1
    ops: dict[str, dict[str, int]] = {}
    for p in ps:
        if p.operator:
            o = ops.setdefault(p.operator, {"children": 0, "in_band": 0, "harder": 0})
            o["children"] += 1
            o["in_band"] += p.outcome == "accepted"
            o["harder"] += p.outcome in ("accepted", "hard", "frontier")
    setter_in = sum(p.setter_usage.input_tokens for p in state.proposals)
    setter_out = sum(p.setter_usage.output_tokens for p in state.proposals)
    solver_in = sum(p.solver_usage.input_tokens for p in state.proposals)
    solver_out = sum(p.solver_usage.output_tokens for p in state.proposals)
    cost = sum((cost_usd(state.setter_model, p.setter_usage) or 0.0) + (p.solver_cost_usd or 0.0)
               for p in state.proposals)  # fmt: skip
    out: dict[str, Any] = {
        "schema_version": 1,
        "run_id": state.run_id,
        "mode": state.mode,
        "band": list(state.band),
        "k": state.k,
        "finished": state.finished,
        "proposed": len(ps),
        "valid": len(valid),
        "in_band": len(accepted),
        "accepted": len(accepted),
        "valid_yield": len(valid) / len(ps) if ps else None,
        "in_band_yield": len(accepted) / len(valid) if valid else None,
        "rejected": dict(sorted(rejected.items())),
        "outcomes": {
            o: sum(p.outcome == o for p in ps)
            for o in ("accepted", "easy", "hard", "frontier", "suspect", "rejected")
        },
        "coverage": coverage,
        "categories_covered": sum(n >= min_in_band for n in coverage.values()),
        "categories_total": len(coverage),
        "min_in_band": min_in_band,
        "histogram": hist,
        "contracts_declared_mean": _mean([len(p.declared) for p in valid]),
        "contracts_detected_mean": _mean([len(p.detected) for p in valid]),
        "single_function_share": _mean([float(len(p.detected) <= 1) for p in valid]),
        "pass_at_1": passk,
        "hardening": ops,
        "tokens": {
            "setter_input": setter_in,
            "setter_output": setter_out,
            "solver_input": solver_in,
            "solver_output": solver_out,
        },
        "cost_usd": cost,
        "cost_per_accepted_usd": cost / len(accepted) if accepted else None,
        "collapse": collapse(valid, max(1, len(state.categories))),
    }
    if price_model is not None:
        from crucible.records.usage import Usage

        total = Usage(input_tokens=setter_in + solver_in, output_tokens=setter_out + solver_out)
        priced = cost_usd(price_model, total)
        out["priced"] = {
            "model": price_model,
            "cost_usd": priced,
            "per_accepted_usd": priced / len(accepted) if priced is not None and accepted else None,
        }
    return out


def _mean(xs: list[float] | list[int]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def collapse(valid: list[ProposalState], round_size: int) -> dict[str, Any]:
    rounds = [valid[i : i + round_size] for i in range(0, len(valid), round_size)]
    lines = [_mean([p.solution_lines for p in r]) or 0.0 for r in rounds]
    depth = [_mean([p.solution_depth for p in r]) or 0.0 for r in rounds]
    alarm = (
        len(rounds) >= 2
        and lines[0] > 0
        and lines[-1] < COLLAPSE_SHRINK * lines[0]
        and depth[-1] < COLLAPSE_SHRINK * depth[0]
    )
    return {"alarm": alarm, "round_size": round_size, "lines": lines, "depth": depth}


def render_text(r: dict[str, Any]) -> str:
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.0%}"

    lines = [
        f"generation run {r['run_id']} ({r['mode']}, band {r['band'][0]:g}-{r['band'][1]:g}, "
        f"k={r['k']}{', finished' if r['finished'] else ''})",
        f"funnel: proposed {r['proposed']} -> valid {r['valid']} ({pct(r['valid_yield'])}) -> "
        f"in band {r['in_band']} ({pct(r['in_band_yield'])} of valid) -> accepted {r['accepted']}",
        "outcomes: " + ", ".join(f"{k} {v}" for k, v in r["outcomes"].items()),
        "rejected: " + (", ".join(f"{k} {v}" for k, v in r["rejected"].items()) or "none"),
        f"coverage: {r['categories_covered']}/{r['categories_total']} categories with >= "
        f"{r['min_in_band']} in-band task(s)",
    ]
    for cat, n in r["coverage"].items():
        h = ", ".join(f"{k} {v}" for k, v in sorted(r["histogram"].get(cat, {}).items()))
        lines.append(f"  {cat:<24} {n:>3} accepted   [{h}]")
    fmt = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
    lines += [
        f"contracts per task: declared {fmt(r['contracts_declared_mean'])}, detected "
        f"{fmt(r['contracts_detected_mean'])}; single-function share {pct(r['single_function_share'])}",
        "pass@1 (unbiased) of valid tasks: "
        + (", ".join(f"{k}: {v}" for k, v in sorted(r["pass_at_1"].items())) or "none"),
        "hardening by operator: "
        + (
            ", ".join(
                f"{op} {v['in_band']}/{v['children']} in band" for op, v in r["hardening"].items()
            )
            or "none"
        ),
        f"tokens: setter {r['tokens']['setter_input']}+{r['tokens']['setter_output']}, solver "
        f"{r['tokens']['solver_input']}+{r['tokens']['solver_output']} (input+output)",
        f"cost: ${r['cost_usd']:.4f} recorded; per accepted task "
        + ("-" if r["cost_per_accepted_usd"] is None else f"${r['cost_per_accepted_usd']:.4f}"),
    ]
    if "priced" in r:
        pr = r["priced"]
        per = "-" if pr["per_accepted_usd"] is None else f"${pr['per_accepted_usd']:.4f}"
        total = "unknown price" if pr["cost_usd"] is None else f"${pr['cost_usd']:.4f}"
        lines.append(f"at {pr['model']} list price: {total}; per accepted task {per}")
    c = r["collapse"]
    lines.append(
        ("COLLAPSE ALARM: " if c["alarm"] else "collapse: none; ")
        + "solution lines by round "
        + " ".join(f"{x:.1f}" for x in c["lines"])
        + ", AST depth "
        + " ".join(f"{x:.1f}" for x in c["depth"])
    )
    return "\n".join(lines) + "\n"


def render_html(r: dict[str, Any]) -> str:
    body = html.escape(render_text(r))
    data = html.escape(json.dumps(r, indent=1))
    return (
        "<!doctype html><meta charset=utf-8><title>generation report</title>"
        f"<h1>Generation run {html.escape(r['run_id'])}</h1><pre>{body}</pre>"
        f"<details><summary>JSON</summary><pre>{data}</pre></details>\n"
    )
