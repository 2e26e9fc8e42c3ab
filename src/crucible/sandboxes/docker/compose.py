"""A compose task's sidecars on the docker provider: started before main, torn down with it.

With the network, a task's services share a private bridge network of the trial, on
which each is reachable by its name (a network alias), main included. Without it, they
share one network namespace that has only loopback (held by a small holder container
made with network none), and every service name resolves to 127.0.0.1 there: an
internal Docker network would still route to the host's own addresses, which a task
with no network must never reach. (Services then share ports, as in Harbor, whose
no-network compose tasks share one namespace too.)

Services start in `depends_on` order; a dependency's condition (started, healthy,
completed) is waited for, within one start timeout for the whole stack (`--env-param
compose_timeout=SEC`, default 300). A sidecar that never turns healthy, exits or misses
its condition is the environment's failure (`SandboxFailed`), never a 0.

Sidecars get main's hardening (capabilities dropped, no-new-privileges) and caps: their
declared memory, cpus and pids limits, or the task's. Everything carries the job and
trial labels, so `crucible sandboxes cleanup` finds what a crash left behind; `down()`
removes the containers, their anonymous volumes and the network, and never raises.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from crucible.errors import SandboxFailed, TaskInvalid
from crucible.sandboxes.base import Sandbox, SandboxSpec
from crucible.sandboxes.docker import hostblock
from crucible.sandboxes.docker.build import ImageCache
from crucible.sandboxes.docker.client import EngineClient
from crucible.sandboxes.docker.exec import KEEPER_CMD
from crucible.sandboxes.docker.sandbox import DockerSandbox, sdk, short
from crucible.tasks.compose import (
    MAIN,
    MAIN_IMAGE_VAR,
    ComposeFile,
    Service,
    compose_variables,
    load_compose,
)
from crucible.tasks.compose_fields import Condition, Health
from crucible.tasks.hostvars import HostEnv

log = logging.getLogger(__name__)

LABEL_SERVICE = "crucible.service"
DEFAULT_START_TIMEOUT_SEC = 300.0
POLL_SEC = 0.25


@dataclass
class MainOptions:
    """What the compose file adds to main's container (provider.create makes it)."""

    network: str | None = None  # a network's name, or "container:ID" (a shared namespace)
    aliases: list[str] = field(default_factory=list)  # on a network only
    env: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    entrypoint: list[str] | str | None = None
    user: str | None = None
    healthcheck: dict[str, Any] | None = None


StartMain = Callable[[MainOptions], Awaitable[DockerSandbox]]


def start_timeout(value: str | None, default: float = DEFAULT_START_TIMEOUT_SEC) -> float:
    """`compose_timeout` (seconds, from --env-param), checked."""
    if value is None or value == "":
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise ValueError(f"compose_timeout: not a number of seconds above 0: {value!r}")
    return seconds


def health_config(health: Health | None) -> dict[str, Any] | None:
    if health is None:
        return None
    out: dict[str, Any] = {"test": health.test} if health.test else {}
    for key, value in (
        ("interval", health.interval_ns),
        ("timeout", health.timeout_ns),
        ("start_period", health.start_period_ns),
        ("retries", health.retries),
    ):
        if value:
            out[key] = value
    return out


