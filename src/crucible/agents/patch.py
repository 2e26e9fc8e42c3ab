"""Unified diffs parsed and applied in Python, so a patch submission applies on any image.

Pure functions, no sandbox: `parse_patch` reads a diff into FilePatch records,
agents/patch_apply.py applies them to the files' texts, and agents/submission.py
reads those files from the sandbox as the agent user and writes the results back.

What is taken, as `git apply` and `patch -p1 --forward` (fuzz 0) take it:
- git diffs (`diff --git`, extended headers, C-quoted names) and plain `diff -u`/`-ruN`
  output (a name ends at its tab; an epoch timestamp means the file does not exist);
- `/dev/null` (or `new file mode`/`deleted file mode`) for created and deleted files;
  renames and copies; the modes 100644 and 100755 (new files and mode changes);
- names with one leading component stripped (-p1: `a/x` -> `x`);
- hunks matched exactly, at their line or at an offset (later hunks keep the offset),
  a hunk with less leading than trailing context pinned to the file's start and one
  with less trailing context pinned to its end (as patch does);
- `\\ No newline at end of file`, CRLF lines (a line ends only at `\\n`).
Anything else raises PatchError, with a message for the policy: binary patches, links
(mode 120000), submodules, other modes, names that are absolute, hold `..`, `.` or empty
parts or a NUL, hunks that do not match or that end early.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

DEV_NULL = "/dev/null"
MODES = {"100644": 0o644, "100755": 0o755}
_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
_GIT_KEYS = (
    *("old mode", "new mode", "deleted file mode", "new file mode", "rename from"),
    *("rename to", "copy from", "copy to", "similarity index", "dissimilarity index"),
)
_NOT_MODES = {"120000": "a symbolic link", "160000": "a submodule", "040000": "a directory"}


class PatchError(ValueError):
    """The patch cannot be applied faithfully (the message says why)."""


@dataclass(frozen=True)
class Hunk:
    old_start: int
    new_start: int
    old: tuple[str, ...]  # the lines it replaces, each with its "\n" (the file's last may lack it)
    new: tuple[str, ...]
    lead: int  # context lines before its first change
    trail: int  # and after its last


@dataclass
class FilePatch:
    old_path: str | None  # None: the file is created
    new_path: str | None  # None: the file is deleted
    hunks: list[Hunk] = field(default_factory=list)
    mode: int | None = None  # the new file's mode, or the mode it changes to
    copy: bool = False  # old_path stays (a copy, not a rename)

    @property
    def path(self) -> str:
        name = self.new_path or self.old_path
        assert name is not None
        return name


def split_lines(text: str) -> list[str]:
    """Lines with their "\\n"; only "\\n" ends one (str.splitlines also splits at \\r and others)."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    return [*lines, parts[-1]] if parts[-1] else lines


def check_relative(name: str) -> str:
    """A relative path inside the workdir: no NUL, `..`, `.` or empty part."""
    if "\x00" in name:
        raise PatchError("a file name holds a NUL byte")
    if name.startswith("/"):
        raise PatchError(f"the path {name[:100]!r} is absolute; a patch names workdir files")
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise PatchError(f"the path {name[:100]!r} holds '..', '.' or an empty part")
    if any(len(p.encode()) > 255 for p in parts) or len(name.encode()) > 4096:
        raise PatchError(f"the path {name[:100]!r}... is too long")
    return name


def _strip(name: str) -> str:
    """-p1 after the checks: `a/x` -> `x`; a name with no folder to strip is refused."""
    if name.startswith("/"):
        raise PatchError(f"the path {name[:100]!r} is absolute; a patch names workdir files")
    _, sep, rest = name.partition("/")
    if not sep or not rest:
        raise PatchError(f"{name[:100]!r} has no leading folder to strip (patches are taken -p1)")
    return check_relative(rest)


def _unquote(text: str) -> tuple[str, str]:
    """A C-quoted name (git quotes names with odd bytes) and what follows it."""
    out = bytearray()
    i = 1
    while i < len(text):
        c = text[i]
        if c == '"':
            try:
                return out.decode("utf-8"), text[i + 1 :]
            except UnicodeDecodeError:
                raise PatchError("a quoted file name is not UTF-8") from None
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt in _ESCAPES:
                out.append(_ESCAPES[nxt])
                i += 2
                continue
            if re.fullmatch(r"[0-3][0-7]{2}", text[i + 1 : i + 4]):
                out.append(int(text[i + 1 : i + 4], 8))
                i += 4
                continue
            raise PatchError(f"a quoted file name has an unknown escape \\{nxt}")
        out += c.encode()
        i += 1
    raise PatchError("a quoted file name is not closed")


