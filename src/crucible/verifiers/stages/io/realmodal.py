"""The io stage on real Modal: with `runtime = "modal"` in the stage (or
CRUCIBLE_IO_RUNTIME=modal, the operator's choice for every io stage of a run) each
submission run is `modal run` in a Modal Sandbox of its own, made by the modal provider,
instead of the offline runtime on the grading host. The reference still runs offline.

Trust: `modal run` needs a token in the process that runs the submission's local
entrypoint, which is the submission's code. So this mode never uses the provider's own
credentials: it takes a token meant to be handed to graded code, from
CRUCIBLE_IO_MODAL_TOKEN_ID / CRUCIBLE_IO_MODAL_TOKEN_SECRET (and an environment from
CRUCIBLE_IO_MODAL_ENVIRONMENT): give it a workspace or environment of its own, with spend
limits. Without those variables a run is resources_unavailable (crucible's, never the
attempt's 0). The sandbox is on Modal's cloud, so the grading host is never reachable from
the run; its output comes back capped, as offline. A sandbox that its contents ended
(the submission killed its entrypoint or filled its memory) fails the case, never a
sandbox_failed the attempt could trade its 0 for. There is no runtime trace on real Modal:
the cases' evidence says so and `require_evidence` / per-case input counts are not checked
(the contracts gate and the judge still read the code). Web mode (`mode = "web"`) always
runs offline: its cases say so.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import uuid
from importlib import metadata
from pathlib import Path
from typing import Any

from crucible.errors import ResourcesUnavailable, SandboxFailed
from crucible.sandboxes.base import SandboxSpec
from crucible.sandboxes.local.oneshot import OneShotResult, runtime_dir
from crucible.sandboxes.modal.auth import ModalCredentials
from crucible.sandboxes.modal.provider import ModalProvider
from crucible.verifiers.stages.io.run import Limits, submitted_files

RUNTIME_VAR = "CRUCIBLE_IO_RUNTIME"  # "modal" or "offline": overrides every io stage's runtime
TOKEN_ID_VAR = "CRUCIBLE_IO_MODAL_TOKEN_ID"
TOKEN_SECRET_VAR = "CRUCIBLE_IO_MODAL_TOKEN_SECRET"
ENVIRONMENT_VAR = "CRUCIBLE_IO_MODAL_ENVIRONMENT"
IMAGE_VAR = "CRUCIBLE_IO_MODAL_IMAGE"  # a registry image with python and modal installed
WORKDIR = "/work"
CONFIG_PATH = "/root/.modal.toml"  # the io token's profile (MODAL_CONFIG_PATH points here)
MODAL_RUN = ("modal", "run", "--quiet")  # the program's own output, as `modal run` prints it
BASE_IMAGE = "python:3.11-slim"
_HINT = (
    f"export {TOKEN_ID_VAR} and {TOKEN_SECRET_VAR} (a token for graded code: the submission's "
    f"process holds it), or run the io stage offline ({RUNTIME_VAR}=offline)"
)


def chosen_runtime(declared: str) -> str:
    """The runtime an io stage uses: the operator's CRUCIBLE_IO_RUNTIME, else the stage's."""
    forced = os.environ.get(RUNTIME_VAR, "").strip()
    if forced and forced not in ("offline", "modal"):
        raise ResourcesUnavailable(
            f"{RUNTIME_VAR}={forced!r}: expected 'offline' or 'modal'", hint=_HINT
        )
    return forced or declared


def io_credentials() -> ModalCredentials:
    token_id = os.environ.get(TOKEN_ID_VAR, "").strip()
    secret = os.environ.get(TOKEN_SECRET_VAR, "").strip()
    if not (token_id and secret):
        raise ResourcesUnavailable(
            f"the io stage runs on real Modal, and {TOKEN_ID_VAR} / {TOKEN_SECRET_VAR} are unset",
            hint=_HINT,
        )
    environment = os.environ.get(ENVIRONMENT_VAR, "").strip() or None
    return ModalCredentials(token_id, secret, source=TOKEN_ID_VAR, environment=environment)


def runner_image() -> tuple[str | None, Path | None, str | None]:
    """(registry image, Dockerfile folder, its digest) of the sandbox that runs `modal run`:
    the operator's image, else python with the modal version installed here."""
    image = os.environ.get(IMAGE_VAR, "").strip()
    if image:
        return image, None, None
    try:
        pin = f"modal=={metadata.version('modal')}"
    except metadata.PackageNotFoundError:
        pin = "modal"
    text = f"FROM {BASE_IMAGE}\nRUN pip install --no-cache-dir '{pin}'\n"
    digest = hashlib.sha256(text.encode()).hexdigest()
    folder = runtime_dir() / f"io-modal-{digest[:16]}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Dockerfile").write_text(text)
    return None, folder, digest


