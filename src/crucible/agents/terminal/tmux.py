"""The terminal agent's opt-in `tmux` tool: one persistent terminal (a TTY) in the sandbox.

Sandboxes have no network and images rarely ship tmux, so crucible brings its
own: the host's tmux with the shared libraries `ldd` names and the host's
dynamic loader, copied once per process into a bundle dir and uploaded into
the sandbox under /tmp/crucible-tmux (a place the tamper record leaves out).
A wrapper runs it through that loader (`ld-linux --library-path`), so it
works on the host's userland, an image's userland and in Docker alike, and
nothing of it leaks into the programs tmux starts.

The pane runs bash with a PROMPT_COMMAND that writes `<exit code> <count>`
to a status file and signals the `tmux wait-for` channel of that count, each
channel once (tmux keeps one unwaited signal, and a second one on the same
channel would cancel it): `run` reads the count, types a command, waits on
the next count's channel (the prompt came back) and returns the exit code
and the pane's text; `send` types text and key names (for REPLs, editors and
prompts) and returns the screen once it stops changing; `read` returns it.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crucible.agents.base import AgentContext
from crucible.agents.terminal.tools import truncate_middle

DIR = "/tmp/crucible-tmux"
SOCKET = f"{DIR}/socket"
STATUS = f"{DIR}/status"
CHANNEL = "crucible-prompt"
SESSION = "crucible"
TERMINFO = ("/lib/terminfo", "/usr/share/terminfo", "/etc/terminfo")
_LDD_LINE = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x")

TMUX_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "tmux",
        "description": (
            "A persistent interactive terminal (tmux; a real TTY): `cd`, variables and running "
            "programs persist between calls. action=run types `command` and Enter into the shell "
            "and returns when its prompt is back, with the exit code and the screen. action=send "
            "types `text` (literally) and then `keys` (tmux key names: Enter, C-c, C-d, Escape, "
            "Up, Tab, ...) for REPLs, editors, pagers and prompts, and returns the screen once it "
            "settles. action=read returns the screen."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["run", "send", "read"]},
                "command": {"type": "string", "description": "Shell command (run)."},
                "text": {"type": "string", "description": "Text typed as is (send)."},
                "keys": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": 'Key names sent after text (send), e.g. ["Enter"].',
                },
                "timeout_sec": {"type": "integer", "description": "Wait at most this long."},
            },
            "required": ["action"],
        },
    },
}


class TmuxUnavailable(RuntimeError):
    pass


def host_bundle() -> Path:
    """The host's tmux, its libraries, its loader and a few terminfo entries, in one folder
    (made once per host binary, reused); TmuxUnavailable without a host tmux."""
    tmux = shutil.which("tmux")
    if tmux is None:
        raise TmuxUnavailable("no tmux on the host (install it: apt-get install tmux)")
    real = Path(tmux).resolve()
    key = hashlib.sha256(f"{real}:{real.stat().st_mtime_ns}".encode()).hexdigest()[:12]
    out = Path(tempfile.gettempdir()) / f"crucible-tmux-{os.getuid()}-{key}"
    trusted = _ours(out)
    if trusted and (out / "tmux").is_file():
        return out
    ldd = subprocess.run(["ldd", str(real)], capture_output=True, text=True, timeout=30)
    libs = [Path(m.group(1)) for m in _LDD_LINE.finditer(ldd.stdout)]
    loaders = [p for p in libs if p.name.startswith("ld-linux") or p.name.startswith("ld-musl")]
    if ldd.returncode != 0 or not loaders:
        raise TmuxUnavailable(f"cannot list the libraries of {real}: {ldd.stderr.strip()[:200]}")
    work = Path(tempfile.mkdtemp(prefix="crucible-tmux-", dir=out.parent))
    (work / "lib").mkdir()
    for lib in libs:
        shutil.copy2(lib.resolve(), work / "lib" / lib.name)
    shutil.copy2(real, work / "tmux.bin")
    for base in TERMINFO:
        for name in ("s/screen", "s/screen-256color", "t/tmux", "t/tmux-256color", "x/xterm"):
            src = Path(base) / name
            if src.is_file() and not (work / "terminfo" / name).exists():
                (work / "terminfo" / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, work / "terminfo" / name)
    loader = loaders[0].name
    (work / "tmux").write_text(
        "#!/bin/sh\n"
        f'd={DIR}/bin\nTERMINFO="$d/terminfo" exec "$d/lib/{loader}" --library-path "$d/lib" '
        '"$d/tmux.bin" "$@"\n'
    )
    (work / "tmux").chmod(0o755)
    if not trusted and out.exists():
        return work  # someone else's (or a writable) folder under the name: never used
    try:
        work.rename(out)
    except OSError:  # another rollout made it first
        shutil.rmtree(work, ignore_errors=True)
        return out if _ours(out) else work
    return out


def _ours(path: Path) -> bool:
    """A folder of this user's that nobody else can write into (nor into what it holds)."""
    try:
        st = path.lstat()
    except OSError:
        return False
    if not path.is_dir() or path.is_symlink() or st.st_uid != os.getuid() or st.st_mode & 0o022:
        return False
    return all(
        not p.is_symlink() and p.lstat().st_uid == os.getuid() and not p.lstat().st_mode & 0o022
        for p in path.rglob("*")
    )