def _is_epoch(stamp: str) -> bool:
    """diff -N writes a missing file's time as the epoch (in its own zone)."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.(\d+))? ([+-]\d{4})", stamp.strip())
    if m is None or (m.group(2) or "0").strip("0"):
        return False
    try:
        when = datetime.strptime(f"{m.group(1)} {m.group(3)}", "%Y-%m-%d %H:%M:%S %z")
    except ValueError:  # no such date or zone: a name's stamp, not the epoch
        return False
    return when.timestamp() == 0


def _header_name(rest: str, git: bool) -> str | None:
    """The name on a ---/+++ line, stripped; None for /dev/null or a plain diff's epoch."""
    if rest.startswith('"'):
        name, stamp = _unquote(rest)
    else:
        name, _, stamp = rest.partition("\t")
    if not git and stamp.strip() and _is_epoch(stamp):
        return None
    return None if name == DEV_NULL else _strip(name)


def _git_line_name(rest: str) -> str | None:
    """The name on a `diff --git a/X b/X` line (where no ---/+++ lines follow)."""
    if rest.startswith('"'):
        first, after = _unquote(rest)
        after = after.lstrip(" ")
        second = _unquote(after)[0] if after.startswith('"') else after
        return _strip(second) if _strip(first) == _strip(second) else None
    n = (len(rest) - 5) // 2
    name = rest[2 : 2 + n]
    return _strip(rest[: 2 + n]) if n > 0 and rest == f"a/{name} b/{name}" else None


def _mode(value: str) -> int:
    value = value.strip()
    if value in _NOT_MODES:
        raise PatchError(f"the patch makes {_NOT_MODES[value]} (mode {value}); that is refused")
    if value not in MODES:
        raise PatchError(
            f"the file mode {value[:20]!r} is not one a patch may set (100644, 100755)"
        )
    return MODES[value]


def _hunk(lines: list[str], i: int, where: str) -> tuple[Hunk, int]:
    m = _HUNK.match(lines[i])
    if m is None:
        raise PatchError(f"{where}: a malformed hunk header {lines[i][:80]!r}")
    old_start, new_start = int(m.group(1)), int(m.group(3))
    old_left = 1 if m.group(2) is None else int(m.group(2))
    new_left = 1 if m.group(4) is None else int(m.group(4))
    old: list[str] = []
    new: list[str] = []
    kinds: list[str] = []
    i += 1
    while old_left > 0 or new_left > 0:
        if i >= len(lines):
            raise PatchError(f"{where}: a hunk ends early (the patch is cut short)")
        line = lines[i]
        tag, text = (line[:1], line[1:] + "\n") if line else (" ", "\n")
        if tag == "\\" and kinds:
            _no_newline(old, new, kinds[-1], where)
            i += 1
            continue
        if tag == " " and old_left > 0 and new_left > 0:
            old.append(text)
            new.append(text)
            old_left, new_left = old_left - 1, new_left - 1
        elif tag == "-" and old_left > 0:
            old.append(text)
            old_left -= 1
        elif tag == "+" and new_left > 0:
            new.append(text)
            new_left -= 1
        else:
            raise PatchError(f"{where}: a hunk does not hold the lines its header counts")
        kinds.append(tag)
        i += 1
    if i < len(lines) and lines[i].startswith("\\") and kinds:
        _no_newline(old, new, kinds[-1], where)
        i += 1
    for side in (old, new):
        if any(not s.endswith("\n") for s in side[:-1]):
            raise PatchError(f"{where}: 'No newline at end of file' before a hunk's last line")
    changed = [k != " " for k in kinds]
    lead = changed.index(True) if any(changed) else len(kinds)
    trail = changed[::-1].index(True) if any(changed) else len(kinds)
    return Hunk(old_start, new_start, tuple(old), tuple(new), lead, trail), i


