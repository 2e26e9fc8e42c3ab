"""The modal SDK surface this provider touches, declared once, and the guarded
wrapper through which every call reaches it.

`SDK_USES` lists every modal class, method, property and keyword argument the
modal provider calls; the code reaches the SDK only through `Sdk`, which
refuses a call or keyword not in the table. A test checks the table against
the installed modal package with inspect.signature, so SDK drift fails CI, and
the same table is checked against the test stand-in.

The SDK is imported lazily, in `load_sdk()` (tests replace
`crucible.sandboxes.modal.provider.load_sdk` with a stand-in), so `crucible --help`
never imports modal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from crucible.errors import ProviderUnavailable

Kind = Literal["aio", "agen", "sync", "property", "aiter"]


@dataclass(frozen=True)
class SdkUse:
    """One attribute of the modal SDK that the modal provider uses."""

    owner: str  # key of SDK_CLASSES
    attr: str
    kind: Kind
    kwargs: tuple[str, ...] = ()  # keyword arguments passed
    positional: int = 0  # positional arguments passed (self excluded); -1: *args

    @property
    def key(self) -> str:
        return f"{self.owner}.{self.attr}"


# Where each class lives, as a dotted path under the `modal` package.
SDK_CLASSES: dict[str, str] = {
    "Client": "Client",
    "App": "App",
    "Image": "Image",
    "Sandbox": "Sandbox",
    "SandboxFilesystem": "sandbox.sandbox.SandboxFilesystem",
    "ContainerProcess": "container_process.ContainerProcess",
    "StreamReader": "io_streams.StreamReader",
    "StreamWriter": "io_streams.StreamWriter",
}

_SANDBOX_CREATE_KWARGS = (
    "app",
    "image",
    "tags",
    "env",
    "timeout",
    "idle_timeout",
    "workdir",
    "gpu",
    "region",
    "cpu",
    "memory",
    "block_network",
    "outbound_cidr_allowlist",
    "outbound_domain_allowlist",
    "client",
)

SDK_USES: tuple[SdkUse, ...] = (
    SdkUse("Client", "from_credentials", "aio", positional=2),
    SdkUse("Client", "close", "aio"),
    SdkUse("App", "lookup", "aio", ("create_if_missing", "environment_name", "client"), 1),
    SdkUse("App", "app_id", "property"),
    SdkUse("Image", "from_registry", "sync", positional=1),
    SdkUse("Image", "from_name", "sync", ("environment_name",), 1),
    SdkUse("Image", "from_dockerfile", "sync", ("context_dir",), 1),
    SdkUse("Image", "build", "aio", positional=1),
    SdkUse("Sandbox", "create", "aio", _SANDBOX_CREATE_KWARGS),
    SdkUse("Sandbox", "list", "agen", ("app_id", "tags", "client")),
    SdkUse("Sandbox", "object_id", "property"),
    SdkUse("Sandbox", "exec", "aio", ("timeout", "workdir", "env", "text"), -1),
    SdkUse("Sandbox", "terminate", "aio"),
    SdkUse("Sandbox", "poll", "aio"),
    SdkUse("Sandbox", "filesystem", "property"),
    SdkUse("SandboxFilesystem", "read_bytes", "aio", positional=1),
    SdkUse("SandboxFilesystem", "write_bytes", "aio", positional=2),
    SdkUse("SandboxFilesystem", "copy_from_local", "aio", positional=2),
    SdkUse("SandboxFilesystem", "copy_to_local", "aio", positional=2),
    SdkUse("ContainerProcess", "stdout", "property"),
    SdkUse("ContainerProcess", "stderr", "property"),
    SdkUse("ContainerProcess", "stdin", "property"),
    SdkUse("ContainerProcess", "wait", "aio"),
    SdkUse("StreamReader", "__aiter__", "aiter"),
    SdkUse("StreamWriter", "write", "sync", positional=1),
    SdkUse("StreamWriter", "write_eof", "sync"),
    SdkUse("StreamWriter", "drain", "aio"),
)

# modal.exception classes the modal provider catches.
SDK_EXCEPTIONS: tuple[str, ...] = (
    "Error",
    "AuthError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "ConnectionError",
    "InternalError",
    "ServiceError",
    "InvalidError",
    "ConflictError",
    "NotFoundError",
    "ImageBuildError",
    "ExecTimeoutError",
    "SandboxTerminatedError",
    "SandboxFilesystemError",
    "SandboxFilesystemNotFoundError",
    "SandboxFilesystemIsADirectoryError",
    "SandboxFilesystemFileTooLargeError",
)

_USES: dict[str, SdkUse] = {u.key: u for u in SDK_USES}


def load_sdk() -> Any:
    """The modal module (tests swap this function for one returning a stand-in)."""
    try:
        import modal
    except ImportError as exc:
        raise ProviderUnavailable(
            f"the modal SDK is not installed ({exc})",
            hint="pip install 'crucible[modal]'  (needs modal>=1.6)",
        ) from None
    return modal


class Sdk:
    """Every SDK access goes through here, checked against SDK_USES."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.exc = module.exception

    def cls(self, owner: str) -> Any:
        obj = self.module
        for part in SDK_CLASSES[owner].split("."):
            obj = getattr(obj, part)
        return obj

    @staticmethod
    def _use(key: str, kind: Kind, nargs: int, kwargs: dict[str, Any]) -> SdkUse:
        use = _USES.get(key)
        if use is None or use.kind != kind:
            raise AssertionError(f"modal SDK use {key} ({kind}) is not declared in SDK_USES")
        undeclared = set(kwargs) - set(use.kwargs)
        if undeclared:
            raise AssertionError(
                f"{key}: keywords {sorted(undeclared)} are not declared in SDK_USES"
            )
        if use.positional >= 0 and nargs > use.positional:
            raise AssertionError(f"{key}: {nargs} positional arguments, {use.positional} declared")
        return use

    async def aio(self, target: Any, key: str, *args: Any, **kwargs: Any) -> Any:
        """`await target.<attr>.aio(...)`; target is a class (static) or an instance."""
        use = self._use(key, "aio", len(args), kwargs)
        if target is None:
            target = self.cls(use.owner)
        return await getattr(target, use.attr).aio(*args, **kwargs)

    def agen(self, target: Any, key: str, *args: Any, **kwargs: Any) -> Any:
        """`target.<attr>.aio(...)` for an async generator: returns it, unawaited."""
        use = self._use(key, "agen", len(args), kwargs)
        if target is None:
            target = self.cls(use.owner)
        return getattr(target, use.attr).aio(*args, **kwargs)

    def sync(self, target: Any, key: str, *args: Any, **kwargs: Any) -> Any:
        use = self._use(key, "sync", len(args), kwargs)
        if target is None:
            target = self.cls(use.owner)
        return getattr(target, use.attr)(*args, **kwargs)

    def prop(self, target: Any, key: str) -> Any:
        use = self._use(key, "property", 0, {})
        return getattr(target, use.attr)

    def aiter(self, target: Any, key: str) -> Any:
        self._use(key, "aiter", 0, {})
        return target.__aiter__()

    def is_exc(self, exc: BaseException, *names: str) -> bool:
        for name in names:
            assert name in SDK_EXCEPTIONS, f"modal.exception.{name} is not declared"
            cls = getattr(self.exc, name, None)
            if cls is not None and isinstance(exc, cls):
                return True
        return False
