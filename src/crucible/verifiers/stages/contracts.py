"""The contracts stage: the Modal SDK contracts a task requires must be present in the
submission (crucible.contracts, with the reach rule: a contract only declared, never
reached when the program is launched as the task says, counts as absent). Legacy APIs
are reported, not judged. Gate by default; as a score stage it gives the share of
required contracts present.

The submitted Python files are analysed as one program, each as Python decodes it
(Submission.sources: a file Python would not decode as UTF-8 raises UndecodableSource).
A file that is not Python fails the gate (the attempt's code); a file built to crash
the analyzer raises ContractAnalysisError; both errors are verifier_failed (the
attempt's fault, counted 0).
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from pydantic import field_validator

from crucible.contracts.api import analyze_paths
from crucible.contracts.model import LEGACY_IDS, MODERN_IDS, canonical
from crucible.contracts.reach import Launch, reached_ids
from crucible.records.verifier import StageResult, StageRole
from crucible.verifiers.stages.base import Stage, StageContext, StageSpec


class ContractsSpec(StageSpec):
    kind: str = "contracts"
    role: StageRole = "gate"
    require: list[str]
    launch: Launch = "auto"
    entrypoint: str | None = None

    @field_validator("require")
    @classmethod
    def _known(cls, require: list[str]) -> list[str]:
        unknown = set(require) - set(MODERN_IDS)
        if unknown:
            legacy = " (legacy ids cannot be required)" if unknown & set(LEGACY_IDS) else ""
            raise ValueError(f"unknown contract ids: {sorted(unknown)}{legacy}")
        return require


class ContractsStage(Stage):
    kind: ClassVar[str] = "contracts"
    default_role: ClassVar[StageRole] = "gate"
    roles: ClassVar[tuple[StageRole, ...]] = ("gate", "score", "veto")
    spec_type: ClassVar[type[StageSpec]] = ContractsSpec
    spec: ContractsSpec

    @property
    def required_contracts(self) -> list[str]:
        return list(self.spec.require)

    async def run(self, ctx: StageContext) -> StageResult:
        files = ctx.submission.python_files()
        texts = {files[name]: text for name, text in ctx.submission.sources().items()}
        required, _ = canonical(self.spec.require)
        if not files:
            return self._verdict(required, set(), set(), "no Python file was submitted", {})
        by_host = {str(host): name for name, host in files.items()}
        try:
            analyses = await asyncio.to_thread(analyze_paths, list(files.values()), texts)
        except SyntaxError as exc:
            where = by_host.get(str(exc.filename), exc.filename or "?")
            why = f"the submission is not Python: {where}:{exc.lineno}: {exc.msg}"
            return self._verdict(required, set(), set(), why, {})
        present: set[str] = set()
        legacy: set[str] = set()
        per_file: dict[str, list[str]] = {}
        for host, analysis in analyses:
            ids = reached_ids(analysis, self.spec.launch, self.spec.entrypoint)
            modern, old = canonical(ids)
            per_file[by_host.get(str(host), str(host))] = modern + old
            present |= set(modern)
            legacy |= set(old)
        return self._verdict(required, present, legacy, "", per_file)

    def _verdict(
        self,
        required: list[str],
        present: set[str],
        legacy: set[str],
        why: str,
        per_file: dict[str, list[str]],
    ) -> StageResult:
        missing = [c for c in required if c not in present]
        ok = not missing and not why
        share = (len(required) - len(missing)) / len(required) if required else 1.0
        reason = why or (
            f"required contracts absent (or never reached): {', '.join(missing)}"
            if missing
            else f"required contracts present: {', '.join(required) or 'none required'}"
        )
        return self.result(
            status=self.status(ok),
            verdict="pass" if ok else "fail",
            components={"present": share},
            reason=reason,
            details={
                "required": required,
                "present": canonical(present)[0],
                "missing": missing,
                "legacy": canonical(legacy)[1],
                "launch": self.spec.launch,
                "files": per_file,
            },
        )