class Tmux:
    """One rollout's terminal: started on first use, in the task's workdir, as the agent's user."""

    def __init__(self, ctx: AgentContext, budget: int) -> None:
        self.ctx = ctx
        self.budget = budget
        self.started = False
        user = ctx.task.config.agent.user
        self.user = str(user) if user is not None else None

    @property
    def tmux(self) -> str:
        return f"{DIR}/bin/tmux -S {SOCKET}"

    async def _sh(self, script: str, timeout: float) -> tuple[int, str, bool]:
        res = await self.ctx.sandbox.exec(
            ["sh", "-c", script], timeout=timeout, user=self.user, input=""
        )
        return res.exit_code, res.stdout + res.stderr, res.timed_out

    async def start(self) -> None:
        bundle = await asyncio.to_thread(host_bundle)
        await self.ctx.sandbox.upload_dir(bundle, f"{DIR}/bin")
        await self.ctx.sandbox.exec(["chmod", "-R", "a+rwX", DIR], timeout=30)
        prompt = (
            f'__s=$?; __n=$((__n+1)); echo "$__s $__n" > {STATUS}; '
            f"{self.tmux} wait-for -S {CHANNEL}-$__n"
        )
        env = {"PS1": "$ ", "PROMPT_COMMAND": prompt, "PAGER": "cat", "GIT_PAGER": "cat"}
        envs = " ".join(f"-e {shlex.quote(f'{k}={v}')}" for k, v in env.items())
        workdir = shlex.quote(self.ctx.task.workdir)
        code, out, _ = await self._sh(
            f"command -v bash >/dev/null || {{ echo 'no bash in the sandbox'; exit 3; }}; "
            f"echo '0 0' > {STATUS} && {self.tmux} new-session -d -s {SESSION} -x 160 -y 48 "
            f"-c {workdir} {envs} 'bash --norc --noprofile -i' && "
            f"{self.tmux} set-option -g history-limit 5000 >/dev/null && "
            f"{self.tmux} wait-for {CHANNEL}-1",  # the first prompt
            timeout=30,
        )
        if code != 0:
            raise TmuxUnavailable(f"tmux did not start in the sandbox (exit {code}): {out[-300:]}")
        self.started = True

    async def screen(self, history: bool = False) -> str:
        span = "-S - -E -" if history else ""
        _, out, _ = await self._sh(f"{self.tmux} capture-pane -p -J {span} -t {SESSION}", 30)
        return truncate_middle(out.rstrip("\n"), self.budget)[0]

    async def run(self, command: str, timeout: float) -> tuple[str, int | None, bool]:
        """(pane text since the command was typed, exit code or None, timed out)."""
        script = (
            f"before=$(cut -d' ' -f2 {STATUS}); {self.tmux} send-keys -R -t {SESSION} && "
            f"{self.tmux} clear-history -t {SESSION} && "
            f"{self.tmux} send-keys -t {SESSION} -l -- {shlex.quote(command)} && "
            f"{self.tmux} send-keys -t {SESSION} Enter && "
            f"{self.tmux} wait-for {CHANNEL}-$((before + 1)) && cut -d' ' -f1 {STATUS}"
        )
        code, out, timed_out = await self._sh(script, timeout)
        screen = await self.screen(history=True)
        if timed_out or code != 0:
            return screen, None, True
        last = out.strip().splitlines()[-1:] or [""]
        return screen, int(last[0]) if last[0].isdigit() else None, False

    async def send(self, text: str, keys: list[str], wait: float) -> str:
        parts = []
        if text:
            parts.append(f"{self.tmux} send-keys -t {SESSION} -l -- {shlex.quote(text)}")
        for key in keys:
            parts.append(f"{self.tmux} send-keys -t {SESSION} {shlex.quote(key)}")
        # then wait until two looks at the screen, a moment apart, agree (or `wait` runs out)
        settle = (
            f"prev=; i=0; while [ $i -lt {max(int(wait * 5), 1)} ]; do sleep 0.2; "
            f"cur=$({self.tmux} capture-pane -p -t {SESSION}); "
            '[ "$cur" = "$prev" ] && break; prev="$cur"; i=$((i+1)); done'
        )
        code, out, _ = await self._sh(" && ".join(parts or ["true"]) + f" && {settle}", wait + 30)
        if code != 0:
            return f"error: could not send keys (exit {code}): {out[-300:]}"
        return await self.screen()

    async def call(self, args: dict[str, Any], timeout: float) -> tuple[str, int | None, bool]:
        """The tool's output for the model, the exit code (run) and whether it timed out."""
        action = args.get("action") or ("run" if "command" in args else "read")
        try:
            if not self.started:
                await self.start()
        except TmuxUnavailable as exc:
            return f"error: {exc}", None, False
        if action == "run":
            command = args.get("command")
            if not isinstance(command, str) or not command.strip():
                return "error: action=run needs `command`", None, False
            screen, code, timed_out = await self.run(command, timeout)
            status = (
                f'[still running after {timeout:g}s: use action=send with keys ["C-c"] to stop '
                "it, or action=read to look again]"
                if timed_out
                else f"[exit code {code}]"
            )
            return f"{status}\n{screen}", code, timed_out
        if action == "send":
            text = args.get("text") if isinstance(args.get("text"), str) else ""
            keys = [k for k in args.get("keys") or [] if isinstance(k, str)][:50]
            if isinstance(args.get("keys"), str):
                keys = [args["keys"]]
            return await self.send(str(text), keys, min(timeout, 10.0)), None, False
        if action == "read":
            return await self.screen(), None, False
        return f"error: unknown action {action!r}; use run, send or read", None, False


def tmux_tools(chosen: Sequence[str], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The function-calling tools for the options' `tools`: bash left out unless chosen,
    tmux added when chosen (submit and docs stay)."""
    out = [t for t in tools if t["function"]["name"] != "bash" or "bash" in chosen]
    return [*out, TMUX_TOOL] if "tmux" in chosen else out
