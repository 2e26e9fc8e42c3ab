"""Checks of isolation (network, host files, env, grading leftovers) and faithful file I/O."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
import tempfile
from pathlib import Path

from crucible.sandboxes.conformance.core import CheckFailed, Ctx, check, expect


@check("writes_outside_fail")
async def _writes(ctx: Ctx) -> str:
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


ETC_OWN = ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf")


@check("etc_files_private")
async def _etc_files(ctx: Ctx) -> str:
    """/etc/hosts, /etc/hostname and /etc/resolv.conf are writable (docker's, and local
    image mode's own copies) or read-only (local host mode): either way a write there never
    reaches the host's files nor another sandbox."""
    mark = f"crucible-probe-{secrets.token_hex(6)}"
    before = {p: _host_read_bytes(p) for p in ETC_OWN}
    notes = []
    async with ctx.sandbox("etc_files_private") as sb, ctx.sandbox("etc_files_private_2") as sb2:
        for p in ETC_OWN:
            r = await sb.exec(f"echo '10.9.9.9 {mark}' >> {p}", timeout=30)
            notes.append(f"{p}: {'writable, its own' if r.ok else 'read-only'}")
            expect(_host_read_bytes(p) == before[p], f"a write to {p} inside reached the host")
        seen = await sb2.exec(f"cat {' '.join(ETC_OWN)} 2>/dev/null", timeout=30)
        expect(mark not in seen.stdout, "a write to /etc/hosts reached another sandbox")
    return "; ".join(notes)


def _host_read_bytes(path: str) -> bytes | None:
    try:
        return Path(path).read_bytes()
    except OSError:
        return None


def _host_has_and_remove(path: str) -> bool:
    """Did a write inside reach this host path? (and undo it if so)"""
    if not os.path.lexists(path):
        return False
    with contextlib.suppress(OSError):
        os.unlink(path)
    return True


@check("host_env_invisible")
async def _host_env(ctx: Ctx) -> str:
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
async def _host_home(ctx: Ctx) -> str:
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
async def _tests_absent(ctx: Ctx) -> str:
    async with ctx.sandbox("tests_absent_in_agent_phase") as sb:
        r = await sb.exec(
            '[ ! -e /tests ] || [ -z "$(ls -A /tests)" ] && echo absent || echo present', timeout=30
        )
        expect(r.stdout.strip() == "absent", "/tests holds files before grading")
    return "/tests absent (or empty) while the agent runs"


@check("background_process_persists")
async def _background(ctx: Ctx) -> str:
    async with ctx.sandbox("background_process_persists") as sb:
        r = await sb.exec(
            "nohup sh -c 'while true; do date +%s%N > /tmp/tick; sleep 0.1; done' >/dev/null 2>&1 & echo $!",
            timeout=30,
        )
        pid = r.stdout.strip()
        expect(r.ok and pid.isdigit(), f"could not start: {r}")
        await asyncio.sleep(0.4)
        # alive is kill -0's; the tick may not be written yet on a loaded machine
        probe = f"kill -0 {pid} && {{ cat /tmp/tick 2>/dev/null || true; }}"
        a = await sb.exec(probe, timeout=30)
        # it ticks every 0.1 s; on a loaded machine give it 10 s to show a new tick
        for _ in range(40):
            await asyncio.sleep(0.25)
            b = await sb.exec(probe, timeout=30)
            if not (a.ok and b.ok) or b.stdout.strip() not in ("", a.stdout.strip()):
                break
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
async def _roundtrip(ctx: Ctx) -> str:
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
async def _unicode_binary(ctx: Ctx) -> str:
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
