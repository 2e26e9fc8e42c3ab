"""The offline `modal` package a program imports under `crucible modal run`."""

from __future__ import annotations

from typing import Any

from crucible.modalrt.sdk.app import App
from crucible.modalrt.sdk.cls import Cls
from crucible.modalrt.sdk.exception import Error
from crucible.modalrt.sdk.function import Function, FunctionCall
from crucible.modalrt.sdk.image import Image
from crucible.modalrt.sdk.misc import (
    Cron,
    Period,
    Retries,
    current_function_call_id,
    current_input_id,
    enable_output,
    interact,
    is_local,
)
from crucible.modalrt.sdk.partial import (
    asgi_app,
    batched,
    concurrent,
    enter,
    exit,
    fastapi_endpoint,
    method,
    parameter,
    web_server,
    wsgi_app,
)
from crucible.modalrt.sdk.stores import Dict, Queue
from crucible.modalrt.sdk.volume import Secret, Volume

# The submodule itself, so that `modal.exception` is in sys.modules: cloudpickle (when
# installed) then sends its classes by reference, and a caller's `except modal.exception.Error`
# catches what a container raised (by value it would be another class).
from . import exception

__version__ = "1.6.4"

__all__ = [
    "App",
    "Cls",
    "Cron",
    "Dict",
    "Error",
    "Function",
    "FunctionCall",
    "Image",
    "Period",
    "Queue",
    "Retries",
    "Secret",
    "Volume",
    "__version__",
    "asgi_app",
    "batched",
    "concurrent",
    "current_function_call_id",
    "current_input_id",
    "enable_output",
    "enter",
    "exception",
    "exit",
    "fastapi_endpoint",
    "interact",
    "is_local",
    "method",
    "parameter",
    "web_server",
    "wsgi_app",
]


def __getattr__(name: str) -> Any:
    raise AttributeError(f"modal.{name} is not supported by crucible's offline Modal runtime")
