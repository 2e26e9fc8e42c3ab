"""The `submission` agent: applies a submission (records/submission.py) as the agent's work.

What the grading service runs in place of an agent, so a graded submission is a
trial like any other: the same sandbox, the same collection, the same Grader and
blame rules. Every file it reads or writes goes through the sandbox's exec as the
task's agent user (`[agent] user`), with `sh`, `cat`, `mkdir`, `chmod` and `rm` only,
so it can do nothing an agent's own process could not, and it needs no git or patch
in the image:
- text: written to `[metadata] answer_path` (an absolute sandbox path; a bad one is
  the task's fault, TaskInvalid) or /logs/agent/answer.txt;
- files: each written at its absolute path, its parents made, the text as UTF-8
  bytes exactly (trailing newlines kept);
- patch: parsed and applied on the host (agents/patch.py, agents/patch_apply.py) to the files read from
  the sandbox as the agent user, then written back; all or nothing: no file is
  written unless every hunk applies. Its paths are the workdir's: a file that is a
  link, or whose folder leads out of the workdir through a link, is refused, as is a
  file over MAX_READ_BYTES or not UTF-8 text. Folders a deleted file leaves empty go.
A submission that cannot be applied (a patch that does not apply, a path it may not
write) is the policy's failure: the agent result carries error type
`invalid_submission` and the trial is still graded (the service answers `invalid`,
reward 0). Every step it took is logged to the trial's agent/submission.txt.

A multi-step task (engine/steps.py) gets the submission once, in its first step's
agent phase; the later steps' agent phases do nothing, and each step is graded on
the sandbox as the earlier ones left it (a submission is one piece of work, not one
per step).
"""

from __future__ import annotations

import asyncio
import posixpath
import time
from dataclasses import dataclass, field

from pydantic import ValidationError

from crucible.agents.base import Agent, AgentContext
from crucible.agents.patch import PatchError, parse_patch
from crucible.agents.patch_apply import Outcome, apply_patch, touched
from crucible.errors import TaskInvalid
from crucible.records.submission import (
    DEFAULT_ANSWER_PATH,
    MAX_FILES,
    MAX_SUBMISSION_BYTES,
    SUBMISSION,
    FilesSubmission,
    PatchSubmission,
    TextSubmission,
    check_sandbox_path,
)
from crucible.records.trial import AgentError, AgentResult
from crucible.sandboxes.base import ExecResult, Sandbox

INVALID = "invalid_submission"
LOG_NAME = "submission.txt"
MAX_READ_BYTES = MAX_SUBMISSION_BYTES  # the largest file a patch may change

# Writes stdin to $1, its parents made first (a files submission: any absolute path).
_WRITE_ANY = 'd=${1%/*}; mkdir -p -- "${d:-/}" && cat > "$1"'
# Writes many small files in one exec: path, text, path, text, ... as arguments.
_WRITE_MANY = (
    'while [ "$#" -gt 1 ]; do d=${1%/*}; { [ -d "${d:-/}" ] || mkdir -p -- "$d"; } '
    '&& printf %s "$2" > "$1" || { printf "%s\\n" "cannot write $1" >&2; exit 1; }; shift 2; done'
)
# What one exec's arguments may hold (under Linux's 128 KiB an argument, 2 MiB in all).
SMALL_FILE_BYTES = 64 * 1024
BATCH_BYTES = 512 * 1024
# $1: the workdir, $2: a file under it. Its nearest existing folder must resolve inside
# the workdir (no link leads out), the file itself must be no link: exit 4 or 5 if not.
_INSIDE = """w=$(cd -P -- "$1" && pwd -P) || exit 9
w=${w%/}; f=$2; d=${f%/*}; a=$d
while [ -n "$a" ] && [ ! -e "$a" ] && [ ! -L "$a" ]; do a=${a%/*}; done
r=$(cd -P -- "${a:-/}" 2>/dev/null && pwd -P) || exit 4
case ${r%/}/ in "$w"/*) ;; *) exit 5;; esac
if [ -L "$f" ]; then exit 4; fi
"""
_READ = _INSIDE + 'if [ ! -e "$f" ]; then exit 3; fi\n[ -f "$f" ] || exit 4\nexec cat -- "$f"\n'
# Folders the removal empties go too, up to the workdir (as git apply does).
_DELETE = _INSIDE + (
    '[ -f "$f" ] || exit 4\nrm -f -- "$f" || exit 1\n'
    'p=${f%/*}; while [ "$p" != "$1" ] && rmdir -- "$p" 2>/dev/null; do p=${p%/*}; done; exit 0\n'
)
# $3: the mode to set, or empty.
_PUT = _INSIDE + (
    'mkdir -p -- "$d" || exit 1\n'
    'r=$(cd -P -- "$d" && pwd -P) || exit 4\n'
    'case ${r%/}/ in "$w"/*) ;; *) exit 5;; esac\n'
    'if [ -e "$f" ] && [ ! -f "$f" ]; then exit 4; fi\n'
    'cat > "$f" || exit 1\n[ -z "$3" ] || chmod "$3" -- "$f"\n'
)
_ABSENT = 3
_WHY = {
    4: "is a link, a folder or another non-file, or a folder on its way is not one",
    5: "leads out of the workdir through a link",
    9: "is under a workdir that does not exist",
}


