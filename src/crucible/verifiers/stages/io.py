"""The io stage: the task's original Python program and the submitted Modal program run
on the task's inputs, and their outputs must match within the declared tolerances.

    [[metadata.crucible.stages]]
    kind = "io"                      # role "score" by default; "gate" allowed
    reference = "tests/reference.py" # in the task folder, never from the sandbox
    program = "/app/main.py"         # the submitted file to run (default: the first .py)
    entrypoint = "main"              # its local entrypoint (default: the only one)
    cases_file = "tests/cases.json"  # or cases = [{args = [...], stdin = "..."}]
    abs_tol = 1e-6
    rel_tol = 1e-6
    require_evidence = ["gpu", "fan_out"]   # ids the runtime's trace must show, each case
    run_on_host = true               # required: see iorun.py

A case is `{"args": [...], "stdin": "...", "inputs": {"fn": N}}`; `inputs` asks that
function `fn` received at least N inputs in a container (the fan-out got every input).
The reference runs as plain python; the submission through the offline Modal runtime
(crucible.modalrt), which records what ran remotely. Both get PYTHONHASHSEED and
CRUCIBLE_SEED = `seed`. Components: `pass_rate` (the share of cases that pass) and
`all_pass` (1 or 0).

Blame (DESIGN "Errors are data"): the submission crashing, timing out, printing no
output or lacking the entrypoint fails that case (the attempt's). The reference
crashing is task_invalid. A case that needs a GPU this machine lacks is
resources_unavailable (never a wrong output). Failing to start the runtime at all (no
interpreter, setpriv missing) is sandbox_failed: infrastructure, retried and left out
of the mean. Once the runtime's process has started, whatever breaks it is the
attempt's: the submission may have caused it (shadowed a module, filled the folder).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from crucible.errors import ResourcesUnavailable, TaskInvalid
from crucible.modalrt.api import prepare
from crucible.modalrt.context import ENV_VAR, read_events
from crucible.modalrt.trace import TIMEOUT_EXIT, Trace, build_trace
from crucible.records.verifier import StageResult, StageRole
from crucible.verifiers.stages.base import Stage, StageContext, StageSpec
from crucible.verifiers.stages.iocompare import CompareMode, mismatch, parse_output
from crucible.verifiers.stages.iorun import RunDir, interpreter

MAX_CASES = 200


class Case(BaseModel):
    model_config = ConfigDict(extra="forbid")

    args: list[str] = Field(default_factory=list)
    stdin: str = ""
    inputs: dict[str, int] = Field(default_factory=dict)  # function -> least remote inputs


class IoSpec(StageSpec):
    kind: str = "io"
    role: StageRole = "score"
    reference: str
    program: str | None = None
    entrypoint: str | None = None
    cases: list[Case] = Field(default_factory=list)
    cases_file: str | None = None
    compare: CompareMode = "json"
    abs_tol: float = 1e-9
    rel_tol: float = 1e-9
    seed: int = 0
    timeout_sec: float = 60.0
    require_evidence: list[str] = Field(default_factory=list)
    run_on_host: bool = False

    @model_validator(mode="after")
    def _opted_in(self) -> IoSpec:
        if not self.run_on_host:
            raise ValueError(
                "the io stage runs the submission on the host, as an unprivileged uid but "
                "outside any sandbox; set run_on_host = true to accept that"
            )
        return self


def task_file(task_dir: Path, rel: str, what: str) -> Path:
    """`rel` inside the task folder (no escaping it, no link), or TaskInvalid."""
    root = task_dir.resolve()
    path = (root / rel).resolve()
    if root not in path.parents or not path.is_file():
        raise TaskInvalid(f"io stage: {what} {rel!r} is not a file inside the task folder")
    return path


class IoStage(Stage):
    kind: ClassVar[str] = "io"
    default_role: ClassVar[StageRole] = "score"
    roles: ClassVar[tuple[StageRole, ...]] = ("score", "gate")
    spec: IoSpec

    def load_cases(self, task_dir: Path) -> list[Case]:
        cases = list(self.spec.cases)
        if self.spec.cases_file:
            path = task_file(task_dir, self.spec.cases_file, "cases_file")
            try:
                raw = json.loads(path.read_text())
                cases += [Case.model_validate(c) for c in raw]
            except (ValueError, TypeError) as exc:
                raise TaskInvalid(f"io stage: {self.spec.cases_file}: {exc}"[:500]) from exc
        if not cases or len(cases) > MAX_CASES:
            raise TaskInvalid(f"io stage: 1 to {MAX_CASES} cases are needed, got {len(cases)}")
        return cases

    async def run(self, ctx: StageContext) -> StageResult:
        reference = task_file(ctx.task.path, self.spec.reference, "reference")
        cases = self.load_cases(ctx.task.path)
        files = ctx.submission.python_files()
        program = self.spec.program or next(iter(sorted(files)), None)
        if program is None or program not in files:
            return self._verdict([], f"the program {program or '(any .py)'} was not submitted")
        results = []
        for i, case in enumerate(cases):
            results.append(await asyncio.to_thread(self._case, i, case, reference, ctx, program))
        return self._verdict(results, "")

    def _case(
        self, i: int, case: Case, reference: Path, ctx: StageContext, program: str
    ) -> dict[str, Any]:
        seed_env = {"PYTHONHASHSEED": str(self.spec.seed), "CRUCIBLE_SEED": str(self.spec.seed)}
        python = interpreter()
        ref_dir = RunDir()
        try:
            shutil.copy2(reference, ref_dir.path / reference.name)
            ref_dir.give()
            ran = ref_dir.run(
                [python, reference.name, *case.args],
                ref_dir.env(seed_env),
                case.stdin,
                ref_dir.path,
                self.spec.timeout_sec,
            )
        finally:
            ref_dir.close()
        if ran.code != 0 or ran.timed_out:
            why = "timed out" if ran.timed_out else f"exited {ran.code}: {ran.stderr[-500:]}"
            raise TaskInvalid(f"io stage: the reference program, case {i}: {why}")
        try:
            expected = parse_output(ran.stdout, self.spec.compare)
        except ValueError as exc:
            raise TaskInvalid(f"io stage: the reference program, case {i}: {exc}") from exc
        got_out, trace, failure = self._submission(case, ctx, program, seed_env)
        out: dict[str, Any] = {"case": i, "args": case.args[:20]}
        if trace is not None:
            out["evidence"] = {k: v for k, v in trace.evidence.items() if v}
            out["remote_inputs"] = {f.name: f.remote_inputs for f in trace.functions}
            out["gpu_backing"] = {f.name: f.gpu_backing for f in trace.functions if f.gpu_backing}
        if failure is None:
            try:
                got = parse_output(got_out, self.spec.compare)
                failure = mismatch(expected, got, self.spec.abs_tol, self.spec.rel_tol)
            except ValueError as exc:
                failure = f"the submission's output: {exc}"
        if failure is None and trace is not None:
            failure = self._evidence_gap(case, trace)
        out["passed"] = failure is None
        if failure:
            out["reason"] = failure[:1000]
        return out

    def _submission(
        self, case: Case, ctx: StageContext, program: str, seed_env: dict[str, str]
    ) -> tuple[str, Trace | None, str | None]:
        run_dir = RunDir()
        try:
            tree = run_dir.path / "src"
            for name, host in ctx.submission.files.items():
                dst = tree / name.lstrip("/")
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(host, dst)
            main = tree / program.lstrip("/")
            state = run_dir.path / "state"
            _, events_dir, env = prepare(main, state, None, 4, None)
            run_dir.give()
            argv = [interpreter(), "-m", "crucible.modalrt.runner"]
            if self.spec.entrypoint:
                argv += ["--entry", self.spec.entrypoint]
            argv += ["--", *case.args]
            extra = {ENV_VAR: env[ENV_VAR], **seed_env}
            ran = run_dir.run(
                argv, run_dir.env(extra), case.stdin, main.parent, self.spec.timeout_sec
            )
            code = TIMEOUT_EXIT if ran.timed_out else ran.code
            trace = build_trace(read_events(events_dir), program, self.spec.entrypoint, code)
        finally:
            run_dir.close()
        trace.program = program  # not the host folder, which is gone
        if trace.status == "needs_gpu":
            raise ResourcesUnavailable(f"io stage: {program} needs a GPU this machine lacks")
        if ran.timed_out:
            return ran.stdout, trace, f"the submission timed out after {self.spec.timeout_sec}s"
        if code != 0:
            tail = ran.stderr.strip().splitlines()[-3:]
            return ran.stdout, trace, f"the submission exited {code}: {' | '.join(tail)}"
        return ran.stdout, trace, None

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
