"""Modal images for a job: each distinct image built at most once, and a
deterministic build failure remembered so that only the trials needing that
image fail (task_invalid), without a rebuild per trial.

A failure that a later build may not repeat (a registry pull, a server
error, the build running past the task's build timeout) is `sandbox_failed`
and is not remembered: the next trial that needs the image builds it again
(issue 18, defect 8). A Dockerfile that `ADD`s local files gets a hint:
Modal uploads only the sources of `COPY` (modal/_utils/docker_utils.py:12-17
collects COPY sources alone), so such a build cannot find them.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from crucible.errors import CrucibleError, ResourcesUnavailable, SandboxFailed, TaskInvalid
from crucible.sandboxes.base import SandboxSpec
from crucible.sandboxes.modal.sdk import Sdk
from crucible.tasks.taskfs import refuse_context

_ADD = re.compile(r"^\s*ADD\s+(.+)$", re.IGNORECASE | re.MULTILINE)


def local_adds(dockerfile: Path) -> list[str]:
    """Sources of `ADD` lines that are local paths (not URLs, not flags)."""
    try:
        text = dockerfile.read_text(errors="replace")
    except OSError:
        return []
    found: list[str] = []
    for args in _ADD.findall(text):
        words = [w for w in args.split() if not w.startswith("--")]
        found += [w for w in words[:-1] if "://" not in w]
    return found


def image_key(spec: SandboxSpec, override: str | None, named: str | None = None) -> str | None:
    if named:
        return f"named:{named}"
    if override:
        return f"registry:{override}"
    if spec.image:
        return f"registry:{spec.image}"
    if spec.dockerfile_dir is not None:
        ident = spec.environment_digest or str(Path(spec.dockerfile_dir).resolve())
        return f"dockerfile:{ident}"
    return None


class ImageCache:
    """The built images of one provider, by key, with their remembered failures."""

    def __init__(
        self,
        override: str | None,
        *,
        sdk: Callable[[], Sdk],
        app: Callable[[], Awaitable[Any]],
        map_error: Callable[[str, BaseException], CrucibleError],
        named: str | None = None,
        environment: str | None = None,
    ) -> None:
        self._override = override  # a registry image for every trial
        self._named = named  # an image published on Modal by name, for every trial
        self._environment = environment
        self._sdk = sdk
        self._app = app
        self._map_error = map_error
        self._images: dict[str, Any] = {}
        self._image_errors: dict[str, CrucibleError] = {}
        self._image_locks: dict[str, asyncio.Lock] = {}

    async def get(self, spec: SandboxSpec) -> Any:
        """The built image for a spec (built at most once per key), or None for Modal's default."""
        key = image_key(spec, self._override, self._named)
        if key is None:
            return None
        lock = self._image_locks.setdefault(key, asyncio.Lock())
        async with lock:
            if key in self._image_errors:
                raise self._image_errors[key]
            if key in self._images:
                return self._images[key]
            sdk = self._sdk()
            app = await self._app()
            try:
                if key.startswith("named:"):
                    # Published already: looked up by name, never built again here.
                    self._images[key] = sdk.sync(
                        None,
                        "Image.from_name",
                        key.removeprefix("named:"),
                        environment_name=self._environment,
                    )
                    return self._images[key]
                if key.startswith("registry:"):
                    image = sdk.sync(None, "Image.from_registry", key.removeprefix("registry:"))
                else:
                    assert spec.dockerfile_dir is not None
                    ctx = Path(spec.dockerfile_dir)
                    if not (ctx / "Dockerfile").is_file():
                        raise TaskInvalid(f"{ctx}/Dockerfile does not exist")
                    refuse_context(ctx)  # Modal's client uploads COPY sources, links followed
                    image = sdk.sync(
                        None, "Image.from_dockerfile", str(ctx / "Dockerfile"), context_dir=str(ctx)
                    )
                built = await asyncio.wait_for(
                    sdk.aio(image, "Image.build", app), spec.build_timeout_sec
                )
            except CrucibleError as exc:
                self._image_errors[key] = exc
                raise
            except TimeoutError:
                # Modal may still finish (and cache) the build: the next trial tries again.
                raise SandboxFailed(
                    f"Modal image {key} did not build within {spec.build_timeout_sec:.0f}s"
                ) from None
            except Exception as exc:
                err = self._map_error("image build", exc)
                adds = (
                    local_adds(Path(spec.dockerfile_dir) / "Dockerfile")
                    if spec.dockerfile_dir
                    else []
                )
                if isinstance(err, TaskInvalid) and adds:
                    err.hint = (
                        f"Modal uploads only COPY sources from the build context; "
                        f"use COPY instead of ADD for {', '.join(adds)}"
                    )
                if isinstance(err, TaskInvalid | ResourcesUnavailable):
                    self._image_errors[key] = err  # deterministic: do not rebuild per trial
                raise err from exc
            self._images[key] = built if built is not None else image
            return self._images[key]

    async def prepare(self, specs: list[SandboxSpec]) -> None:
        """Build each distinct image once, before the fan-out. A failed build is
        remembered and fails only the trials that need it (task_invalid)."""
        await self._app()
        firsts: dict[str, SandboxSpec] = {}
        for spec in specs:
            key = image_key(spec, self._override, self._named)
            if key is not None:
                firsts.setdefault(key, spec)
        sem = asyncio.Semaphore(4)

        async def build(spec: SandboxSpec) -> None:
            async with sem:
                with contextlib.suppress(TaskInvalid, ResourcesUnavailable, SandboxFailed):
                    await self.get(spec)

        await asyncio.gather(*(build(s) for s in firsts.values()))
