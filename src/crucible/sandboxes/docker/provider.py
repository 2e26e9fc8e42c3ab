"""The `docker` provider: one long-lived container per trial, through the Docker Engine API.

Uses the docker SDK (sync) on the provider's own thread pool. A container runs
docker-init as pid 1 and a sleeping keeper under it; commands are execs.
Limits: cpus (nano_cpus), memory with no swap, pids, disk size where the
storage driver supports it; no network unless the task asks for it; every
capability a task should not need dropped, and no-new-privileges. Nothing of
the host's environment goes in: only spec.env.

Honours DOCKER_HOST / DOCKER_TLS_VERIFY / DOCKER_CERT_PATH (or `--env-param host=...`);
`--env-param image=NAME` is the image for specs that name none (default debian:bookworm-slim).
A task with environment/docker-compose.yaml gets its sidecars too (compose.py);
`--env-param compose_timeout=SEC` bounds their start (default 300).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import secrets
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from crucible.errors import ProviderUnavailable, ResourcesUnavailable, SandboxFailed
from crucible.sandboxes import gradekit
from crucible.sandboxes.base import Provider, ProviderCapabilities, SandboxSpec
from crucible.sandboxes.docker import hostblock
from crucible.sandboxes.docker.build import ImageCache, spec_image_key
from crucible.sandboxes.docker.client import EngineClient, remove_container
from crucible.sandboxes.docker.compose import ComposeStack, MainOptions, start_timeout
from crucible.sandboxes.docker.exec import KEEPER_CMD, KIT_MOUNT
from crucible.sandboxes.docker.sandbox import DockerSandbox, sdk, short
from crucible.sandboxes.overrides import SpecOverrides

log = logging.getLogger(__name__)

LABEL_JOB = "crucible.job"
LABEL_TRIAL = "crucible.trial"
LABEL_TASK = "crucible.task"
LOG_DIRS = ("/logs/agent", "/logs/verifier", "/logs/artifacts")

# Kept: CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, SETGID, SETUID, SETPCAP,
# NET_BIND_SERVICE (package installs and servers in tasks need them).
CAP_DROP = ["NET_RAW", "MKNOD", "AUDIT_WRITE", "SYS_CHROOT", "SETFCAP"]

DEFAULT_IMAGE = "debian:bookworm-slim"  # scripts/setup-docker.sh makes it where no registry is

HINT_ENGINE = (
    "start the engine (sudo dockerd &, or systemctl start docker), point DOCKER_HOST at "
    "a running one, or run scripts/setup-docker.sh"
)


class DockerProvider(Provider):
    """Sandboxes as Docker containers on the engine DOCKER_HOST names (or the local socket)."""

    name = "docker"
    default_concurrency = 8

    def __init__(
        self,
        host: str | None = None,
        image: str = DEFAULT_IMAGE,
        compose_timeout: str | None = None,
        cpu: str | None = None,
        memory: str | None = None,
        timeout: str | None = None,
        env_variables: str | None = None,
        **params: str,
    ) -> None:
        # The operator's cpu/memory/timeout/env_variables over every task's (overrides.py).
        self.overrides = SpecOverrides.parse(
            "docker",
            {"cpu": cpu, "memory": memory, "timeout": timeout, "env_variables": env_variables},
        )
        self._host = host
        self._default_image = image
        # A compose task's services, until their depends_on conditions are met (compose.py).
        self._compose_timeout = start_timeout(compose_timeout)
        if params:
            log.warning("docker provider ignores unknown parameter(s): %s", ", ".join(params))
        self._pool = ThreadPoolExecutor(max_workers=256, thread_name_prefix="crucible-docker")
        self._api: Any = None
        self._api_lock = asyncio.Lock()
        self._images: ImageCache | None = None
        self._info: dict[str, Any] | None = None
        self._storage_ok: bool | None = None  # None: not tried yet
        self._kit: tuple[Path | None] | None = None  # None: not looked for yet

    # -- plumbing ---------------------------------------------------------------

    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    def _where(self) -> str:
        import os

        return self._host or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"

    async def api(self) -> Any:
        """The low-level client, made (and the engine pinged) on first use."""
        if self._api is not None:
            return self._api
        async with self._api_lock:
            if self._api is None:
                self._api = await self._connect()
                self._images = ImageCache(self._api, self._call, lambda: self.build_gate)
        return self._api

    async def _connect(self) -> Any:
        docker = sdk()

        def connect() -> Any:
            kwargs = docker.utils.kwargs_from_env()
            if self._host:
                kwargs["base_url"] = self._host
            api = docker.APIClient(timeout=60, max_pool_size=64, **kwargs)
            api.ping()
            self._info = api.info()
            return api

        try:
            api = await asyncio.wait_for(self._call(connect), 30)
        except (TimeoutError, docker.errors.DockerException, OSError) as e:
            raise ProviderUnavailable(
                f"no Docker engine answers at {self._where()}: {short(e)}", hint=HINT_ENGINE
            ) from e
        return api

    @property
    def images(self) -> ImageCache:
        assert self._images is not None, "call api() first"
        return self._images

    # -- Provider ---------------------------------------------------------------

    async def preflight(self) -> None:
        await self.api()

    def capabilities(self) -> ProviderCapabilities:
        runtimes = (self._info or {}).get("Runtimes") or {}
        # The engine does not say how many GPUs it has; with the NVIDIA runtime
        # present, a request is passed through and the engine refuses what it lacks.
        gpus = 8 if "nvidia" in runtimes else 0
        return ProviderCapabilities(
            gpus=gpus,
            network_allowlist=False,
            isolation=(
                "Docker container: namespaces; cgroup limits on cpus, memory (no swap) and pids; "
                "disk size only on storage drivers with quotas; capabilities dropped, "
                "no-new-privileges; network off unless the task asks for it"
            ),
            # On a bridge the host is the gateway: its addresses are blocked where the
            # engine is ours to enter (hostblock.py), else reachable from a container.
            host_addresses=(
                "blocked"
                if hostblock.can_block(self._where())
                else "reachable"
                if self._where().startswith("unix:")
                else "elsewhere"
            ),
        )

    async def prepare(self, specs: list[SandboxSpec]) -> None:
        """Resolve every distinct image up front; failures surface again in create()."""
        await self.api()
        self.images.log_dir = self.log_dir
        seen: dict[Any, SandboxSpec] = {}
        for spec in specs:
            key = spec_image_key(spec)
            if key is not None:
                seen.setdefault(key, spec)
        results = await asyncio.gather(
            *(self.images.resolve(s) for s in seen.values()), return_exceptions=True
        )
        for spec, res in zip(seen.values(), results, strict=True):
            if isinstance(res, BaseException):
                log.warning("image for task %s: %s", spec.task_name, short(res))

    async def create(self, spec: SandboxSpec) -> DockerSandbox:
        spec = self.overrides.apply(spec)
        docker = sdk()
        await self.api()
        if spec.network == "allowlist":
            raise ResourcesUnavailable(
                "the docker provider cannot enforce a network allowlist",
                hint="run the task with network 'public' or 'none', or on a provider with allowlists",
            )
        if spec.gpus > 0 and "nvidia" not in ((self._info or {}).get("Runtimes") or {}):
            raise ResourcesUnavailable(
                f"task asks for {spec.gpus} GPU(s) but this Docker engine has no NVIDIA runtime",
                hint="install nvidia-container-toolkit on the engine host",
            )

        labels = {LABEL_JOB: spec.job_id, LABEL_TRIAL: spec.trial_id, LABEL_TASK: spec.task_name}
        stack = None
        if spec.compose_file is not None:  # read and checked first: TaskInvalid before a build
            engine = EngineClient(lambda: self._api, self._call, self._pool)
            hardening = {"cap_drop": CAP_DROP, "security_opt": ["no-new-privileges"]}
            timeout = start_timeout(spec.params.get("compose_timeout"), self._compose_timeout)
            stack = ComposeStack(
                engine, self.images, spec, labels, hardening, timeout,
                block_host=hostblock.can_block(self._where()),
            )  # fmt: skip
        if not spec.image and spec.dockerfile_dir is None:
            # A spec naming no image (the conformance suite, ad-hoc sandboxes) gets the base one.
            spec = spec.model_copy(update={"image": self._default_image})
        try:
            image = await self.images.resolve(spec)
            image_user = await self.images.user_of(image)
        except (docker.errors.DockerException, OSError) as e:
            raise SandboxFailed(f"the engine failed while looking up the image: {short(e)}") from e

        if stack is None:
            return await self._start_main(spec, image, image_user, labels, MainOptions())

        async def start_main(opts: MainOptions) -> DockerSandbox:
            box = await self._start_main(spec, image, image_user, labels, opts)
            box.companions = stack
            return box

        return await stack.up(image, start_main)

    async def _start_main(
        self,
        spec: SandboxSpec,
        image: str,
        image_user: str,
        labels: dict[str, str],
        opts: MainOptions,
    ) -> DockerSandbox:
        docker = sdk()
        api = await self.api()
        device_requests = None
        if spec.gpus > 0:
            device_requests = [docker.types.DeviceRequest(count=spec.gpus, capabilities=[["gpu"]])]
        storage_opt = None
        if spec.storage_mb and self._storage_supported():
            storage_opt = {"size": f"{spec.storage_mb}M"}
        network = opts.network or ("bridge" if spec.network == "public" else "none")
        networking = None
        if opts.aliases:
            endpoint = api.create_endpoint_config(aliases=opts.aliases)
            networking = api.create_networking_config({network: endpoint})
        shared = network.startswith("container:")  # a namespace that has its own host name
        # Where the host's addresses get blocked, the container starts with no network: the
        # image's ENTRYPOINT (the task author's code) runs at once, and would reach the
        # host before the routes are in. It joins its network once they are (join_late).
        late = spec.network == "public" and not shared and hostblock.can_block(self._where())
        if late:
            networking = None

        kit = await self._grading_kit()

        def host_config(storage: dict[str, str] | None) -> Any:
            return api.create_host_config(
                binds={str(kit): {"bind": KIT_MOUNT, "mode": "ro"}} if kit else None,
                init=True,
                nano_cpus=int(spec.cpus * 1e9),
                mem_limit=f"{spec.memory_mb}m",
                memswap_limit=f"{spec.memory_mb}m",  # equal: no swap
                pids_limit=spec.pids_limit,
                network_mode="none" if late else network,
                cap_drop=CAP_DROP,
                security_opt=["no-new-privileges"],
                storage_opt=storage,
                device_requests=device_requests,
            )

        name = f"crucible-{_slug(spec.trial_id)}-{secrets.token_hex(3)}"

        def make(storage: dict[str, str] | None) -> str:
            created = api.create_container(
                image,
                # As the command, as Harbor does: the image's ENTRYPOINT runs (its set-up
                # happens) and gets the keeper as its arguments (`exec "$@"` keeps it alive).
                command=KEEPER_CMD,
                entrypoint=opts.entrypoint,
                name=name,
                hostname=None if shared else "sandbox",
                user="0",  # see DockerSandbox.default_user
                working_dir=spec.workdir,
                environment={**opts.env, **spec.env},  # task.toml's env wins, as in Harbor
                labels={**opts.labels, **labels},
                healthcheck=opts.healthcheck,
                networking_config=networking,
                host_config=host_config(storage),
                use_config_proxy=False,  # the host's proxy settings stay on the host
            )
            cid: str = created["Id"]
            return cid

        try:
            try:
                cid = await self._call(make, storage_opt)
            except docker.errors.APIError as e:
                if storage_opt is None or not _is_storage_error(e):
                    raise
                log.info("storage quota refused by the engine; disk size not enforced: %s", e)
                self._storage_ok = False
                cid = await self._call(make, None)
        except docker.errors.APIError as e:
            raise SandboxFailed(f"the engine refused to create a container: {short(e)}") from e
        except (docker.errors.DockerException, OSError) as e:
            raise SandboxFailed(f"lost the engine while creating a container: {short(e)}") from e

        engine = EngineClient(lambda: self._api, self._call, self._pool)
        sandbox = DockerSandbox(
            engine, spec, cid, name, default_user=opts.user or image_user,
            kit=KIT_MOUNT if kit else None,
        )  # fmt: skip
        try:
            from crucible.sandboxes.docker.files import dirs_tar

            # Before start: no process needed, and /logs is there before anything runs.
            await self._call(api.put_archive, cid, "/", dirs_tar(("/logs", *LOG_DIRS)))
            await self._call(api.start, cid)
        except BaseException as e:
            await sandbox.close()
            if isinstance(e, docker.errors.DockerException | OSError):
                raise SandboxFailed(f"the container did not start: {short(e)}") from e
            raise
        if late:
            try:  # before any exec: the agent never sees the host's addresses (hostblock.py)
                await hostblock.join_late(self._call, api, sandbox, network, opts.aliases)
            except (docker.errors.DockerException, OSError) as e:
                await sandbox.close()
                raise SandboxFailed(
                    f"could not block the host's addresses in the container: {short(e)}"
                ) from e
        self.overrides.watch(sandbox)
        return sandbox

    async def _grading_kit(self) -> Path | None:
        """The host's grading kit (sandboxes/gradekit.py), bound read-only into every
        container: only an engine on this machine (a unix socket) sees our paths. Without
        it, grading and the kill sweep use the image's own shell (a weaker promise)."""
        if self._kit is None:
            kit = None
            if self._where().startswith("unix://"):
                kit = await asyncio.to_thread(gradekit.kit_dir, gradekit.default_base())
            else:
                log.warning("the engine is not on this machine: grading uses the image's shell")
            self._kit = (kit,)
        return self._kit[0]

    def _storage_supported(self) -> bool:
        if self._storage_ok is not None:
            return self._storage_ok
        info = self._info or {}
        driver = str(info.get("Driver", ""))
        status = dict(info.get("DriverStatus") or [])
        if driver == "overlay2":
            # Needs xfs mounted with pquota; the engine's refusal tells us about pquota.
            return str(status.get("Backing Filesystem", "")).lower() == "xfs"
        return driver in {"btrfs", "zfs", "devicemapper", "windowsfilter"}

    async def cleanup(self, job_id: str | None = None) -> int:
        docker = sdk()
        api = await self.api()
        label = f"{LABEL_JOB}={job_id}" if job_id is not None else LABEL_JOB
        found = await self._call(api.containers, all=True, filters={"label": label})
        # A sandbox is a trial's: its main container with any compose sidecars and holder.
        trials: set[str] = set()
        for c in found:
            try:  # one already being removed is waited for, so its network can go
                if await remove_container(self._call, api, c["Id"]):
                    trials.add((c.get("Labels") or {}).get(LABEL_TRIAL) or c["Id"])
            except docker.errors.APIError as e:
                raise SandboxFailed(f"could not remove container {c['Id'][:12]}: {e}") from e
        # A compose task's networks, once their containers are gone (part of those sandboxes).
        for net in await self._call(api.networks, filters={"label": label}):
            try:
                await self._call(api.remove_network, net["Id"])
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as e:
                raise SandboxFailed(f"could not remove network {net['Name']}: {e}") from e
        return len(trials)

    async def aclose(self) -> None:
        if self._api is not None:
            api, self._api = self._api, None
            await self._call(api.close)
        self._pool.shutdown(wait=False, cancel_futures=True)


def _slug(s: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_.-]+", "-", s).strip("-.")[:48] or "trial"


def _is_storage_error(e: BaseException) -> bool:
    text = str(e).lower()
    return "storage-opt" in text or "storage opt" in text or "quota" in text