class ComposeStack:
    """The sidecars and network of one trial."""

    def __init__(
        self,
        engine: EngineClient,
        images: ImageCache,
        spec: SandboxSpec,
        labels: dict[str, str],
        hardening: dict[str, Any],
        timeout: float = DEFAULT_START_TIMEOUT_SEC,
        block_host: bool = False,  # hostblock.can_block: its addresses blocked in sidecars
    ) -> None:
        assert spec.compose_file is not None
        self._block_host = block_host
        self.spec = spec
        variables = compose_variables(
            spec.env,
            env_dir=spec.compose_file.parent,
            cpus=spec.cpus,
            memory_mb=spec.memory_mb,
            image=spec.image,
        )
        # Read again as the loader read it: the host variables the task was allowed, no more.
        self.compose: ComposeFile = load_compose(
            spec.compose_file,
            variables,
            main_image=spec.image,
            host=HostEnv.of(spec.host_env).scope(),
        )
        self._engine = engine
        self._images = images
        self._labels = labels
        self._hardening = hardening  # cap_drop and security_opt, as main has them
        self._prefix = f"crucible-{_slug(spec.trial_id)}-{secrets.token_hex(3)}"
        self.network: str | None = None  # the bridge network of a task with the network
        self._mode: str | None = None  # services' network_mode
        self._holder: DockerSandbox | None = None  # the shared namespace's, without it
        self.sidecars: dict[str, DockerSandbox] = {}
        self._down = False
        self._timeout = timeout

    @property
    def _api(self) -> Any:
        return self._engine.api()

    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await self._engine.call(fn, *args, **kwargs)

    async def up(self, main_image: str, start_main: StartMain) -> DockerSandbox:
        """Network, then every service in order; main is made by `start_main`. On any
        failure everything made so far is removed before the error goes on."""
        docker = sdk()
        deadline = time.monotonic() + self._timeout
        main: DockerSandbox | None = None
        try:
            await self._make_network(main_image)
            for name in self.compose.start_order():
                svc = self.compose.main if name == MAIN else self.compose.sidecars[name]
                for dep, condition in svc.depends_on.items():
                    await self._wait(dep, condition, deadline)
                if name == MAIN:
                    main = await start_main(self._main_options())
                    self.sidecars[MAIN] = main  # for waits on main; not a sidecar to close
                else:
                    await self._start_sidecar(svc, main_image)
        except BaseException as e:
            self.sidecars.pop(MAIN, None)
            if main is not None:
                await main.close()  # its close brings the stack down
            else:
                await self.down()
            if isinstance(e, docker.errors.DockerException | OSError):
                raise SandboxFailed(f"compose services did not start: {short(e)}") from e
            raise
        self.sidecars.pop(MAIN, None)
        assert main is not None
        return main

    def service(self, name: str) -> Sandbox | None:
        return self.sidecars.get(name)

    async def _make_network(self, main_image: str) -> None:
        api, name = self._api, f"{self._prefix}-net"
        if self.spec.network == "public":
            await self._call(
                api.create_network, name, driver="bridge", labels=self._labels, check_duplicate=True
            )
            self.network = self._mode = name
            return
        names = [MAIN, *self.compose.sidecars]
        created = await self._call(
            api.create_container,
            main_image,  # it has sh and sleep: main's keeper needs them too
            entrypoint=KEEPER_CMD,
            command=[],
            name=name,
            labels={**self._labels, LABEL_SERVICE: "(network)"},
            host_config=api.create_host_config(
                init=True,
                network_mode="none",
                extra_hosts={n: "127.0.0.1" for n in names},
                nano_cpus=int(0.1e9),
                mem_limit="32m",
                memswap_limit="32m",
                pids_limit=16,
                read_only=True,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
            ),
            use_config_proxy=False,
        )
        cid: str = created["Id"]
        self._holder = DockerSandbox(self._engine, self.spec, cid, name)
        await self._call(api.start, cid)
        self._mode = f"container:{cid}"

    def _endpoint(self, alias: str) -> Any:
        if self.network is None:
            return None  # a shared namespace: names are in its /etc/hosts
        api = self._api
        return api.create_networking_config(
            {self.network: api.create_endpoint_config(aliases=[alias])}
        )

    def _main_options(self) -> MainOptions:
        main = self.compose.main
        return MainOptions(
            network=self._mode,
            aliases=[MAIN] if self.network else [],
            env=main.environment,
            labels=main.labels,
            entrypoint=main.entrypoint,
            user=main.user,
            healthcheck=health_config(main.healthcheck),
        )

    async def _image_of(self, svc: Service, main_image: str) -> str:
        if svc.build is not None:
            return await self._images.built(
                svc.build, self.spec.build_timeout_sec, self.spec.builds_with_network
            )
        assert svc.image is not None
        if svc.image == MAIN_IMAGE_VAR:
            return main_image
        return await self._images.image(svc.image)

    async def _start_sidecar(self, svc: Service, main_image: str) -> None:
        api, spec = self._api, self.spec
        image = await self._image_of(svc, main_image)
        memory = svc.memory_mb or spec.memory_mb
        pids = svc.pids_limit or spec.pids_limit
        name = f"{self._prefix}-{svc.name}"
        # A sidecar is the task author's code: with network, it starts on "none" and joins
        # the trial's network once the host's addresses are blocked in it (hostblock.py).
        late = self.network is not None and self._block_host
        created = await self._call(
            api.create_container,
            image,
            command=svc.command,
            entrypoint=svc.entrypoint,
            name=name,
            hostname=(svc.hostname or svc.name) if self.network else None,
            user=svc.user or "",
            working_dir=svc.working_dir,
            environment=svc.environment,
            labels={**svc.labels, **self._labels, LABEL_SERVICE: svc.name},
            healthcheck=health_config(svc.healthcheck),
            volumes=svc.volumes or None,
            networking_config=None if late else self._endpoint(svc.name),
            host_config=api.create_host_config(
                init=bool(svc.init),
                nano_cpus=int((svc.cpus or spec.cpus) * 1e9),
                mem_limit=f"{memory}m",
                memswap_limit=f"{memory}m",
                pids_limit=pids,
                network_mode="none" if late else self._mode,
                read_only=svc.read_only,
                tmpfs=svc.tmpfs or None,
                **self._hardening,
            ),
            use_config_proxy=False,
        )
        cid: str = created["Id"]
        info = await self._call(api.inspect_container, cid)
        workdir = (info.get("Config") or {}).get("WorkingDir") or "/"
        # Its own limits: the sandbox's sweeps restore its pids limit after lending some.
        sidecar_spec = spec.model_copy(
            update={
                "workdir": workdir,
                "memory_mb": memory,
                "pids_limit": pids,
                "compose_file": None,
            }
        )
        user = svc.user or await self._images.user_of(image)
        self.sidecars[svc.name] = DockerSandbox(self._engine, sidecar_spec, cid, name, user)
        await self._call(api.start, cid)
        if late:
            assert self.network is not None
            await hostblock.join_late(
                self._call, api, self.sidecars[svc.name], self.network, [svc.name]
            )
        log.debug("compose service %s started as %s", svc.name, name)

    async def _wait(self, name: str, condition: Condition, deadline: float) -> None:
        if condition == Condition.started:
            return  # started before anything that depends on it
        box = self.sidecars[name]
        while True:
            state = (await self._call(self._api.inspect_container, box.id))["State"]
            health = state.get("Health")
            if condition == Condition.healthy and health is None:
                raise TaskInvalid(
                    f"compose service {name!r} has no healthcheck, but a service waits "
                    "for it to be healthy (condition: service_healthy)"
                )
            if condition == Condition.healthy and health.get("Status") == "healthy":
                return
            exited = state.get("Status") in ("exited", "dead")
            if condition == Condition.completed and exited and state.get("ExitCode") == 0:
                return
            why = None
            if exited:
                why = f"exited {state.get('ExitCode')} before it met {condition.value}"
            elif condition == Condition.healthy and health.get("Status") == "unhealthy":
                why = "is unhealthy"
            elif time.monotonic() > deadline:
                why = f"did not meet {condition.value} within {self._timeout:g}s"
            if why is not None:
                raise SandboxFailed(
                    f"compose service {name!r} {why}{_last(state)}{await self._tail(box)}",
                    hint="a slow service: raise the limit with --env-param compose_timeout=SEC",
                )
            await asyncio.sleep(POLL_SEC)

    async def _tail(self, box: DockerSandbox) -> str:
        """The service's last lines of output, for the error; "" when there are none."""
        try:
            raw = await self._call(self._api.logs, box.id, tail=10)
        except Exception:
            return ""
        text = raw.decode("utf-8", "replace").strip() if isinstance(raw, bytes) else ""
        return f"; its last output:\n{text[-1500:]}" if text else ""

    async def down(self) -> None:
        """Remove the sidecars (and their anonymous volumes), then the network. Main is
        its sandbox's to remove, before this runs. Never raises."""
        if self._down:
            return
        self._down = True
        await asyncio.gather(*(box.close() for box in self.sidecars.values()))
        if self._holder is not None:
            await self._holder.close()  # once nothing shares its namespace
        if self.network is None or self._api is None:
            return  # a closed provider: `sandboxes cleanup` removes what is left
        docker = sdk()
        try:
            await self._call(self._api.remove_network, self.network)
        except docker.errors.NotFound:
            pass
        except (docker.errors.DockerException, OSError) as e:
            log.warning("could not remove network %s: %s", self.network, short(e))


def _last(state: dict[str, Any]) -> str:
    """The last healthcheck's output, for the error."""
    logs = (state.get("Health") or {}).get("Log") or []
    if not logs:
        return ""
    out = str(logs[-1].get("Output") or "").strip()
    return f" (last check exited {logs[-1].get('ExitCode')}: {out[-300:]})"


def _slug(s: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_.-]+", "-", s).strip("-.")[:40] or "trial"
