"""A submitted Python file's text, read as Python reads it, or not at all.

Python decodes a source file by its byte-order mark or its PEP 263 coding cookie
(`# -*- coding: utf-7 -*-` on line 1 or 2; tokenize.detect_encoding). A host stage that
read the same bytes as UTF-8 would judge another program than the one that runs: in
UTF-7, `+AAo-` is a newline, so what a UTF-8 reader takes for one comment line runs as
code. So every host stage (contracts, io, judge) reads a submitted .py file through
`python_text`, and the rule is strict and simple: the file is UTF-8 (a BOM allowed),
its cookie, if any, names UTF-8 or ASCII, and it decodes under that cookie. Any other
file is refused with its reason (UndecodableSource, a verifier_failed: the attempt's,
counted 0), never decoded one way for the gate and another way for the interpreter.
Under this rule the file's bytes are exactly what Python decodes to the returned text,
so a stage that runs the file runs what the others read.
"""

from __future__ import annotations

import codecs
import io
import re
import tokenize

from crucible.errors import VerifierFailed

_ACCEPTED = frozenset({"utf-8", "utf-8-sig", "ascii"})  # codecs' names for them
# Any coding declaration in a comment on the first two lines (split at "\n" only, so a
# lone "\r" or form feed cannot hide one from this check that another reader would see).
_ANY_COOKIE = re.compile(rb"#[^\n]*?coding[:=][ \t]*([-\w.]+)")
HINT = "save the file as UTF-8 without a coding line naming another encoding"


class UndecodableSource(VerifierFailed):
    """A submitted Python file that Python would not decode as UTF-8."""


def _codec(name: str) -> str | None:
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def _refusal(data: bytes) -> tuple[str, str | None]:
    """(the encoding Python decodes `data` with, why it is refused or None)."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:  # an unknown codec, a BOM against its cookie, bad UTF-8
        return "", f"has an encoding Python refuses ({exc})"
    if _codec(encoding) not in _ACCEPTED:
        return encoding, f"declares coding {encoding!r}, not UTF-8"
    head = b"\n".join(data.split(b"\n", 2)[:2])
    for match in _ANY_COOKIE.finditer(head):
        named = match.group(1).decode("ascii", "replace")
        if _codec(named) not in _ACCEPTED:
            return encoding, f"declares coding {named!r}, not UTF-8"
    return encoding, None


def python_text(data: bytes, name: str) -> str:
    """The text Python decodes `data` (the file `name`) to; UndecodableSource when the
    file is not UTF-8 or declares another encoding (the module docstring's rule)."""
    encoding, why = _refusal(data)
    if why is None:
        try:
            return data.decode(encoding)  # "utf-8-sig" drops the BOM, as Python does
        except UnicodeDecodeError as exc:
            why = f"is not valid {encoding.upper()} at byte {exc.start}"
    raise UndecodableSource(f"the submitted file {name} {why}"[:500], hint=HINT)
