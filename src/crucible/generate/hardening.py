"""Hardening with lineage: which easy task to harden next, with which operator, and the
lineage keys every generated task carries in task.toml's [metadata].

The keys (flat, read by `crucible dataset split`): category, mode, root, parent,
operator, generation (int), source (the seed or workflow id in mine/issues mode,
else the root's name). A lineage stops after MAX_FAILED failed hardenings in a
row; a child deeper than the depth cap is never asked for.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from crucible.generate.state import GenState, Lineage, ProposalState

OPERATORS = ("add_contract", "remove_hint", "add_edge_cases", "compose")
MAX_DEPTH = 3
MAX_FAILED = 2
LINEAGE_KEYS = ("category", "mode", "root", "parent", "operator", "generation", "source")
# A child that lands here hardened its parent; anything else is a failed hardening.
HARDER = frozenset({"accepted", "hard", "frontier"})


def next_parent(state: GenState, max_depth: int = MAX_DEPTH) -> ProposalState | None:
    """The oldest too-easy task not yet hardened whose lineage still runs."""
    for p in state.proposals:
        if p.outcome != "easy" or p.hardened or p.generation >= max_depth:
            continue
        lineage = state.lineages.get(p.root)
        if lineage is not None and lineage.stopped:
            continue
        return p
    return None


def operator_for(parent: ProposalState, state: GenState) -> str:
    tried = sum(1 for p in state.proposals if p.root == parent.root and p.parent is not None)
    return OPERATORS[tried % len(OPERATORS)]


def record_child(state: GenState, child: ProposalState, max_failed: int = MAX_FAILED) -> None:
    """After a child's outcome: its lineage's count of failed hardenings, and its stop."""
    if child.parent is None:
        return
    lineage = state.lineages.setdefault(child.root, Lineage(root=child.root))
    if child.outcome in HARDER:
        lineage.failed_hardenings = 0
    else:
        lineage.failed_hardenings += 1
        if lineage.failed_hardenings >= max_failed:
            lineage.stopped = True


def under_covered(state: GenState) -> list[str]:
    cov = state.coverage()
    low = min(cov.values(), default=0)
    return [c for c, n in cov.items() if n == low]


def _toml_value(value: object) -> str:
    return str(value) if isinstance(value, int) else json.dumps(str(value))


def set_metadata(task_toml: Path, values: dict[str, object]) -> None:
    """Write `values` as flat keys of [metadata], replacing those keys' old lines.
    Raises ValueError when the result does not parse back to them."""
    keys = "|".join(re.escape(k) for k in values)
    out: list[str] = []
    header: int | None = None
    in_meta = False
    for line in task_toml.read_text().splitlines():
        s = line.strip()
        if s.startswith("["):
            in_meta = s.replace(" ", "") == "[metadata]"
            if in_meta:
                header = len(out)
        elif in_meta and re.match(rf"^({keys})\s*=", s):
            continue
        out.append(line)
    new = [f"{k} = {_toml_value(v)}" for k, v in values.items()]
    if header is None:
        out += ["", "[metadata]", *new]
    else:
        out[header + 1 : header + 1] = new
    text = "\n".join(out) + "\n"
    meta = tomllib.loads(text).get("metadata", {})
    if any(meta.get(k) != v for k, v in values.items()):
        raise ValueError("[metadata] does not read back as written")
    task_toml.write_text(text)


def lineage_values(p: ProposalState, mode: str) -> dict[str, object]:
    return {
        "category": p.category,
        "mode": mode,
        "root": p.root,
        "parent": p.parent or "",
        "operator": p.operator or "",
        "generation": p.generation,
        "source": p.source,
    }
