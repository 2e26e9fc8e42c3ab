"""The io stage: the task's original Python program and the submitted Modal program run
on the task's inputs, each in a sandbox of its own (iorun.py), and their outputs must
match within the declared tolerances.

    [[metadata.crucible.stages]]
    kind = "io"                      # role "score" by default; "gate" allowed
    mode = "cli"                     # or "web" (FastAPI-style endpoints)
    reference = "tests/reference.py" # in the task folder, never from the sandbox
    reference_app = "app"            # web: the reference's ASGI app attribute
    program = "/app/main.py"         # the submitted file to run (default: the first .py)
    entrypoint = "main"              # cli: its local entrypoint (default: the only one)
    cases_file = "tests/cases.json"  # or cases = [...] (iocases.py)
    abs_tol = 1e-6
    rel_tol = 1e-6
    require_evidence = ["gpu", "fan_out"]   # ids the runtime's trace must show, each case
    runtime = "offline"              # or "modal": `modal run` on real Modal (iomodal.py;
                                     #   CRUCIBLE_IO_RUNTIME overrides it for a whole run)
    memory_mb = 2048                 # limits of each run (pids_limit, cpus, timeout_sec,
    output_limit_kb = 4096           #   storage_mb likewise)

cli: the reference runs as plain python with the case's args and stdin; the submission
through the offline Modal runtime (its local entrypoint). web: the reference's ASGI app
and the submission's endpoint (served by the runtime inside its sandbox) get the case's
requests; the output is the list of {"status", "json"}. Both get PYTHONHASHSEED and
CRUCIBLE_SEED = `seed`. Components: `pass_rate` and `all_pass` (1 or 0). Each case's
details keep its evidence (what the trace shows ran remotely, inputs per function,
where a GPU request ran); the cases' trace summaries become ctx.trace for the judge
when no stage set one (iotrace.py says what a submission can forge there).

Blame (DESIGN "Errors are data"): the submission crashing, timing out, printing no or
too much output, running out of memory or lacking the entrypoint fails that case (the
attempt's). The reference failing in any way is task_invalid. Whether grading needs a GPU
is decided from the task and its reference before the submission runs: the task's
environment asks for GPUs and this machine has none, or the reference itself fails for
want of CUDA here: resources_unavailable. Otherwise the reference ran on this machine's
CPU, and a submission that fails for want of CUDA has failed its case (its 0), whatever
its run says. The sandbox not starting is sandbox_failed: infrastructure, retried and
left out of the mean.

Evidence (`require_evidence`, per-case input counts) comes only from the runtime's
dispatching side (modalrt/broker.py, in the driver's process, which the program cannot
write to or trace): the containers it started and the inputs it carried to them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

import crucible.verifiers.stages.io.run as iorun
from crucible.errors import ResourcesUnavailable, TaskInvalid
from crucible.modalrt.gpu import says_cuda
from crucible.modalrt.trace import TIMEOUT_EXIT, Trace
from crucible.records.verifier import StageResult, StageRole
from crucible.sandboxes.local.oneshot import OneShotResult, gpu_count
from crucible.verifiers.stages.base import Stage, StageContext, StageSpec
from crucible.verifiers.stages.io.cases import (
    MAX_CASES,
    REFERENCE_OUTPUTS,
    Case,
    load_cases,
    task_file,
)
from crucible.verifiers.stages.io.compare import CompareMode, mismatch, parse_output
from crucible.verifiers.stages.io.realmodal import ModalRunner, chosen_runtime
from crucible.verifiers.stages.io.trace import host_trace, judge_text, summary


class IoSpec(StageSpec):
    kind: str = "io"
    role: StageRole = "score"
    mode: Literal["cli", "web"] = "cli"
    reference: str
    reference_app: str = "app"
    program: str | None = None
    entrypoint: str | None = None
    cases: list[Case] = Field(default_factory=list)
    cases_file: str | None = None
    compare: CompareMode = "json"
    # >= 0 (NaN is refused too): math.isclose raises on a negative tolerance, and the case
    # would fail as the attempt's for the task's mistake
    abs_tol: float = Field(default=1e-9, ge=0)
    rel_tol: float = Field(default=1e-9, ge=0)
    seed: int = 0
    timeout_sec: float = Field(default=60.0, gt=0, le=3600)
    memory_mb: int = Field(default=2048, ge=64)
    pids_limit: int = Field(default=256, ge=16)
    cpus: float = Field(default=2.0, gt=0)
    storage_mb: int = Field(default=256, ge=16)
    output_limit_kb: int = Field(default=4096, ge=1, le=1 << 20)
    require_evidence: list[str] = Field(default_factory=list)
    # where the submission runs: the offline runtime here, or real Modal (iomodal.py)
    runtime: Literal["offline", "modal"] = "offline"

    @model_validator(mode="before")
    @classmethod
    def _no_run_on_host(cls, data: Any) -> Any:
        if isinstance(data, dict) and "run_on_host" in data:
            raise ValueError("run_on_host is gone: every io run is sandboxed now (delete the key)")
        return data

    def limits(self) -> iorun.Limits:
        return iorun.Limits(
            timeout=self.timeout_sec,
            memory_mb=self.memory_mb,
            pids=self.pids_limit,
            cpus=self.cpus,
            storage_mb=self.storage_mb,
            output_cap=self.output_limit_kb * 1024,
        )


def _tail(data: bytes, lines: int = 3) -> str:
    return " | ".join(data.decode(errors="replace").strip().splitlines()[-lines:])[-500:]


class IoStage(Stage):
    kind: ClassVar[str] = "io"
    default_role: ClassVar[StageRole] = "score"
    roles: ClassVar[tuple[StageRole, ...]] = ("score", "gate")
    spec_type: ClassVar[type[StageSpec]] = IoSpec
    spec: IoSpec

    @property
    def web(self) -> bool:
        return self.spec.mode == "web"

    async def run(self, ctx: StageContext) -> StageResult:
        reference = task_file(ctx.task.path, self.spec.reference, "reference")
        cases = load_cases(ctx.task.path, self.spec.cases, self.spec.cases_file, self.web)
        files = ctx.submission.sources()  # as Python decodes them, or UndecodableSource
        program = self.spec.program or next(iter(sorted(files)), None)
        if program is None or program not in files:
            return self._verdict([], f"the program {program or '(any .py)'} was not submitted")
        if self._needs_gpu(ctx) and gpu_count() == 0:  # before anything of the submission runs
            raise ResourcesUnavailable(
                f"io stage: the task asks for {ctx.task.config.environment.gpus} GPU(s) "
                "(environment.gpus) and this machine has none"
            )
        results: list[dict[str, Any]] = []
        traces: list[str] = []
        async with contextlib.AsyncExitStack() as stack:
            runner = None
            if chosen_runtime(self.spec.runtime) == "modal" and not self.web:
                runner = await stack.enter_async_context(ModalRunner(ctx.task.name))
            for i, case in enumerate(cases):
                results.append(await self._case(i, case, reference, ctx, program, traces, runner))
        if ctx.trace is None and traces:
            ctx.trace = judge_text(traces)  # the judge's dynamic evidence
        return self._verdict(results, "")

    def _env(self) -> dict[str, str]:
        return {"PYTHONHASHSEED": str(self.spec.seed), "CRUCIBLE_SEED": str(self.spec.seed)}

    async def _expected(
        self, i: int, case: Case, reference: Path, ref_digest: str, ctx: StageContext
    ) -> tuple[Any, bool]:
        """The reference's parsed output for a case, and whether it came from the cache."""
        key = (ctx.task.digest, self.spec.reference, ref_digest, case.key(), self.spec.mode,
               self.spec.reference_app, str(self.spec.seed))  # fmt: skip
        stdout = REFERENCE_OUTPUTS.get(key)
        cached = stdout is not None
        if stdout is None:
            if self.web:
                reqs = [r.wire() for r in case.requests]
                ran = await iorun.run_reference_app(
                    reference, self.spec.reference_app, reqs, self._env(), self.spec.limits()
                )
            else:
                ran = await iorun.run_reference(
                    reference, case.args, case.stdin, self._env(), self.spec.limits()
                )
            why = self._failure(ran)
            if why and gpu_count() == 0 and says_cuda(_tail(ran.stderr, 20)):
                raise ResourcesUnavailable(
                    f"io stage: the reference program needs a GPU this machine lacks: {why}"
                )
            if why:
                raise TaskInvalid(f"io stage: the reference program, case {i}: {why}")
            stdout = ran.stdout.decode(errors="replace")
        try:
            expected = parse_output(stdout, self.spec.compare)
        except ValueError as exc:
            raise TaskInvalid(f"io stage: the reference program, case {i}: {exc}") from exc
        REFERENCE_OUTPUTS.put(key, stdout)
        return expected, cached

    def _failure(self, ran: OneShotResult) -> str | None:
        """Why a run did not end well (None: exit 0 within every limit)."""
        if ran.overflow:
            cap = "1024 KiB" if ran.overflow == "stderr" else f"{self.spec.output_limit_kb} KiB"
            return f"output too large (over {cap} on {ran.overflow})"
        if ran.timed_out:
            return f"timed out after {self.spec.timeout_sec}s"
        if ran.code != 0 and ran.oom_kills:
            return f"ran out of memory ({self.spec.memory_mb} MB); exited {ran.code}"
        if ran.code != 0:
            return f"exited {ran.code}: {_tail(ran.stderr)}"
        return None

    async def _case(
        self,
        i: int,
        case: Case,
        reference: Path,
        ctx: StageContext,
        program: str,
        traces: list[str],
        runner: ModalRunner | None = None,
    ) -> dict[str, Any]:
        t0 = time.monotonic()
        # the reference's own bytes in the cache key too: the digest is the task's as loaded
        ref_digest = hashlib.sha256(await asyncio.to_thread(reference.read_bytes)).hexdigest()
        expected, cached = await self._expected(i, case, reference, ref_digest, ctx)
        t_ref = time.monotonic() - t0
        job: dict[str, Any] = {"mode": "serve" if self.web else "program", "program": program}
        if self.web:
            job |= {"endpoint": case.endpoint, "requests": [r.wire() for r in case.requests]}
        else:
            job |= {"entrypoint": self.spec.entrypoint, "args": case.args}
        out: dict[str, Any] = {"case": i, "args": case.args[:20]}
        timing = {"reference_cached": cached, "reference_sec": round(t_ref, 3)}
        if runner is not None:  # real Modal: no trace (iomodal.py)
            ran = await runner.run(
                ctx.submission.files, job, case.stdin, self._env(), self.spec.limits()
            )
            traces.append(f"case {i}: ran on real Modal (`modal run`); no runtime trace")
            out |= {"runtime": "modal", "evidence": "not recorded on real Modal", **timing}
            return self._judged(out, expected, ran, None, time.monotonic() - t0 - t_ref)
        ran = await iorun.run_submission(
            ctx.submission.files, job, case.stdin, self._env(), self.spec.limits()
        )
        code = TIMEOUT_EXIT if ran.timed_out else ran.code
        trace = await asyncio.to_thread(host_trace, ran.side, program, self.spec.entrypoint, code)
        if gpu_count() == 0:  # no GPU ran it here, whatever its (forgeable) trace says
            for f in trace.functions:
                f.gpu_backing = "cpu" if f.gpu_backing else None
        refused = None
        if trace.status == "needs_gpu":  # never an excuse: decided before the run (run())
            refused = (
                "the run failed for want of a GPU; grading this task needs none (its "
                "environment asks for no GPU and its reference ran on this machine's CPU)"
            )
        traces.append(summary(i, trace))
        if self.web:
            out["endpoint"] = case.endpoint
        out |= {
            "runtime": "offline",
            "evidence": {k: v for k, v in trace.evidence.items() if v},
            # the case's expected functions too: one no container ran shows 0
            "remote_inputs": dict.fromkeys(case.inputs, 0)
            | {f.name: f.remote_inputs for f in trace.functions},
            "gpu_backing": {f.name: f.gpu_backing for f in trace.functions if f.gpu_backing},
            **timing,
            "host_uid": ran.host_uid,
        }
        if refused is not None:  # graded as any run: its output decides
            out["gpu_claim_refused"] = refused
        return self._judged(out, expected, ran, (case, trace), time.monotonic() - t0 - t_ref)

    def _needs_gpu(self, ctx: StageContext) -> bool:
        """Whether grading this task needs a GPU: the task's say (its environment), never
        the submission's (a run failing for want of CUDA)."""
        return ctx.task.config.environment.gpus > 0

    def _judged(
        self,
        out: dict[str, Any],
        expected: Any,
        ran: OneShotResult,
        traced: tuple[Case, Trace] | None,
        took: float,
    ) -> dict[str, Any]:
        """The case's record with its verdict: the run, its output, then the trace's evidence."""
        out["submission_sec"] = round(took, 3)
        failure = self._failure(ran)
        if failure is not None:
            failure = f"the submission {failure}"
        else:
            try:
                got = parse_output(ran.stdout.decode(errors="replace"), self.spec.compare)
                failure = mismatch(expected, got, self.spec.abs_tol, self.spec.rel_tol)
            except ValueError as exc:
                failure = f"the submission's output: {exc}"
        if failure is None and traced is not None:
            failure = self._evidence_gap(*traced)
        out["passed"] = failure is None
        if failure:
            out["reason"] = failure[:1000]
        return out

    def _evidence_gap(self, case: Case, trace: Trace) -> str | None:
        missing = [c for c in self.spec.require_evidence if not trace.evidence.get(c)]
        if missing:
            return f"the run did not exercise {', '.join(missing)} (runtime trace)"
        for fn, least in case.inputs.items():
            f = trace.function(fn)
            got = f.remote_inputs if f is not None else 0
            if got < least:
                return f"{fn} received {got} inputs in a container, expected {least}"
        return None

    def _verdict(self, results: list[dict[str, Any]], why: str) -> StageResult:
        passed = sum(1 for r in results if r["passed"])
        share = passed / len(results) if results else 0.0
        ok = bool(results) and passed == len(results) and not why
        first = next((r for r in results if not r["passed"]), None)
        reason = why or (
            f"all {len(results)} cases match the reference"
            if ok
            else f"{passed}/{len(results)} cases match; case {first['case']}: {first['reason']}"
            if first
            else ""
        )
        return self.result(
            status=self.status(ok),
            verdict="pass" if ok else "fail",
            components={"pass_rate": share, "all_pass": 1.0 if ok else 0.0},
            reason=reason[:2000],
            details={"cases": results[:MAX_CASES]},
        )
