"""The `modal` provider: one Modal Sandbox per trial, through the modal SDK's
async API (`.aio`). This module owns `ModalProvider` (preflight, app lookup,
rate-limited create with retries, cleanup) and is the registry's entry point.

Its parts live beside it: sdk (the declared SDK surface, the guarded wrapper
and `load_sdk`), params (`--env-param` parsing and the Sandbox.create
arguments), errors (what an SDK exception means and whether it is retried),
images (images built once per job), procs (the in-sandbox process scripts),
sandbox and files (`ModalSandbox`). The names tests and callers import from
here are re-exported below.

The SDK is resolved only through this module's `load_sdk` (tests replace it
with a stand-in), lazily, so `crucible --help` never imports modal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
from typing import Any

from crucible.errors import CrucibleError, SandboxFailed
from crucible.sandboxes.base import (
    Provider,
    ProviderCapabilities,
    Sandbox,
    SandboxSpec,
    refuse_compose,
)
from crucible.sandboxes.modal.auth import ModalCredentials, resolve_credentials
from crucible.sandboxes.modal.client import SandboxClient
from crucible.sandboxes.modal.errors import CredentialsRefused, map_error, retryable
from crucible.sandboxes.modal.images import ImageCache
from crucible.sandboxes.modal.params import (
    KNOWN_GPU_TYPES,
    MAX_GPUS,
    SANDBOX_MAX_TIMEOUT,
    TAG_JOB,
    TAG_MANAGED,
    TAG_TASK,
    TAG_TRIAL,
    ModalParams,
    create_kwargs,
    gpu_request,
    job_tags,
    network_kwargs,
    scrub_env,
    split_env,
)
from crucible.sandboxes.modal.procs import LIST_PROCS, parse_procs
from crucible.sandboxes.modal.sandbox import ModalSandbox
from crucible.sandboxes.modal.sdk import (
    SDK_CLASSES,
    SDK_EXCEPTIONS,
    SDK_USES,
    Sdk,
    SdkUse,
    load_sdk,
)
from crucible.sandboxes.ratelimit import Backoff, RetriesExhausted, StartGate, retry

# The wrapper's name from before the split; tests patch its class attributes.
_Sdk = Sdk

__all__ = [
    "KNOWN_GPU_TYPES",
    "MAX_GPUS",
    "SANDBOX_MAX_TIMEOUT",
    "SDK_CLASSES",
    "SDK_EXCEPTIONS",
    "SDK_USES",
    "TAG_JOB",
    "TAG_MANAGED",
    "TAG_TASK",
    "TAG_TRIAL",
    "Backoff",
    "ModalParams",
    "ModalProvider",
    "ModalSandbox",
    "Sdk",
    "SdkUse",
    "gpu_request",
    "load_sdk",
    "network_kwargs",
]

log = logging.getLogger(__name__)


class ModalProvider(Provider):
    """Sandboxes on Modal: elastic, GPUs, network blocked or allowlisted."""

    name = "modal"
    env_param_names = ModalParams.names()
    default_concurrency = 64

    def __init__(
        self, *, sdk: Any = None, credentials: ModalCredentials | None = None, **params: str
    ) -> None:
        self.params = ModalParams.parse(dict(params))
        self._sdk_module = sdk
        self._sdk: Sdk | None = None
        self._given_creds = credentials  # else resolved (auth.py) when first connecting
        self._creds: ModalCredentials | None = None
        self._client: Any = None
        self._app: Any = None
        self._app_lock = asyncio.Lock()
        self._refused: CrucibleError | None = None  # Modal refused the token: stop calling
        self._warned_domains = False
        self._images = ImageCache(
            self.params.image,
            sdk=self._sdk_checked,
            app=self._ensure_app,
            map_error=self._map_error,
            named=self.params.named_image,
            environment=self.params.environment,
        )
        self.gate = StartGate(self.params.create_rate, self.params.max_starting)
        self.backoff = Backoff(attempts=self.params.create_attempts)
        self._background: set[asyncio.Task[Any]] = set()
        self.created = 0
        self.retried = 0

    # -- plumbing -----------------------------------------------------------

    def _sdk_checked(self) -> Sdk:
        if self._sdk is None:
            # `load_sdk` is looked up in this module's globals at call time, so
            # a stand-in patched onto crucible.sandboxes.modal.provider reaches here.
            self._sdk = Sdk(self._sdk_module if self._sdk_module is not None else load_sdk())
        return self._sdk

    def _secret_values(self) -> set[str]:
        return {self._creds.token_secret, self._creds.token_id} if self._creds else set()

    def capabilities(self) -> ProviderCapabilities:
        return ProviderCapabilities(
            gpus=MAX_GPUS,
            gpu_types=list(KNOWN_GPU_TYPES),
            network_allowlist=True,
            isolation=(
                "Modal Sandbox (gVisor container on Modal's cloud); cpu (physical cores = "
                "cpus/2) and memory reserved and capped by Modal; domain allowlists HTTPS only"
            ),
        )

    def _map_error(self, what: str, exc: BaseException, gpu: str | None = None) -> CrucibleError:
        source = self._creds.source if self._creds else "?"
        err = map_error(self._sdk_checked(), what, exc, source=source, gpu=gpu)
        if isinstance(err, CredentialsRefused):
            self._refused = err  # every later call would be refused too: stop making them
        return err

    def _retryable(self, exc: BaseException, gpu: str | None = None) -> bool:
        return retryable(self._sdk_checked(), exc, gpu)

    # -- lifecycle ----------------------------------------------------------

    async def preflight(self) -> None:
        """Credentials (no network), a client, then the app lookup: the first
        call that reaches Modal, so a refused token or an unknown environment
        stops the job before anything is written (issue 18, defect 2:
        `Client.from_credentials` only opens a connection, modal/client.py:425-453)."""
        await self._connect()
        await self._ensure_app()

    async def _connect(self) -> None:
        sdk = self._sdk_checked()
        if self._client is not None:
            return
        self._creds = self._given_creds or resolve_credentials(self.params.config)
        log.info("modal credentials from %s", self._creds.source)
        try:
            self._client = await sdk.aio(
                None, "Client.from_credentials", self._creds.token_id, self._creds.token_secret
            )
        except Exception as exc:
            raise self._map_error("client connection", exc) from exc

    async def _ensure_app(self) -> Any:
        await self._connect()
        if self._refused is not None:
            raise self._refused
        async with self._app_lock:
            if self._app is None:
                environment = self.params.environment or (
                    self._creds.environment if self._creds else None
                )
                try:
                    self._app = await retry(
                        lambda: self._sdk_checked().aio(
                            None,
                            "App.lookup",
                            self.params.app_name,
                            create_if_missing=True,
                            environment_name=environment,
                            client=self._client,
                        ),
                        retryable=self._retryable,
                        backoff=self.backoff,
                    )
                except RetriesExhausted as exc:
                    raise self._map_error("app lookup", exc.last) from exc
                except Exception as exc:
                    raise self._map_error("app lookup", exc) from exc
        return self._app

    async def _image_for(self, spec: SandboxSpec) -> Any:
        """The built image for a spec (built at most once per key), or None for Modal's default."""
        return await self._images.get(spec)

    async def prepare(self, specs: list[SandboxSpec]) -> None:
        """Build each distinct image once, before the fan-out. A failed build is
        remembered and fails only the trials that need it (task_invalid)."""
        for spec in specs:
            self._warn_domains(spec)
        await self._images.prepare(specs)

    def _warn_domains(self, spec: SandboxSpec) -> None:
        """Modal's domain allowlist is in beta and filters HTTPS only (issue 18,
        defect 11): say so once, where the task author will see it."""
        domains = network_kwargs(spec).get("outbound_domain_allowlist")
        if domains and not self._warned_domains:
            self._warned_domains = True
            log.warning(
                "task %s allowlists %s: on Modal a domain allowlist is in beta and lets "
                "through HTTPS (port 443) only; plain HTTP and other protocols to those "
                "hosts are blocked (list an IP range in allowed_hosts for them)",
                spec.task_name,
                ", ".join(domains),
            )

    def _create_kwargs(self, spec: SandboxSpec, image: Any, app: Any) -> dict[str, Any]:
        return create_kwargs(
            spec,
            self.params,
            image=image,
            app=app,
            client=self._client,
            secrets=self._secret_values(),
        )

    async def create(self, spec: SandboxSpec) -> Sandbox:
        refuse_compose(spec, self.name)
        sdk = self._sdk_checked()
        app = await self._ensure_app()
        image = await self._image_for(spec)
        self._warn_domains(spec)
        kwargs = self._create_kwargs(spec, image, app)
        gpu: str | None = kwargs.get("gpu")

        calling = False  # a Sandbox.create request is in flight
        abandoned = False  # the trial was cancelled: no further tries

        async def attempt() -> Any:
            nonlocal calling
            if self._refused is not None:
                raise self._refused
            if gpu is not None:
                # A GPU create may wait in Modal's queue for many minutes: it
                # takes a rate grant but no start slot, so CPU creates go on.
                await self.gate.limiter.acquire()
                return await call()
            async with self.gate.starting():
                return await call()

        async def call() -> Any:
            nonlocal calling
            calling = True
            try:
                return await sdk.aio(None, "Sandbox.create", **kwargs)
            finally:
                calling = False

        def can_retry(exc: BaseException) -> bool:
            return not abandoned and self._retryable(exc, gpu)

        def on_retry(n: int, exc: BaseException, delay: float) -> None:
            self.retried += 1
            log.info(
                "modal create for %s: try %d failed (%s); retrying in %.1fs",
                spec.trial_id,
                n,
                type(exc).__name__,
                delay,
            )

        # The create runs as its own task so that, if this trial is cancelled
        # while a request is in flight, a sandbox that still comes into being
        # is terminated rather than left running until its timeout. Cancelled
        # while merely queued (start cap, rate limit, backoff), it just stops.
        task = asyncio.ensure_future(
            retry(attempt, retryable=can_retry, backoff=self.backoff, on_retry=on_retry)
        )
        try:
            handle = await asyncio.shield(task)
        except asyncio.CancelledError:
            abandoned = True
            if not calling:
                task.cancel()
            task.add_done_callback(self._reap_late)
            self._background.add(task)
            raise
        except RetriesExhausted as exc:
            raise SandboxFailed(
                f"Modal Sandbox.create gave up after {exc.attempts} tries: "
                f"{type(exc.last).__name__}: {exc.last}",
                hint="lower --env-param create_rate / max_starting, or retry the job later",
            ) from exc
        except CrucibleError:
            raise
        except Exception as exc:
            raise self._map_error("Sandbox.create", exc, gpu) from exc
        self.created += 1
        _, refused_names = split_env(
            scrub_env({**spec.env, **self.params.env}, self._secret_values())
        )
        client = SandboxClient(self._sdk_checked(), self._secret_values, self._terminate)
        sandbox = ModalSandbox(
            client, handle, spec, lifetime=self.params.timeout, extra_env=refused_names
        )
        try:
            dirs = " ".join(
                shlex.quote(d)
                for d in (spec.workdir, "/tmp", "/logs/agent", "/logs/verifier", "/logs/artifacts")
            )
            # The processes the sandbox started with (its init, its entrypoint)
            # are listed now, before any agent runs, and kept on the host.
            res = await sandbox._check(f"mkdir -p {dirs} && {LIST_PROCS}", "setup")
            sandbox.spare(parse_procs(res.stdout))
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    def _reap_late(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if task.cancelled() or task.exception() is not None:
            return
        reaper = asyncio.ensure_future(self._terminate(task.result()))
        self._background.add(reaper)
        reaper.add_done_callback(self._background.discard)

    async def _terminate(self, handle: Any) -> None:
        try:
            await self._sdk_checked().aio(handle, "Sandbox.terminate")
        except Exception as exc:  # already gone, or the API blinked: the timeout still ends it
            log.warning("modal terminate failed: %s: %s", type(exc).__name__, exc)

    async def cleanup(self, job_id: str | None = None) -> int:
        """Terminate sandboxes of this app tagged with `job_id` (all crucible ones if None)."""
        sdk = self._sdk_checked()
        app = await self._ensure_app()
        tags = job_tags(job_id) if job_id else {TAG_MANAGED: "1"}
        app_id = sdk.prop(app, "App.app_id")
        handles: list[Any] = []
        try:
            listing = await self._list(app_id, tags)
        except Exception as exc:
            raise self._map_error("Sandbox.list", exc) from exc
        handles.extend(listing)
        await asyncio.gather(*(self._terminate(h) for h in handles))
        return len(handles)

    async def _list(self, app_id: str, tags: dict[str, str]) -> list[Any]:
        gen = self._sdk_checked().agen(
            None, "Sandbox.list", app_id=app_id, tags=tags, client=self._client
        )
        return [h async for h in gen]

    async def aclose(self) -> None:
        # A late create's done-callback adds its terminate here, so loop until quiet.
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
            await asyncio.sleep(0)
        if self._client is not None:
            client, self._client = self._client, None
            with contextlib.suppress(Exception):
                await self._sdk_checked().aio(client, "Client.close")