def _no_newline(old: list[str], new: list[str], kind: str, where: str) -> None:
    for side, takes in ((old, " -"), (new, " +")):
        if kind in takes:
            if not side or not side[-1].endswith("\n"):
                raise PatchError(f"{where}: a misplaced 'No newline at end of file'")
            side[-1] = side[-1][:-1]


def parse_patch(text: str) -> list[FilePatch]:
    """Every file's change in the patch, in order. Leading and trailing text (a commit
    message, `diff -r` lines) is skipped, as git and patch skip it."""
    if "\x00" in text:
        raise PatchError("the patch holds a NUL byte")
    lines = split_lines(text)
    lines = [line[:-1] if line.endswith("\n") else line for line in lines]
    out: list[FilePatch] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            fp, i = _git_section(lines, i)
        elif line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            fp, i = _plain_section(lines, i)
        elif line.startswith(("GIT binary patch", "Binary files ")):
            raise PatchError("binary patches are not taken; send the file as a files submission")
        elif line.startswith("@@ "):
            raise PatchError(f"a hunk with no file header before it (line {i + 1})")
        else:
            i += 1
            continue
        out.append(fp)
    if not out:
        raise PatchError("the patch holds no file changes")
    return out


def _hunks(lines: list[str], i: int, fp: FilePatch) -> int:
    where = fp.path
    while i < len(lines) and lines[i].startswith("@@"):
        hunk, i = _hunk(lines, i, where)
        fp.hunks.append(hunk)
    return i


def _plain_section(lines: list[str], i: int) -> tuple[FilePatch, int]:
    old = _header_name(lines[i][4:], git=False)
    new = _header_name(lines[i + 1][4:], git=False)
    if old is not None and new is not None and old != new:
        raise PatchError(f"the names {old[:80]!r} and {new[:80]!r} differ in a plain diff")
    if old is None and new is None:
        raise PatchError("a file section with no file on either side")
    fp = FilePatch(old, new)
    i = _hunks(lines, i + 2, fp)
    if not fp.hunks:
        raise PatchError(f"{fp.path}: a file header with no hunks")
    return fp, i


def _git_section(lines: list[str], i: int) -> tuple[FilePatch, int]:
    line_name = lines[i][len("diff --git ") :]
    head: dict[str, str] = {}
    i += 1
    while i < len(lines):
        line = lines[i]
        if line.startswith(("GIT binary patch", "Binary files ")):
            raise PatchError("binary patches are not taken; send the file as a files submission")
        key = next((k for k in _GIT_KEYS if line.startswith(k + " ")), None)
        if key is not None:
            head[key] = line[len(key) + 1 :]
        elif not line.startswith("index "):
            break
        i += 1
    old: str | None
    new: str | None
    if i + 1 < len(lines) and lines[i].startswith("--- ") and lines[i + 1].startswith("+++ "):
        old = _header_name(lines[i][4:], git=True)
        new = _header_name(lines[i + 1][4:], git=True)
        i += 2
    else:
        old = new = _git_line_name(line_name)
    fp = FilePatch(old, new)
    for kind in ("rename", "copy"):
        if f"{kind} from" in head or f"{kind} to" in head:
            src, dst = head.get(f"{kind} from", ""), head.get(f"{kind} to", "")
            fp.old_path, fp.new_path = _name(src), _name(dst)
            fp.copy = kind == "copy"
    if "new file mode" in head:
        fp.old_path, fp.mode = None, _mode(head["new file mode"])
        fp.new_path = fp.new_path or old
    if "deleted file mode" in head:
        _mode(head["deleted file mode"])
        fp.old_path, fp.new_path = fp.old_path or new, None
    if "new mode" in head:
        _mode(head.get("old mode", "100644"))
        fp.mode = _mode(head["new mode"])
    if fp.old_path is None and fp.new_path is None:
        raise PatchError(f"cannot tell which file {line_name[:100]!r} changes")
    if fp.old_path and fp.new_path and fp.old_path != fp.new_path and "rename from" not in head:
        if not fp.copy:
            raise PatchError(f"the names in {line_name[:100]!r} differ with no rename or copy")
    i = _hunks(lines, i, fp)
    return fp, i


def _name(text: str) -> str:
    """A rename/copy header's name (git writes it without the a/ b/ prefix)."""
    name = _unquote(text)[0] if text.startswith('"') else text
    return check_relative(name)
