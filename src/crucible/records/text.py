"""Strings from a sandbox, a task or a model, made safe to store and to show.

Two rules, each in one function, because such a string is anything at all:

- `storable`: what a record (JSON in UTF-8, SQLite TEXT) can hold. A Python str
  can carry lone surrogates that no UTF-8 writer accepts: a file name that is not
  UTF-8 (os.listdir and tarfile decode its bytes with surrogateescape, so b"\\xff"
  is "\\udcff") and a JSON `"\\udcff"` escape (json.loads keeps it). Each becomes a
  visible escape: U+DC80..U+DCFF (an undecodable byte) -> "\\xNN", the byte the name
  had, as `ls -b` shows it; any other surrogate -> "\\uXXXX". Nothing else changes
  (NUL is fine in JSON and in SQLite). It is lossless enough to debug, though not
  reversible: a literal "\\xff" reads the same. Nesting is a limit too: json.loads
  takes lists nested ~1000 deep, pydantic writes 255 at most, so a value nested past
  MAX_DEPTH becomes the string TOO_DEEP (an agent's answer that an honest test kept as
  a detail must not make the record unwritable, and its 0 unread).
- `terminal_safe`: what may reach an operator's terminal. C0 and C1 control
  characters and DEL are removed, escape sequences (CSI, OSC, DCS..., lone ESC)
  whole with their parameters, and the bidi overrides and isolates (U+202A..U+202E,
  U+2066..U+2069) that reorder what is shown; newline and tab stay. An OSC 52
  clipboard write, a title change or a screen clear printed from a stage reason is
  then inert text, or nothing.

`storable_model` is the record writers' fallback: a model one of whose strings
slipped past the parse points is copied with every such string escaped, and the
places are named, so writing a record never raises out of a trial.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # the CLI prints through terminal_safe: no pydantic for `--help`
    from pydantic import BaseModel

T = TypeVar("T")
M = TypeVar("M", bound="BaseModel")

_SURROGATE = re.compile("[\ud800-\udfff]")
# An escape sequence whole (ECMA-48): strings (OSC, DCS, SOS, PM, APC) up to their
# terminator (BEL, ST) or the next ESC; CSI with its parameters and final byte; any
# other ESC with its intermediates and final byte. Then every single control left.
_SEQUENCE = re.compile(
    r"(?:\x1b[\]P^_X]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?"
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]?"
    "|[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"
)
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
MAX_NAMED = 20  # places a fallback names in its warning; the rest are counted
# Far below pydantic's serialization limit (255), with room for the record's own levels
# (trial -> steps -> verifier_result -> stages -> details).
MAX_DEPTH = 64
TOO_DEEP = f"[nested deeper than {MAX_DEPTH} levels: not kept]"


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c - 0xDC00:02x}" if 0xDC80 <= c <= 0xDCFF else f"\\u{c:04x}"


def storable_text(text: str) -> str:
    """`text` as UTF-8 can hold it (see the module's rule)."""
    if text.isascii():  # the common case, and no surrogate can be ASCII
        return text
    return _SURROGATE.sub(_escape, text)


def storable(value: T) -> T:
    """A str, or parsed JSON (dicts, lists, keys too), with every string storable and
    nothing nested past MAX_DEPTH. Walked without recursion: the value may be hostile
    JSON nested a thousand deep."""
    return _walk(value, None)


def _walk(value: Any, changed: list[str] | None, where: str = "") -> Any:
    if isinstance(value, str):
        out = storable_text(value)
        if changed is not None and out is not value and out != value:
            changed.append(where)
        return out
    if isinstance(value, bytes):  # JSON writes bytes as UTF-8 text, which they may not be
        try:
            value.decode()
            return value
        except UnicodeDecodeError:
            if changed is not None:
                changed.append(where)
            return value.decode("utf-8", "backslashreplace")
    if not isinstance(value, dict | list | tuple):
        return value
    root: Any = {} if isinstance(value, dict) else []
    todo: list[tuple[Any, Any, str, int]] = [(value, root, where, 1)]
    while todo:
        src, dst, at, depth = todo.pop()
        items = src.items() if isinstance(src, dict) else enumerate(src)
        for key, v in items:
            here = f"{at}.{key}" if at else str(key)
            if isinstance(key, str):
                key = _walk(key, changed, here)
            child: Any
            if isinstance(v, dict | list | tuple) and depth >= MAX_DEPTH:
                child = TOO_DEEP
                if changed is not None:
                    changed.append(here)
            elif isinstance(v, dict | list | tuple):
                child = {} if isinstance(v, dict) else []
                todo.append((v, child, here, depth + 1))
            else:
                child = _walk(v, changed, here)
            if isinstance(dst, dict):
                dst[key] = child
            else:
                dst.append(child)
    return root


def storable_model(model: M) -> tuple[M, list[str]]:
    """`model` as it can be written: itself when every string is storable, else a
    copy with each offending one escaped, and the dotted places of those."""
    changed: list[str] = []
    data = _walk(model.model_dump(mode="python"), changed)
    if not changed:
        return model, []
    return type(model).model_validate(data), changed


def named(places: list[str]) -> str:
    """The places of a fallback, for a warning: the first MAX_NAMED, then a count."""
    shown = ", ".join(storable_text(p) for p in places[:MAX_NAMED])
    more = len(places) - MAX_NAMED
    return shown + (f" (+{more} more)" if more > 0 else "")


def terminal_safe(text: str) -> str:
    """`text` with nothing a terminal would act on (see the module's rule)."""
    if text.isascii() and text.isprintable():
        return text
    if _UNSAFE.search(text) is None:
        return text
    return _SEQUENCE.sub("", storable_text(text))