class Refused(Exception):
    """The submission cannot be applied: (error type, message) for the agent result."""

    def __init__(self, message: str, kind: str = INVALID) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def answer_path(metadata: dict[str, object]) -> str:
    """Where a text submission goes: `[metadata] answer_path`, or the default."""
    declared = metadata.get("answer_path", DEFAULT_ANSWER_PATH)
    if not isinstance(declared, str):
        raise TaskInvalid("[metadata] answer_path must be a string")
    try:
        return check_sandbox_path(declared)
    except ValueError as exc:
        raise TaskInvalid(f"[metadata] answer_path: {exc}") from None


@dataclass
class _Io:
    """The sandbox's files as the agent user sees them, under one deadline."""

    sandbox: Sandbox
    user: str | None
    workdir: str
    deadline: float
    log: list[str] = field(default_factory=list)

    async def run(
        self, argv: list[str], data: bytes | None = None, cap: int = 1 << 16
    ) -> ExecResult:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Refused("the agent phase's time ran out applying it", kind="timeout")
        res = await self.sandbox.exec(
            argv, input=data, timeout=left, cwd="/", user=self.user, output_cap=cap
        )
        if res.timed_out:
            raise Refused("the agent phase's time ran out applying it", kind="timeout")
        return res

    def under(self, rel: str) -> str:
        return posixpath.join(self.workdir, rel)

    async def write_any(self, path: str, text: str) -> None:
        res = await self.run(["sh", "-c", _WRITE_ANY, "sh", path], _utf8(text, path))
        if not res.ok:
            raise Refused(f"cannot write {path[:200]!r} as the agent user: {_tail(res)}")
        self.log.append(f"wrote {path!r} ({len(text)} characters)")

    async def write_files(self, files: dict[str, str]) -> None:
        """Every file, small ones (no NUL) many to an exec as arguments, in order."""
        batch: list[str] = []
        size = 0
        for path, text in files.items():
            data = _utf8(text, path)
            if len(data) > SMALL_FILE_BYTES or "\x00" in text:
                await self._batch(batch)
                batch, size = [], 0
                await self.write_any(path, text)
                continue
            if size + len(data) + len(path) > BATCH_BYTES:
                await self._batch(batch)
                batch, size = [], 0
            batch += [path, text]
            size += len(data) + len(path.encode())
        await self._batch(batch)

    async def _batch(self, args: list[str]) -> None:
        if not args:
            return
        res = await self.run(["sh", "-c", _WRITE_MANY, "sh", *args])
        if not res.ok:
            raise Refused(f"{_tail(res)} as the agent user")
        self.log += [
            f"wrote {p!r} ({len(t)} characters)" for p, t in zip(args[::2], args[1::2], strict=True)
        ]

    async def read(self, rel: str) -> str | None:
        res = await self.run(
            ["sh", "-c", _READ, "sh", self.workdir, self.under(rel)], cap=MAX_READ_BYTES + 1
        )
        if res.exit_code == _ABSENT:
            return None
        self._check(res, rel, "read")
        if res.truncated or len(res.stdout.encode()) > MAX_READ_BYTES:
            raise Refused(
                f"{rel[:200]!r} is over {MAX_READ_BYTES} bytes: a patch may not change it"
            )
        if "\ufffd" in res.stdout:
            raise Refused(f"{rel[:200]!r} is not UTF-8 text: a patch may not change it")
        return res.stdout

    async def put(self, rel: str, out: Outcome) -> None:
        mode = "" if out.mode is None else f"{out.mode:o}"
        if out.text is None:
            res = await self.run(["sh", "-c", _DELETE, "sh", self.workdir, self.under(rel)])
            self._check(res, rel, "delete")
            self.log.append(f"deleted {rel!r}")
            return
        data = _utf8(out.text, rel)
        argv = ["sh", "-c", _PUT, "sh", self.workdir, self.under(rel), mode]
        self._check(await self.run(argv, data), rel, "write")
        self.log.append(
            f"wrote {rel!r} ({len(out.text)} characters{', mode ' + mode if mode else ''})"
        )

    def _check(self, res: ExecResult, rel: str, verb: str) -> None:
        if res.ok:
            return
        why = _WHY.get(res.exit_code) or f"failed: {_tail(res)}"
        raise Refused(f"cannot {verb} {rel[:200]!r} in {self.workdir} as the agent user: it {why}")


