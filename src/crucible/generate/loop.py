"""The generation loop: ask the setter, check, prove, rate, harden; resumable at every phase.

DIR/
  state.json                 the run's state (state.py), rewritten atomically per phase
  job.json result.json job.log   the run as `crucible runs list/get/logs` see it (runrecord.py)
  proposals/<name>/          reply.json, task/ (as written), jobs/ (oracle, nop, fail-*, solve*)
  tasks/<name>/              accepted: proven and in the band (plain Harbor task folders)
  easy/ hard/ frontier/ suspect/<name>/   proven, out of the band (kept apart)
  rejected/<name>/           reason.json and the evidence (the proposal's folder, moved)
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crucible.generate import hardening
from crucible.generate.archive import ArchiveEntry, entry_of, find_duplicate
from crucible.generate.checks import Rejection, declared_contracts, reached_contracts, static_checks
from crucible.generate.files import HostilePath, failure_names, read_files, write_files
from crucible.generate.proofs import Where, prove
from crucible.generate.protocol import harden_prompt, propose_prompt
from crucible.generate.report import solution_shape
from crucible.generate.runrecord import RunRecord
from crucible.generate.setter import Setter, SetterSpec
from crucible.generate.solver import SolverSpec, rate
from crucible.generate.state import GenState, ProposalState, load_state, save_state
from crucible.llm.pricing import cost_usd

PLACES = {"accepted": "tasks", "easy": "easy", "hard": "hard", "frontier": "frontier",
          "suspect": "suspect"}  # fmt: skip


@dataclass
class GenConfig:
    out: Path
    setter: SetterSpec
    solver: SolverSpec
    strong: SolverSpec | None = None
    mode: str = "selfplay"
    categories: list[str] = field(default_factory=list)
    max_tasks: int = 10
    max_proposals: int | None = None  # default 3 x max_tasks
    max_tokens: int | None = None
    max_cost: float | None = None
    band: tuple[float, float] = (0.2, 0.7)
    k: int = 4
    env: str = "local"
    executor: str = "local"  # where the checks' trials run (engine/executor.py)
    ray_address: str | None = None
    shared_store: str | None = None
    source: Path | None = None
    domain: str | None = None
    max_depth: int = hardening.MAX_DEPTH
    jobs_dir: Path | None = None  # where the run is recorded for `crucible runs`
    concurrency: int = 1  # proposals checked, proven and rated at once

    @property
    def proposal_cap(self) -> int:
        return self.max_proposals if self.max_proposals is not None else 3 * self.max_tasks

    def where(self) -> Where:
        return Where(self.env, self.executor, self.ray_address, self.shared_store)


Event = Callable[[GenState, str], None]


class Generator:
    def __init__(self, cfg: GenConfig, on_event: Event | None = None) -> None:
        self.cfg = cfg
        self.on_event = on_event or (lambda state, msg: None)
        self.out = cfg.out
        state = load_state(self.out)
        self.resumed = state is not None
        self.state = state or GenState(
            run_id=f"gen-{uuid.uuid4().hex[:10]}",
            mode=cfg.mode,
            categories=cfg.categories,
            band=cfg.band,
            k=cfg.k,
            setter_model=cfg.setter.model,
            solver_model=cfg.solver.model,
        )
        self.record = RunRecord(
            self.out, self.state, jobs_dir=cfg.jobs_dir, solver_agent=cfg.solver.agent, env=cfg.env
        )
        self._seeds: list[Any] | None = None

    # -- the run --------------------------------------------------------------
    async def run(self) -> GenState:
        self.out.mkdir(parents=True, exist_ok=True)
        save_state(self.out, self.state)
        self.record.start(self.cfg.proposal_cap)
        setter = Setter(self.cfg.setter)
        pending: set[asyncio.Task[None]] = set()
        try:
            for p in list(self.state.proposals):
                if p.phase != "done":
                    self._log(f"resuming {p.name} at {p.phase}")
                    pending.add(asyncio.create_task(self.advance(p)))
            # The setter is asked one request at a time; up to `concurrency` proposals are
            # checked, proven and rated at once (each phase's state write is synchronous).
            while True:
                why = self._stop_reason(in_flight=len(pending))
                if why is None and len(pending) < self.cfg.concurrency:
                    asked = await self.ask(setter)
                    if asked is not None:
                        pending.add(asyncio.create_task(self.advance(asked)))
                    continue
                if not pending:
                    break
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()
            self.state.finished, self.state.stop_reason = True, why
            save_state(self.out, self.state)
            self._log(f"finished: {why}")
            self.record.finish(self.state, "completed")
        except BaseException:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            self.record.finish(self.state, "failed")
            raise
        finally:
            await setter.aclose()
        return self.state

    def _stop_reason(self, in_flight: int = 0) -> str | None:
        """Why no more requests go to the setter now (None: ask); proposals in flight
        count towards --max-tasks until they are settled."""
        st, cfg = self.state, self.cfg
        if sum(p.outcome == "accepted" for p in st.proposals) + in_flight >= cfg.max_tasks:
            return "max_tasks"
        if len(st.proposals) >= cfg.proposal_cap:
            return "max_proposals"
        tokens = sum(
            p.setter_usage.total_tokens + p.solver_usage.total_tokens for p in st.proposals
        )
        if cfg.max_tokens is not None and tokens >= cfg.max_tokens:
            return "max_tokens"
        if cfg.max_cost is not None and self.cost() >= cfg.max_cost:
            return "max_cost"
        if self._next_request() is None:
            return "nothing_left"
        return None

    def cost(self) -> float:
        total = 0.0
        for p in self.state.proposals:
            total += cost_usd(self.state.setter_model, p.setter_usage) or 0.0
            total += p.solver_cost_usd or 0.0
        return total

    # -- what to ask next -------------------------------------------------------
    def _seed_list(self) -> list[Any]:
        if self._seeds is None:
            if self.cfg.mode == "selfplay":
                self._seeds = []
            else:
                from crucible.generate.seeds import load_seeds

                self._seeds = list(load_seeds(self.cfg.mode, self.cfg.source, self.cfg.domain))
        return self._seeds

    def _next_request(self) -> tuple[str, Any] | None:
        parent = hardening.next_parent(self.state, self.cfg.max_depth)
        if parent is not None:
            return ("harden", parent)
        if self.cfg.mode == "selfplay":
            return ("propose", None)
        unused = [s for s in self._seed_list() if s.id not in self.state.seeds_used]
        return ("propose", unused[0]) if unused else None

    def _category(self) -> str:
        cov = self.state.coverage()
        tried = {c: sum(p.category == c for p in self.state.proposals) for c in cov}
        return min(self.state.categories, key=lambda c: (cov[c], tried[c]))

    async def ask(self, setter: Setter) -> ProposalState | None:
        request = self._next_request()
        assert request is not None
        kind, what = request
        st = self.state
        if kind == "harden":
            parent: ProposalState = what
            operator = hardening.operator_for(parent, st)
            parent_files = read_files(self._task_dir(parent))
            prompt = harden_prompt(parent_files, parent.message or "", hardening.under_covered(st),
                                   operator)  # fmt: skip
            category, seed = parent.category, None
        else:
            seed = what
            category = self._category()
            prompt = propose_prompt(category, st.coverage(), seed.setter_brief() if seed else None)
        name = f"{_slug(category)}-{st.seq:03d}"
        work = self.out / "proposals" / name
        shutil.rmtree(work, ignore_errors=True)  # a kill before the state named it
        work.mkdir(parents=True)
        self._log(f"asking the setter for {name} ({kind} {category})")
        reply = await setter.ask(prompt)
        (work / "reply.json").write_text(json.dumps(reply.raw | {"prompt": prompt}, indent=1))
        p = ProposalState(
            name=name,
            category=reply.proposal.category if reply.proposal else category,
            root=name,
            source=seed.id if seed is not None else name,
            setter_usage=reply.usage,
        )
        if kind == "harden":
            parent.hardened = True
            p.root, p.parent, p.operator = parent.root, parent.name, operator
            p.generation, p.source = parent.generation + 1, parent.source
        if seed is not None:
            st.seeds_used.append(seed.id)
        st.seq += 1
        st.proposals.append(p)
        rejection: Rejection | None = None
        if reply.proposal is None:
            rejection = Rejection(reason="protocol_error", message=reply.error or "no proposal")
        else:
            try:
                write_files(work / "task", reply.proposal.files)
                hardening.set_metadata(work / "task" / "task.toml",
                                       hardening.lineage_values(p, st.mode))  # fmt: skip
            except HostilePath as exc:
                rejection = Rejection(reason="hostile_path", message=str(exc)[:2000])
            except (OSError, ValueError) as exc:
                rejection = Rejection(reason="invalid_schema", message=str(exc)[:2000])
        if rejection is not None:
            self._reject(p, rejection)
        save_state(self.out, st)
        return p if p.phase != "done" else None

    # -- one proposal's phases ----------------------------------------------------
    def _work(self, p: ProposalState) -> Path:
        return self.out / "proposals" / p.name

    def _task_dir(self, p: ProposalState) -> Path:
        if p.phase == "done" and p.outcome in PLACES:
            return self.out / PLACES[p.outcome] / p.name
        return self._work(p) / "task"

    def _archive(self, me: ProposalState) -> list[ArchiveEntry]:
        out = []
        for p in self.state.proposals:
            if p is me or p.outcome == "rejected" or p.phase == "proposed":
                continue
            task = self._task_dir(p)
            if task.is_dir():
                out.append(entry_of(p.name, task))
        return out

    async def advance(self, p: ProposalState) -> None:
        cfg, st = self.cfg, self.state
        task, work = self._task_dir(p), self._work(p)
        if p.phase == "proposed":
            files = read_files(task)
            rej = static_checks(task, p.category, st.categories, failure_names(files))
            if rej is None:
                rej = find_duplicate(entry_of(p.name, task), self._archive(p))
            if rej is not None:
                return self._reject(p, rej)
            p.declared, p.detected = declared_contracts(task), _safe_reached(task)
            p.solution_lines, p.solution_depth = solution_shape(task)
            self._phase(p, "checked")
        if p.phase == "checked":
            self._log(f"proving {p.name}")
            failures = failure_names(read_files(task))
            rej = await prove(task, work, failures, st.band[0], where=cfg.where())
            if rej is not None:
                return self._reject(p, rej)
            self._phase(p, "proven")
        if p.phase == "proven":
            self._log(f"rating {p.name} with the solver (k={st.k})")
            r = await rate(task, work / "jobs", cfg.solver, st.k, st.band, where=cfg.where())
            p.n_attempts, p.n_solved = r.n, r.c
            p.solver_usage, p.solver_cost_usd = r.usage, r.cost_usd
            p.pass_at_1, p.pass_at_k = r.pass_at(1), r.pass_at(st.k)
            p.message = r.approach
            rate_ = r.c / r.n if r.n else 0.0
            lo, hi = st.band
            if r.n == 0:
                return self._reject(
                    p, Rejection(reason="solver_error", message="no attempt graded")
                )
            if r.c == 0 and cfg.strong is not None:
                strong = await rate(task, work / "jobs", cfg.strong, st.k, st.band,
                                    where=cfg.where(), job="strong")  # fmt: skip
                p.strong_solved = strong.c > 0
                p.solver_usage = p.solver_usage + strong.usage
                p.outcome = "frontier" if strong.c > 0 else "suspect"
            elif lo <= rate_ <= hi:
                p.outcome = "accepted"
            elif rate_ > hi:
                p.outcome = "easy"
            else:
                p.outcome = "hard"
            self._phase(p, "rated")
        if p.phase == "rated":
            assert p.outcome is not None
            dest = self.out / PLACES[p.outcome] / p.name
            if not dest.exists():
                tmp = dest.with_name(f".{p.name}.tmp")
                shutil.rmtree(tmp, ignore_errors=True)
                shutil.copytree(work / "task", tmp, symlinks=True)
                tmp.rename(dest)
            hardening.record_child(st, p)
            self._log(f"{p.name}: {p.outcome} ({p.n_solved}/{p.n_attempts} solved)")
            self._phase(p, "done")

    def _phase(self, p: ProposalState, phase: str) -> None:
        p.phase = phase  # type: ignore[assignment]
        save_state(self.out, self.state)
        self.record.update(self.state)
        self.on_event(self.state, f"{p.name} {phase}")

    def _reject(self, p: ProposalState, rej: Rejection) -> None:
        p.outcome, p.reason, p.message = "rejected", rej.reason, rej.message
        dest = self.out / "rejected" / p.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        work = self._work(p)
        if work.exists() and not dest.exists():
            work.rename(dest)
        dest.mkdir(exist_ok=True)
        (dest / "reason.json").write_text(json.dumps(rej.model_dump(), indent=1))
        hardening.record_child(self.state, p)
        self._log(f"{p.name}: rejected ({rej.reason}): {rej.message[:200]}")
        self._phase(p, "done")

    def _log(self, message: str) -> None:
        self.record.log(message)
        self.on_event(self.state, message)


def _safe_reached(task: Path) -> list[str]:
    try:
        return reached_contracts(task)
    except Exception:
        return []


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "task"
