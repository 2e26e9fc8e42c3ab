"""The Modal provider's SDK stand-in (tests/sandboxes/modal_standin.py), extended with the
part of the SDK that the Modal training recipe also calls: the Image layers (pip_install,
env, add_local_dir, add_local_file), Volume.from_name, and Sandbox.create with volumes.
Signatures are compared with the installed modal package in test_modal_recipe.py."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.sandboxes import modal_standin as base


class StandinImage(base.StandinImage):
    def __init__(self, ref: str, layers: list[str] | None = None) -> None:
        super().__init__(ref)
        self.layers = list(layers or [])

    def _with(self, layer: str) -> StandinImage:
        if self.built:
            raise base.exception.InvalidError("layers go on before the build")
        return StandinImage(self.ref + " + " + layer.split(" ")[0], [*self.layers, layer])

    @staticmethod
    def from_registry(tag: str) -> StandinImage:
        StandinImage._world.record("Image.from_registry", tag=tag)
        return StandinImage(f"registry:{tag}")

    def pip_install(self, *packages: str | list[str]) -> StandinImage:
        flat = [p for x in packages for p in ([x] if isinstance(x, str) else x)]
        return self._with("pip_install " + " ".join(flat))

    def env(self, vars: dict[str, str]) -> StandinImage:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in vars.items()):
            raise TypeError("Image.env takes str -> str")
        return self._with("env " + " ".join(f"{k}={v}" for k, v in vars.items()))

    def add_local_dir(
        self,
        local_path: str | Path,
        remote_path: str,
        *,
        copy: bool = False,
        ignore: Sequence[str] | Callable[[Path], bool] = [],  # noqa: B006 (the SDK's default)
    ) -> StandinImage:
        if not Path(local_path).is_dir():
            raise base.exception.InvalidError(f"{local_path} is not a directory")
        return self._with(f"add_local_dir {local_path} {remote_path} copy={copy}")

    def add_local_file(
        self, local_path: str | Path, remote_path: str, *, copy: bool = False
    ) -> StandinImage:
        if not Path(local_path).is_file():
            raise base.exception.InvalidError(f"{local_path} is not a file")
        return self._with(f"add_local_file {local_path} {remote_path} copy={copy}")


class StandinCloudBucketMount:
    pass


class StandinVolume:
    _world: base.World

    def __init__(self, name: str) -> None:
        self.name = name

    @staticmethod
    def from_name(
        name: str,
        *,
        environment_name: str | None = None,
        create_if_missing: bool = False,
        client: base.StandinClient | None = None,
    ) -> StandinVolume:
        StandinVolume._world.record("Volume.from_name", name=name, environment_name=environment_name,
                                    create_if_missing=create_if_missing)  # fmt: skip
        return StandinVolume(name)


class StandinSandbox(base.StandinSandbox):
    @base.aio_static
    async def create(
        *args: str,
        app: base.StandinApp | None = None,
        tags: dict[str, str] | None = None,
        image: base.StandinImage | None = None,
        timeout: int | None = 300,
        gpu: str | None = None,
        cpu: float | tuple[float, float] | None = None,
        memory: int | tuple[int, int] | None = None,
        volumes: dict[str | os.PathLike, StandinVolume | StandinCloudBucketMount] = {},  # noqa: B006
        client: base.StandinClient | None = None,
    ) -> StandinSandbox:
        world = StandinSandbox._world
        if not all(isinstance(v, StandinVolume) and str(k).startswith("/")
                   for k, v in volumes.items()):  # fmt: skip
            raise base.exception.InvalidError("volumes map absolute paths to Volumes")
        world.record("Sandbox.create.volumes", volumes={str(k): v.name for k, v in volumes.items()})
        return await base.StandinSandbox.create.aio(  # type: ignore[no-any-return]
            *args, app=app, tags=tags, image=image, timeout=timeout, gpu=gpu, cpu=cpu,
            memory=memory, client=client)  # fmt: skip


def install(root: Path, **options: Any) -> tuple[Any, base.World]:
    mod, world = base.install(root, **options)
    for cls in (StandinImage, StandinVolume):
        cls._world = world
    mod.Image = StandinImage
    mod.Volume = StandinVolume
    mod.Sandbox = StandinSandbox
    return mod, world
