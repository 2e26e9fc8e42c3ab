"""The conformance suite every provider must pass: the guarantees a reward
rests on (isolation, limits, grading integrity, faithful I/O), checked
through the public Sandbox contract only, so it runs against any provider.

Each check makes its own small sandbox and always closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
import socket
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from crucible.sandboxes.base import Provider, Sandbox, SandboxSpec


class CheckResult(BaseModel):
    name: str
    passed: bool
    detail: str = ""
    duration_sec: float = 0.0


class CheckFailed(Exception):
    pass


def expect(cond: bool, message: str) -> None:
    if not cond:
        raise CheckFailed(message)


class _Ctx:
    def __init__(self, provider: Provider, overrides: dict[str, Any]) -> None:
        self.provider = provider
        self.overrides = overrides

    def spec(self, name: str, **kw: Any) -> SandboxSpec:
        base: dict[str, Any] = {
            "job_id": "conformance",
            "trial_id": name,
            "task_name": "conformance",
            "memory_mb": 512,
            "cpus": 1.0,
            "pids_limit": 256,
        }
        base.update(kw)
        base.update(self.overrides)
        return SandboxSpec(**base)

    @contextlib.asynccontextmanager
    async def sandbox(self, name: str, **kw: Any) -> AsyncIterator[Sandbox]:
        sb = await self.provider.create(self.spec(name, **kw))
        try:
            yield sb
        finally:
            await sb.close()


Check = Callable[[_Ctx], Awaitable[str]]
CHECKS: dict[str, Check] = {}


def check(name: str) -> Callable[[Check], Check]:
    def deco(fn: Check) -> Check:
        CHECKS[name] = fn
        return fn

    return deco


# ---- exec ----------------------------------------------------------------------


@check("exec_result")
async def _exec_result(ctx: _Ctx) -> str:
    async with ctx.sandbox("exec_result") as sb:
        r = await sb.exec("echo out; echo err >&2; exit 3", timeout=30)
        expect(r.exit_code == 3, f"exit code {r.exit_code}, want 3")
        expect(r.stdout == "out\n", f"stdout {r.stdout!r}")
        expect(r.stderr == "err\n", f"stderr {r.stderr!r}")
        r = await sb.exec(["sh", "-c", 'printf "%s|" "$@"', "x", "a b", "c'd"], timeout=30)
        expect(r.ok and r.stdout == "a b|c'd|", f"argv command: {r.stdout!r}")
    return "exit code, stdout and stderr kept apart; argv quoting intact"


@check("stdin")
async def _stdin(ctx: _Ctx) -> str:
    async with ctx.sandbox("stdin") as sb:
        r = await sb.exec("cat", input="line one\nline two\n", timeout=30)
        expect(r.ok and r.stdout == "line one\nline two\n", f"str input: {r.stdout!r}")
        blob = bytes(range(256)) * 64
        r = await sb.exec("sha256sum | cut -d' ' -f1", input=blob, timeout=30)
        expect(
            r.stdout.strip() == hashlib.sha256(blob).hexdigest(), "bytes input altered in transit"
        )
    return "str and binary stdin delivered"


@check("env_and_cwd")
async def _env_cwd(ctx: _Ctx) -> str:
    async with ctx.sandbox("env_and_cwd", env={"CRU_SPEC": "from spec"}) as sb:
        workdir = sb.spec.workdir
        r = await sb.exec(
            'pwd; echo "$CRU_SPEC|$CRU_EXEC"', timeout=30, env={"CRU_EXEC": "it's exec"}
        )
        expect(r.ok, f"exec failed: {r.stderr}")
        expect(r.stdout == f"{workdir}\nfrom spec|it's exec\n", f"got {r.stdout!r}")
        r = await sb.exec("pwd", cwd="/tmp", timeout=30)
        expect(r.stdout.strip() == "/tmp", f"cwd=/tmp gave {r.stdout!r}")
    return f"spec env, exec env, default cwd {workdir} and cwd= honoured"


@check("timeout_kills_tree")
async def _timeout(ctx: _Ctx) -> str:
    async with ctx.sandbox("timeout_kills_tree") as sb:
        t0 = time.monotonic()
        r = await sb.exec("sleep 300 & echo $! > /tmp/child.pid; sleep 300", timeout=1)
        took = time.monotonic() - t0
        expect(r.timed_out, f"not flagged timed_out (exit {r.exit_code})")
        expect(took < 15, f"took {took:.1f}s to return")
        r = await sb.exec(
            'kill -0 "$(cat /tmp/child.pid)" 2>/dev/null && echo alive || echo dead', timeout=30
        )
        expect(r.stdout.strip() == "dead", "the background child of the timed-out command survived")
    return f"timed out after {took:.2f}s; background child killed"


@check("memory_limit")
async def _memory(ctx: _Ctx) -> str:
    async with ctx.sandbox("memory_limit", memory_mb=256) as sb:
        hog = "awk 'BEGIN { s = \"xxxxxxxxxxxxxxxx\"; while (1) { s = s s; t = t s } }'"
        t0 = time.monotonic()
        r = await sb.exec(hog, timeout=60)
        expect(not r.timed_out, "a 256 MiB sandbox ran a memory hog for 60s")
        expect(r.exit_code != 0, "the memory hog exited 0")
        clear = r.exit_code == 137 or "memory" in r.stderr.lower()
        expect(clear, f"no clear error: exit {r.exit_code}, stderr {r.stderr[-300:]!r}")
        after = await sb.exec("echo alive", timeout=30)
        expect(after.stdout.strip() == "alive", "sandbox unusable after the hog")
    return f"stopped after {time.monotonic() - t0:.1f}s, exit {r.exit_code}: {r.stderr.strip()[-120:]!r}"


@check("fork_bomb")
async def _fork_bomb(ctx: _Ctx) -> str:
    async with ctx.sandbox("fork_bomb", pids_limit=128) as sb:
        t0 = time.monotonic()
        await sb.exec("b() { b | b & }; b; sleep 3", timeout=8)
        took = time.monotonic() - t0
        expect(took < 60, f"the fork bomb exec took {took:.0f}s to come back")
        await asyncio.wait_for(sb.kill_all(), 60)
        after = await sb.exec("echo alive", timeout=30)
        expect(after.stdout.strip() == "alive", f"sandbox unusable after the bomb: {after}")
    return f"bounded (pids_limit 128); exec back in {took:.1f}s; sandbox usable after kill_all"


@check("output_cap")
async def _output_cap(ctx: _Ctx) -> str:
    async with ctx.sandbox("output_cap") as sb:
        r = await sb.exec(
            "head -c 300000 /dev/zero | tr '\\0' a; echo done >&2", timeout=30, output_cap=1000
        )
        expect(r.ok, f"exit {r.exit_code}: capped output must not block or kill the command")
        expect(r.truncated, "truncated flag not set")
        expect(0 < len(r.stdout) <= 1000, f"kept {len(r.stdout)} chars of stdout (cap 1000)")
        expect(r.stderr.strip() == "done", f"stderr {r.stderr!r}")
        r = await sb.exec("echo small", timeout=30, output_cap=1000)
        expect(not r.truncated, "small output flagged truncated")
    return "300 kB cut to 1000 bytes and flagged; command ran to completion"


def _host_ips() -> list[str]:
    ips = {"127.0.0.1"}
    with contextlib.suppress(OSError):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.connect(("10.255.255.255", 1))  # no packet is sent; picks the outward interface
        ips.add(s.getsockname()[0])
        s.close()
    with contextlib.suppress(OSError):
        ips.add(socket.gethostbyname(socket.gethostname()))
    return sorted(ips)


@check("network_blocked")
async def _network(ctx: _Ctx) -> str:
    hits: list[str] = []

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hits.append(str(writer.get_extra_info("peername")))
        writer.close()

    server = await asyncio.start_server(on_conn, "0.0.0.0", 0)
    port = server.sockets[0].getsockname()[1]
    targets = [(ip, port) for ip in _host_ips()] + [("1.1.1.1", 53), ("8.8.8.8", 53)]
    try:
        async with ctx.sandbox("network_blocked", network="none") as sb:
            has_bash = (await sb.exec("command -v bash", timeout=30)).ok
            expect(has_bash, "bash is needed for /dev/tcp probes")
            probe = "; ".join(
                f"(timeout 3 bash -c 'echo hi > /dev/tcp/{ip}/{p}' 2>/dev/null && echo OPEN {ip}:{p} || echo closed)"
                for ip, p in targets
            )
            r = await sb.exec(probe, timeout=60)
            opened = [line for line in r.stdout.splitlines() if line.startswith("OPEN")]
            expect(not opened, f"reachable without network: {opened}")
            expect(not hits, f"the host listener was reached from the sandbox: {hits}")
    finally:
        server.close()
        await server.wait_closed()
    return "no route to " + ", ".join(f"{ip}:{p}" for ip, p in targets)


@check("writes_outside_fail")
async def _writes(ctx: _Ctx) -> str:
    name = f"crucible-probe-{secrets.token_hex(6)}"
    paths = [f"/usr/{name}", f"/usr/bin/{name}", f"/etc/{name}", f"/{name}"]
    notes = []
    async with ctx.sandbox("writes_outside_fail") as sb:
        for p in paths:
            r = await sb.exec(f"echo x > {p}", timeout=30)
            on_host = _host_has_and_remove(p)
            expect(not on_host, f"a write to {p} inside the sandbox reached the host")
            notes.append(f"{p}: {'refused' if not r.ok else 'private to the sandbox'}")
        refused = [
            p for p in paths[:3] if "refused" in next(n for n in notes if n.startswith(p + ":"))
        ]
        userland_private = len(refused) < 3
        if userland_private:
            # A copy-on-write userland is allowed; then it must not persist anywhere shared.
            async with ctx.sandbox("writes_outside_fail_2") as sb2:
                r = await sb2.exec(f"test -e /usr/{name} && echo leaked || echo clean", timeout=30)
                expect(r.stdout.strip() == "clean", "a write to /usr leaked into another sandbox")
    return "; ".join(notes)


def _host_has_and_remove(path: str) -> bool:
    """Did a write inside reach this host path? (and undo it if so)"""
    if not os.path.lexists(path):
        return False
    with contextlib.suppress(OSError):
        os.unlink(path)
    return True


def _write(path: Path, text: str) -> None:
    path.write_text(text)


@check("host_env_invisible")
async def _host_env(ctx: _Ctx) -> str:
    secret = "crucible-" + secrets.token_hex(16)
    old = os.environ.get("MODAL_TOKEN_SECRET")
    os.environ["MODAL_TOKEN_SECRET"] = secret
    try:
        async with ctx.sandbox("host_env_invisible") as sb:
            r = await sb.exec(
                "env; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null",
                timeout=30,
            )
            expect(r.ok or r.stdout != "", f"could not list the environment: {r.stderr}")
            expect(secret not in r.stdout, "a host environment variable is visible inside")
            expect("MODAL_TOKEN_SECRET" not in r.stdout, "MODAL_TOKEN_SECRET is defined inside")
    finally:
        if old is None:
            os.environ.pop("MODAL_TOKEN_SECRET", None)
        else:
            os.environ["MODAL_TOKEN_SECRET"] = old
    return "MODAL_TOKEN_SECRET set on the host is absent from every process inside"


@check("host_home_invisible")
async def _host_home(ctx: _Ctx) -> str:
    home = Path.home()
    name = f".crucible-conformance-{secrets.token_hex(6)}"
    content = secrets.token_hex(16)
    marker = home / name
    marker.write_text(content)
    try:
        async with ctx.sandbox("host_home_invisible") as sb:
            r = await sb.exec(
                f"cat {home}/{name} /root/{name} /home/*/{name} 2>/dev/null; "
                f"cat $HOME/.* $HOME/* 2>/dev/null | head -c 1000000",
                timeout=30,
            )
            expect(content not in r.stdout, f"the host's {marker} is readable inside")
    finally:
        marker.unlink(missing_ok=True)
    return f"marker in host {home} not visible"


# ---- grading integrity -----------------------------------------------------------


@check("tests_absent_in_agent_phase")
async def _tests_absent(ctx: _Ctx) -> str:
    async with ctx.sandbox("tests_absent_in_agent_phase") as sb:
        r = await sb.exec(
            '[ ! -e /tests ] || [ -z "$(ls -A /tests)" ] && echo absent || echo present', timeout=30
        )
        expect(r.stdout.strip() == "absent", "/tests holds files before grading")
    return "/tests absent (or empty) while the agent runs"


@check("agent_leftovers_do_not_reach_grading")
async def _leftovers(ctx: _Ctx) -> str:
    from crucible.verifiers.script import run_verifier, stage_tests

    async with ctx.sandbox("agent_leftovers_do_not_reach_grading") as sb:
        plant = (
            "mkdir -p /logs/verifier /tests && echo 1 > /logs/verifier/reward.txt && "
            "echo '{\"reward\": 1}' > /logs/verifier/reward.json && echo planted > /tests/conftest.py && "
            "(nohup sleep 600 >/dev/null 2>&1 & echo $! > /tmp/agent.pid) && "
            "(setsid sleep 601 >/dev/null 2>&1 &) ; sleep 0.2; echo planted"
        )
        r = await sb.exec(plant, timeout=30)
        expect(r.stdout.strip() == "planted", f"could not plant: {r.stderr}")
        # The test script itself reports what it sees when grading starts.
        probe = (
            "echo \"verifier: $(ls -A /logs/verifier | tr '\\n' ' ')\"\n"
            "echo \"tests: $(ls -A /tests | tr '\\n' ' ')\"\n"
            "echo \"agents: $(for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done "
            "| grep -c 'sleep 60[01]')\"\n"
        )
        with tempfile.TemporaryDirectory() as tmp:
            _write(Path(tmp, "test.sh"), probe)
            staged = await stage_tests(sb, Path(tmp))
        r = await run_verifier(sb, staged, timeout_sec=30)
        seen = dict(line.split(": ", 1) for line in r.stdout.splitlines() if ": " in line)
        expect(r.exit_code == 0, f"grading failed: {r.stderr}")
        expect(seen.get("verifier", "x").strip() == "", f"stale reward survived: {seen}")
        expect(seen.get("tests", "").split() == ["test.sh"], f"tests not as shipped: {seen}")
        expect(seen.get("agents") == "0", f"agent processes survived into grading: {seen}")
    return (
        "planted rewards and test files removed, planted (nohup and setsid) processes killed, "
        "tests copied after"
    )


@check("background_process_persists")
async def _background(ctx: _Ctx) -> str:
    async with ctx.sandbox("background_process_persists") as sb:
        r = await sb.exec(
            "nohup sh -c 'while true; do date +%s%N > /tmp/tick; sleep 0.1; done' >/dev/null 2>&1 & echo $!",
            timeout=30,
        )
        pid = r.stdout.strip()
        expect(r.ok and pid.isdigit(), f"could not start: {r}")
        await asyncio.sleep(0.4)
        a = await sb.exec(f"kill -0 {pid} && cat /tmp/tick", timeout=30)
        await asyncio.sleep(0.3)
        b = await sb.exec(f"kill -0 {pid} && cat /tmp/tick", timeout=30)
        expect(a.ok and b.ok, "the background process died between execs")
        expect(a.stdout != b.stdout, "the background process stopped working between execs")
    return f"pid {pid} alive and ticking across execs"


# ---- files -------------------------------------------------------------------


def _tree_digest(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@check("upload_download_roundtrip")
async def _roundtrip(ctx: _Ctx) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "src")
        (src / "big").mkdir(parents=True)
        (src / "big" / "blob.bin").write_bytes(os.urandom(20 * 1024 * 1024))
        for i in range(200):
            d = src / f"d{i % 7}" / f"e{i % 3}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"f{i}.txt").write_bytes(os.urandom(i * 13 % 4096) + f"ünï {i}\n".encode())
        (src / "empty.txt").write_bytes(b"")
        want = _tree_digest(src)
        async with ctx.sandbox("upload_download_roundtrip") as sb:
            await sb.upload_dir(src, "/tmp/up/nested")
            r = await sb.exec(
                "sha256sum /tmp/up/nested/big/blob.bin | cut -d' ' -f1; find /tmp/up/nested -type f | wc -l",
                timeout=60,
            )
            got_sum, got_count = r.stdout.split()
            expect(got_sum == want["big/blob.bin"], "20 MB file altered on upload")
            expect(int(got_count) == len(want), f"{got_count} files inside, want {len(want)}")
            dst = Path(tmp, "dst")
            await sb.download_dir("/tmp/up/nested", dst)
        got = _tree_digest(dst)
        expect(
            got == want,
            f"download differs: {len(set(got.items()) ^ set(want.items()))} mismatching entries",
        )
    return f"{len(want)} files (20 MB + small, nested) round-tripped byte for byte"


@check("unicode_and_binary")
async def _unicode_binary(ctx: _Ctx) -> str:
    text = "héllo ✓ 日本語 🚀"
    async with ctx.sandbox("unicode_and_binary") as sb:
        r = await sb.exec(f"printf '%s\\n' '{text}'; printf '%s' '{text}' >&2", timeout=30)
        expect(
            r.stdout == text + "\n" and r.stderr == text,
            f"unicode mangled: {r.stdout!r} {r.stderr!r}",
        )
        r = await sb.exec("cat", input=text, timeout=30)
        expect(r.stdout == text, "unicode stdin mangled")
        blob = bytes(range(256)) * 1000 + b"\x00\xff\xfe"
        await sb.write_file("/tmp/bin/blob.bin", blob)
        expect(
            await sb.read_file("/tmp/bin/blob.bin") == blob, "binary write_file/read_file differ"
        )
        r = await sb.exec("sha256sum /tmp/bin/blob.bin | cut -d' ' -f1", timeout=30)
        expect(
            r.stdout.strip() == hashlib.sha256(blob).hexdigest(), "binary content altered inside"
        )
        r = await sb.exec(
            "head -c 65536 /dev/urandom > /tmp/r.bin; sha256sum /tmp/r.bin | cut -d' ' -f1",
            timeout=30,
        )
        made = await sb.read_file("/tmp/r.bin")
        expect(
            hashlib.sha256(made).hexdigest() == r.stdout.strip(),
            "binary made inside altered on read",
        )
        await sb.write_file("/tmp/mode.sh", "#!/bin/sh\necho ran\n", mode=0o755)
        r = await sb.exec("/tmp/mode.sh", timeout=30)
        expect(r.stdout == "ran\n", "write_file mode not applied")
        try:
            await sb.read_file("/tmp/does-not-exist")
        except FileNotFoundError:
            pass
        else:
            raise CheckFailed("read_file of a missing file did not raise FileNotFoundError")
    return "unicode output/input and binary files survive; missing file raises FileNotFoundError"


async def _run_one(name: str, fn: Check, ctx: _Ctx) -> CheckResult:
    t0 = time.monotonic()
    try:
        detail = await fn(ctx)
        passed = True
    except CheckFailed as exc:
        detail, passed = str(exc), False
    except Exception as exc:
        detail, passed = f"{type(exc).__name__}: {exc}", False
    return CheckResult(
        name=name, passed=passed, detail=detail, duration_sec=round(time.monotonic() - t0, 3)
    )


async def run_conformance(
    provider: Provider,
    *,
    only: list[str] | None = None,
    spec_overrides: dict[str, Any] | None = None,
    concurrency: int = 4,
) -> list[CheckResult]:
    """Run the checks (all, or `only` these names) against `provider`."""
    names = list(CHECKS) if not only else only
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise KeyError(f"unknown check(s): {', '.join(unknown)}; known: {', '.join(CHECKS)}")
    ctx = _Ctx(provider, dict(spec_overrides or {}))
    sem = asyncio.Semaphore(max(1, concurrency))

    async def guarded(name: str) -> CheckResult:
        async with sem:
            return await _run_one(name, CHECKS[name], ctx)

    return list(await asyncio.gather(*(guarded(n) for n in names)))
