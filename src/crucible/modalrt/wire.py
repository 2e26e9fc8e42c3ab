"""Messages between a caller and its worker processes: length-prefixed pickles, and
the frames that carry them through the dispatching side (broker.py): a small JSON header
the broker reads (what is asked of which container) and the pickle, which it never opens.

cloudpickle is used when it is installed (lambdas and local classes then travel as
on Modal), plain pickle otherwise. A program run as a script defines its classes in
`__main__`, which is the runtime's own module in a worker; the unpickler maps
`__main__` and the program's module name onto each other so both sides find them.
"""

from __future__ import annotations

import io
import json
import pickle
import struct
import sys
from typing import IO, Any

try:
    import cloudpickle as _cloudpickle  # type: ignore[import-not-found, unused-ignore]
except ImportError:  # pragma: no cover - depends on the environment
    _cloudpickle = None

_HEADER = struct.Struct("!Q")
_FRAME = struct.Struct("!IQ")  # header bytes, blob bytes
MAX_FRAME_HEADER = 64 << 10  # a header is a few fields: past this the stream is refused
PROGRAM_MODULE: list[str] = []  # set once the program is imported: [its module name]


def dumps(obj: Any) -> bytes:
    if _cloudpickle is not None:
        return bytes(_cloudpickle.dumps(obj))
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if PROGRAM_MODULE and module in ("__main__", PROGRAM_MODULE[0]):
            for candidate in (module, PROGRAM_MODULE[0], "__main__"):
                mod = sys.modules.get(candidate)
                if mod is not None and hasattr(mod, name):
                    return getattr(mod, name)
        return super().find_class(module, name)


def loads(data: bytes) -> Any:
    return _Unpickler(io.BytesIO(data)).load()


def send(stream: IO[bytes], obj: Any) -> None:
    data = dumps(obj)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def recv(stream: IO[bytes]) -> Any:
    """The next message, or EOFError when the other side has gone."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError
    (size,) = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return loads(data)


class FrameError(EOFError):
    """A frame that is not one: the other side is gone or out of step."""


def send_frame(stream: IO[bytes], header: dict[str, Any], blob: bytes = b"") -> None:
    head = json.dumps(header).encode()
    stream.write(_FRAME.pack(len(head), len(blob)) + head + blob)
    stream.flush()


def _read(stream: IO[bytes], size: int) -> bytes:
    data = stream.read(size) if size else b""
    if len(data) < size:
        raise FrameError("the stream ended inside a frame")
    return data


def recv_frame(stream: IO[bytes]) -> tuple[dict[str, Any], bytes]:
    """The next frame's (header, blob); FrameError at the end or on a malformed frame."""
    raw = stream.read(_FRAME.size)
    if len(raw) < _FRAME.size:
        raise FrameError("the stream ended")
    hlen, blen = _FRAME.unpack(raw)
    if hlen > MAX_FRAME_HEADER:
        raise FrameError(f"a frame header of {hlen} bytes")
    try:
        header = json.loads(_read(stream, hlen))
    except ValueError as exc:
        raise FrameError(f"a frame header that is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise FrameError("a frame header that is not an object")
    return header, _read(stream, blen)
