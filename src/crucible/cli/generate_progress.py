"""Live progress of `crucible generate`: proposals, accepted, rejected by reason, coverage."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.live import Live
from rich.markup import escape
from rich.table import Table

from crucible.cli.common import err_console

if TYPE_CHECKING:
    from crucible.generate.loop import Generator
    from crucible.generate.state import GenState


def _table(state: GenState, last: str) -> Table:
    from crucible.generate.report import build

    r = build(state)
    t = Table(show_header=False, show_edge=False, pad_edge=False)
    t.add_row("proposals", f"{r['proposed']} (valid {r['valid']}, in band {r['in_band']})")
    t.add_row("accepted", str(r["accepted"]))
    t.add_row("rejected", ", ".join(f"{k} {v}" for k, v in r["rejected"].items()) or "-")
    cov = r["coverage"]
    t.add_row("coverage", f"{r['categories_covered']}/{r['categories_total']}: "
              + " ".join(f"{c}={n}" for c, n in cov.items() if n))  # fmt: skip
    t.add_row("now", escape(last[:120]))
    return t


async def run_with_progress(gen: Generator, *, live: bool, quiet: bool) -> dict[str, Any]:
    from crucible.generate.report import build

    if live:
        with Live(_table(gen.state, "starting"), console=err_console, transient=False) as view:
            gen.on_event = lambda state, msg: view.update(_table(state, msg))
            state = await gen.run()
    else:
        if not quiet:
            gen.on_event = lambda state, msg: err_console.print(escape(msg), highlight=False)
        state = await gen.run()
    return build(state)