def _utf8(text: str, where: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise Refused(f"the text for {where[:200]!r} is not valid Unicode") from None


def _tail(res: ExecResult) -> str:
    return (res.stderr or res.stdout).strip()[-300:] or f"exit {res.exit_code}"


class SubmissionAgent(Agent):
    name = "submission"
    version = "2"

    def __init__(self, submission: TextSubmission | FilesSubmission | PatchSubmission) -> None:
        self.submission = submission

    async def run(self, ctx: AgentContext) -> AgentResult:
        steps = ctx.task.steps
        if steps and ctx.task.step_name not in (None, steps[0].name):
            (ctx.logs_dir / LOG_NAME).write_text(
                f"step {ctx.task.step_name}: nothing to do (applied in step {steps[0].name})\n"
            )
            return AgentResult(exit_code=0)
        user = ctx.task.config.agent.user
        io = _Io(
            ctx.sandbox,
            None if user is None else str(user),
            posixpath.normpath(ctx.task.workdir),
            time.monotonic() + ctx.timeout_sec,
        )
        try:
            await self._apply(ctx, io)
        except (Refused, PatchError) as exc:
            kind, message = (
                (exc.kind, exc.message) if isinstance(exc, Refused) else (INVALID, str(exc))
            )
            io.log.append(f"refused ({kind}): {message}")
            return AgentResult(exit_code=1, error=AgentError(type=kind, message=message))
        finally:
            (ctx.logs_dir / LOG_NAME).write_text("".join(f"{line}\n" for line in io.log))
        return AgentResult(exit_code=0)

    async def _apply(self, ctx: AgentContext, io: _Io) -> None:
        try:  # checked again: one built without validation must not pass the caps
            sub = SUBMISSION.validate_python(self.submission.model_dump())
        except ValidationError as exc:
            raise Refused(f"a malformed submission: {exc.errors()[0]['msg'][:300]}") from None
        if isinstance(sub, TextSubmission):
            await io.write_any(answer_path(dict(ctx.task.metadata)), sub.text)
        elif isinstance(sub, FilesSubmission):
            await io.write_files(dict(sub.files))
        else:
            # Parsed and applied off the event loop: a large patch is seconds of CPU.
            patches = await asyncio.to_thread(parse_patch, sub.patch)
            if len(patches) > MAX_FILES:
                raise Refused(f"the patch changes over {MAX_FILES} files")
            current = {rel: await io.read(rel) for rel in touched(patches)}
            outcome = await asyncio.to_thread(apply_patch, patches, current)
            for rel, out in sorted(outcome.items(), key=lambda kv: kv[1].text is not None):
                await io.put(rel, out)
