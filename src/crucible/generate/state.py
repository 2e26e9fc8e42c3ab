"""The generation run's state on disk (DIR/state.json), written atomically after every phase.

A run killed at any point (kill -9 included) resumes from it: each proposal's
phase is recorded, its files and the setter's reply are on disk before the phase
that names them, and its sandbox jobs resume by name (engine/launch.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from crucible.records.trial import utcnow
from crucible.records.usage import Usage

STATE = "state.json"
SCHEMA_VERSION = 1

# proposed: files written; checked: static checks passed; proven: oracle, nop and
# failure cases passed; rated: the solver's attempts counted; done: outcome final.
Phase = Literal["proposed", "checked", "proven", "rated", "done"]
# Where a finished proposal went: tasks/ (in band), easy/, hard/, frontier/, suspect/, rejected/.
Outcome = Literal["accepted", "easy", "hard", "frontier", "suspect", "rejected"]


class ProposalState(BaseModel):
    name: str
    category: str
    phase: Phase = "proposed"
    outcome: Outcome | None = None
    reason: str | None = None  # of a rejection
    message: str | None = None
    root: str
    parent: str | None = None
    operator: str | None = None
    generation: int = 0
    source: str
    setter_usage: Usage = Field(default_factory=Usage)
    solver_usage: Usage = Field(default_factory=Usage)
    solver_cost_usd: float | None = None
    n_attempts: int = 0
    n_solved: int = 0
    strong_solved: bool | None = None
    pass_at_1: float | None = None
    pass_at_k: float | None = None
    declared: list[str] = Field(default_factory=list)
    detected: list[str] = Field(default_factory=list)
    solution_lines: int = 0
    solution_depth: int = 0
    hardened: bool = False  # a child was asked for


class Lineage(BaseModel):
    root: str
    failed_hardenings: int = 0
    stopped: bool = False


class GenState(BaseModel):
    schema_version: int = SCHEMA_VERSION
    run_id: str
    mode: str
    created_at: str = Field(default_factory=lambda: utcnow().isoformat())
    categories: list[str]
    band: tuple[float, float]
    k: int
    setter_model: str
    solver_model: str | None = None
    proposals: list[ProposalState] = Field(default_factory=list)
    lineages: dict[str, Lineage] = Field(default_factory=dict)
    seq: int = 0  # names handed out so far
    seeds_used: list[str] = Field(default_factory=list)
    finished: bool = False
    stop_reason: str | None = None

    def get(self, name: str) -> ProposalState | None:
        return next((p for p in self.proposals if p.name == name), None)

    def coverage(self) -> dict[str, int]:
        out = dict.fromkeys(self.categories, 0)
        for p in self.proposals:
            if p.outcome == "accepted" and p.category in out:
                out[p.category] += 1
        return out


def load_state(out_dir: Path) -> GenState | None:
    path = out_dir / STATE
    if not path.exists():
        return None
    return GenState.model_validate(json.loads(path.read_text()))


def save_state(out_dir: Path, state: GenState) -> None:
    """Write via a temp file, fsync and rename: a kill leaves the old or the new state."""
    path = out_dir / STATE
    tmp = path.with_name(f".{STATE}.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(state.model_dump_json(indent=1))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