def modal_toml(creds: ModalCredentials) -> str:
    # TOML basic strings: JSON's escaping is valid TOML for them
    lines = ["[io]", f"token_id = {json.dumps(creds.token_id)}",
             f"token_secret = {json.dumps(creds.token_secret)}"]  # fmt: skip
    if creds.environment:
        lines.append(f"environment = {json.dumps(creds.environment)}")
    return "\n".join([*lines, "active = true", ""])


def run_command(job: dict[str, Any]) -> str:
    program = f"{WORKDIR}/src/{job['program'].lstrip('/')}"
    target = f"{program}::{job['entrypoint']}" if job.get("entrypoint") else program
    return shlex.join([*MODAL_RUN, target, *job.get("args", [])])


class ModalRunner:
    """Runs one io stage's submission cases on real Modal: one provider (one client, one
    runner image) for the stage, a fresh Modal Sandbox per case.

        async with ModalRunner(task.name) as runner:
            ran = await runner.run(files, job, stdin, env, limits)
    """

    def __init__(self, task_name: str, *, sdk: Any = None) -> None:
        self.task_name = task_name
        self._sdk = sdk
        self._provider: ModalProvider | None = None
        self._creds: ModalCredentials | None = None

    async def __aenter__(self) -> ModalRunner:
        self._creds = io_credentials()
        params = {"environment": self._creds.environment} if self._creds.environment else {}
        self._provider = ModalProvider(sdk=self._sdk, credentials=self._creds, **params)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._provider is not None:
            await self._provider.aclose()

    def _spec(self, env: dict[str, str], lim: Limits) -> SandboxSpec:
        image, dockerfile_dir, digest = runner_image()
        return SandboxSpec(
            job_id="io-stage",
            trial_id=f"io-{uuid.uuid4().hex[:12]}",
            task_name=self.task_name,
            image=image,
            dockerfile_dir=dockerfile_dir,
            environment_digest=digest,
            workdir=WORKDIR,
            cpus=lim.cpus,
            memory_mb=lim.memory_mb,
            network="public",  # `modal run` talks to Modal
            env={**env, "MODAL_CONFIG_PATH": CONFIG_PATH},
        )

    async def run(
        self, files: dict[str, Path], job: dict[str, Any], stdin: str, env: dict[str, str],
        lim: Limits,
    ) -> OneShotResult:  # fmt: skip
        """One case of the submission through real `modal run`, in a fresh Modal Sandbox."""
        assert self._provider is not None and self._creds is not None, "use `async with`"
        provider, spec = self._provider, self._spec(env, lim)
        await provider.preflight()
        await provider.prepare([spec])  # built once per provider (the image cache)
        sandbox = await provider.create(spec)
        try:
            for dest, host in submitted_files(files).items():
                data = host if isinstance(host, bytes) else host.read_bytes()
                await sandbox.write_file(f"{WORKDIR}/{dest}", data)
            await sandbox.write_file(CONFIG_PATH, modal_toml(self._creds), mode=0o600)
            try:
                res = await sandbox.exec(
                    run_command(job),
                    timeout=lim.timeout,
                    cwd=WORKDIR,
                    input=stdin or None,
                    output_cap=lim.output_cap,
                )
            except SandboxFailed as exc:
                # The submission runs in this sandbox and can end it (kill its entrypoint,
                # fill its memory), say just as its timed-out exec is cleaned up: the
                # attempt's failed case, as grading.py blames a trial's sandbox; only a
                # sandbox lost to Modal is infrastructure.
                how = await sandbox.ended_by_contents()
                if how is None:
                    raise
                why = f"the Modal sandbox ended during the run ({how}): {exc.message}"
                return OneShotResult(code=-9, stdout=b"", stderr=why.encode(), side=b"")
        finally:
            await sandbox.close()
        return OneShotResult(
            code=-9 if res.timed_out else res.exit_code,
            stdout=res.stdout.encode(),
            stderr=res.stderr.encode(),
            side=b"",
            timed_out=res.timed_out,
            overflow="stdout" if res.truncated else None,
        )
