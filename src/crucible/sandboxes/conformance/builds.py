"""Checks that building a task's image never hands its RUN steps the host.

A task author is untrusted: the check builds a Dockerfile whose RUN step breaks out of a
chroot (perl: a chroot below the cwd, then `..` past any root and chroot there) and, from
wherever it lands, writes a marker at a host path, reads a file planted on the host, and
connects to a listener on the host's 127.0.0.1. Only providers that build on this
machine are checked (Modal builds remotely). Every probe stays on loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import tempfile
from pathlib import Path

from crucible.sandboxes.conformance.core import Ctx, check, expect

ATTACK = r"""mkdir "x"; chroot "x"; chdir ".." for 1 .. 64; chroot ".";
open(my $f, ">", $ARGV[0]) and print "WROTE\n";
open(my $g, "<", $ARGV[1]) and print "READ:", <$g>, "\n";
use IO::Socket::INET;
IO::Socket::INET->new(PeerAddr => "127.0.0.1", PeerPort => $ARGV[2], Timeout => 5)
    and print "CONNECTED\n";
print "RAN\n";
"""


@check("build_steps_isolated")
async def _build_steps(ctx: Ctx) -> str:
    if ctx.provider.name not in ("local", "docker"):
        return f"skipped: {ctx.provider.name} does not build on this machine"
    hits: list[bytes] = []

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hits.append(b"x")
        writer.close()

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    host = Path(tempfile.mkdtemp(prefix="crucible-conformance-build-"))
    try:
        secret = f"planted-{secrets.token_hex(12)}"
        (host / "secret").write_text(secret)
        marker = host / "marker"
        env = host / "environment"
        env.mkdir()
        (env / "attack.pl").write_text(ATTACK)
        (env / "Dockerfile").write_text(
            "FROM debian:bookworm-slim\nCOPY attack.pl /attack.pl\n"
            f"RUN : {secrets.token_hex(6)}; perl /attack.pl {marker} {host / 'secret'} {port}"
            " > /attack-out.txt; true\n"
        )
        async with ctx.sandbox("build_steps_isolated", dockerfile_dir=env, image=None) as sb:
            r = await sb.exec("cat /attack-out.txt", timeout=30)
        # The step ran (a build that skipped it would pass every check below).
        expect("RAN" in r.stdout, f"the attack step did not run: {r.stdout!r}")
        expect(not marker.exists(), "a build step wrote a file on the host (chroot escape)")
        expect(secret not in r.stdout, "a build step read a file of the host")
        expect("WROTE" not in r.stdout and "READ:" not in r.stdout, f"escaped: {r.stdout}")
        expect(
            not hits and "CONNECTED" not in r.stdout, "a build step reached the host's 127.0.0.1"
        )
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await server.wait_closed()
        shutil.rmtree(host, ignore_errors=True)
    return "a double-chroot RUN step wrote, read and reached nothing of the host"
