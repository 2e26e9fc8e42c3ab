"""The modal SDK surface the Modal training recipe touches, declared once (TRAIN_SDK_USES),
and the guarded wrapper it calls through (the Modal provider's Sdk, over this table).

tests/train/test_modal_recipe.py checks every entry against the installed modal package
and the test stand-in with the provider's signature comparison, so SDK drift fails CI.
"""

from __future__ import annotations

from typing import Any

from crucible.sandboxes.modal.sdk import SDK_CLASSES, Kind, Sdk, SdkUse, load_sdk

TRAIN_SDK_CLASSES: dict[str, str] = {**SDK_CLASSES, "Volume": "Volume"}

TRAIN_SDK_USES: tuple[SdkUse, ...] = (
    SdkUse("Client", "from_credentials", "aio", positional=2),
    SdkUse("App", "lookup", "aio", ("create_if_missing", "environment_name", "client"), 1),
    SdkUse("Image", "from_registry", "sync", positional=1),
    SdkUse("Image", "pip_install", "sync", positional=-1),
    SdkUse("Image", "env", "sync", positional=1),
    SdkUse("Image", "add_local_dir", "sync", ("copy", "ignore"), 2),
    SdkUse("Image", "add_local_file", "sync", ("copy",), 2),
    SdkUse("Image", "build", "aio", positional=1),
    SdkUse("Volume", "from_name", "sync", ("create_if_missing", "environment_name", "client"), 1),
    SdkUse(
        "Sandbox",
        "create",
        "aio",
        ("app", "image", "gpu", "volumes", "timeout", "cpu", "memory", "client", "tags"),
    ),
    SdkUse("Sandbox", "object_id", "property"),
    SdkUse("Sandbox", "exec", "aio", ("env", "text"), -1),
    SdkUse("Sandbox", "terminate", "aio"),
    SdkUse("ContainerProcess", "stdout", "property"),
    SdkUse("ContainerProcess", "wait", "aio"),
    SdkUse("StreamReader", "__aiter__", "aiter"),
)
_USES: dict[str, SdkUse] = {u.key: u for u in TRAIN_SDK_USES}

__all__ = ["TRAIN_SDK_CLASSES", "TRAIN_SDK_USES", "TrainSdk", "load_sdk"]


class TrainSdk(Sdk):
    """The provider's guarded SDK wrapper, checking against TRAIN_SDK_USES."""

    def cls(self, owner: str) -> Any:
        obj = self.module
        for part in TRAIN_SDK_CLASSES[owner].split("."):
            obj = getattr(obj, part)
        return obj

    def _use(self, key: str, kind: Kind, nargs: int, kwargs: dict[str, Any]) -> SdkUse:  # type: ignore[override]
        use = _USES.get(key)
        if use is None or use.kind != kind:
            raise AssertionError(f"modal SDK use {key} ({kind}) is not declared in TRAIN_SDK_USES")
        undeclared = set(kwargs) - set(use.kwargs)
        if undeclared:
            raise AssertionError(f"{key}: keywords {sorted(undeclared)} are not declared")
        if use.positional >= 0 and nargs > use.positional:
            raise AssertionError(f"{key}: {nargs} positional arguments, {use.positional} declared")
        return use
