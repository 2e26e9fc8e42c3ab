"""The service's parts put together: sessions and the warm pool beside the grades.

One GradeService holds the job, the concurrency budget (`slots`, -c) and the start
gate; the SessionManager is made from it (the same slots, gate, job folder and tasks),
so a session's sandbox counts in the budget grades use, and its trial is indexed with
the grades' (`record_trial`). With `--warm N` the provider both draw from is a
PooledProvider around the planned one, filled at start with the sandboxes a grade and
a session of each task ask for, and closed (pooled sandboxes first) at shutdown.
"""

from __future__ import annotations

from dataclasses import dataclass

from crucible.agents.submission import SubmissionAgent
from crucible.engine.spec import build_spec
from crucible.records.submission import TextSubmission
from crucible.sandboxes.base import Provider, SandboxSpec
from crucible.serve.common import GradePlan
from crucible.serve.metrics import exposition
from crucible.serve.pool import PooledProvider
from crucible.serve.service import GradeService
from crucible.serve.session_ops import SessionLimits
from crucible.serve.sessions import DEFAULT_IDLE_TIMEOUT_S, DEFAULT_MAX_SESSIONS, SessionManager


@dataclass
class SessionOptions:
    max_sessions: int = DEFAULT_MAX_SESSIONS
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    limits: SessionLimits | None = None
    warm: int = 0  # sandboxes kept started per distinct sandbox spec


def pooled(provider: Provider, warm: int) -> Provider:
    """The provider grades and sessions draw from: a warm pool around it when asked."""
    return PooledProvider(provider, warm) if warm > 0 else provider


def session_manager(service: GradeService, opts: SessionOptions) -> SessionManager:
    """The service's sessions, closed by its close() before the sandboxes drain."""
    manager = SessionManager(
        service.by_name,
        service.provider,
        job_dir=service.job_dir,
        job_id=service.cfg.job_id,
        slots=service.slots,
        max_sessions=opts.max_sessions,
        idle_timeout_s=opts.idle_timeout_s,
        limits=opts.limits,
        start_gate=service.start_gate,
        env_params=service.cfg.env_params,
        on_result=service.record_trial,
    )
    service.on_close.insert(0, manager.aclose)
    return manager


def grade_specs(service: GradeService) -> list[SandboxSpec]:
    """The sandbox a grade of each task asks for."""
    agent = SubmissionAgent(TextSubmission(text=""))
    return [
        build_spec(
            GradePlan(
                task=t,
                attempt=0,
                job_id=service.cfg.job_id,
                tampered=service.cfg.tampered,
                name="warm",
            ),
            agent,
            service.cfg.env_params,
        )
        for t in service.by_name.values()
    ]


def warm_up(service: GradeService, manager: SessionManager) -> None:
    """Start filling the pool (in the background) for grades and sessions of every task;
    the pool's fills pass the service's start gate (--create-rate, --max-starting)."""
    pool = service.provider
    if not isinstance(pool, PooledProvider):
        return
    pool.gate = service.start_gate
    for spec in [*grade_specs(service), *manager.specs()]:
        pool.warm(spec)  # one pool per distinct spec: a grade's and a session's may be one


def parts_metrics(service: GradeService, manager: SessionManager) -> str:
    """/metrics for sessions and the warm pool."""
    out = [
        exposition("sessions", "gauge", "Open sessions.", [("", len(manager.live))]),
        exposition(
            "sessions_waiting",
            "gauge",
            "Sessions waiting for a sandbox slot.",
            [("", manager.waiting)],
        ),
    ]
    pool = service.provider
    if isinstance(pool, PooledProvider):
        out += [
            exposition(
                "warm_ready", "gauge", "Warm sandboxes started and idle.", [("", pool.idle)]
            ),
            exposition(
                "warm_hits_total",
                "counter",
                "Sandboxes handed out from the warm pool.",
                [("", pool.hits)],
            ),
            exposition(
                "warm_misses_total",
                "counter",
                "Sandboxes made on demand, the warm pool being empty.",
                [("", pool.misses)],
            ),
        ]
    return "\n".join(out) + "\n"
