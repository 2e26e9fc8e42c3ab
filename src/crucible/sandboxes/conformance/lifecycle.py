"""Checks of what grading relies on of a sandbox: `reset_dir` empties and makes a
folder, `alive` follows close, and an agent that kills everything it can is seen to
have ended its sandbox (counted against the attempt, never as infrastructure).
Through the public Sandbox contract only. The checks that grade with the verifier
itself (reward reset, fresh grading context, hand-over) are verifiers/conformance.py.
"""

from __future__ import annotations

import asyncio
import contextlib

from crucible.errors import SandboxFailed
from crucible.sandboxes.conformance.core import Ctx, check, expect


@check("reset_dir_and_alive")
async def _reset_alive(ctx: Ctx) -> str:
    async with ctx.sandbox("reset_dir_and_alive") as sb:
        expect(await sb.alive(), "a live sandbox says it is not alive")
        await sb.reset_dir("/tmp/fresh/new")  # missing parents are made too
        r = await sb.exec(
            '[ -d /tmp/fresh/new ] && [ -z "$(ls -A /tmp/fresh/new)" ] && echo ok', timeout=30
        )
        expect(r.stdout.strip() == "ok", "reset_dir did not make a missing folder")
        r = await sb.exec(
            "mkdir -p /tmp/t/a/b && touch /tmp/t/a/b/f /tmp/t/.h && chmod 0 /tmp/t/a", timeout=30
        )
        expect(r.ok, f"setup failed: {r.stderr}")
        await sb.reset_dir("/tmp/t")
        r = await sb.exec("ls -A /tmp/t | wc -l", timeout=30)
        expect(r.stdout.strip() == "0", f"reset_dir left {r.stdout.strip()} entries")
        await sb.close()
        expect(not await sb.alive(), "a closed sandbox says it is alive")
    return "reset_dir empties trees (hidden names, mode 0 folders) and makes missing ones; alive tracks close"


@check("agent_cannot_end_sandbox_unseen")
async def _end_seen(ctx: Ctx) -> str:
    """An agent (root inside) that kills every process it can either leaves the sandbox
    alive or ends it in a way the provider attributes to the contents, so the trial
    counts against the attempt instead of being excluded as sandbox_failed."""
    async with ctx.sandbox("agent_cannot_end_sandbox_unseen") as sb:
        expect(await sb.ended_by_contents() is None, "a live sandbox says its contents ended it")
        with contextlib.suppress(SandboxFailed):  # the exec may go down with its sandbox
            await sb.exec("kill -9 -1; kill -9 1; exit 0", timeout=30, cwd="/")
        how = None
        for _ in range(20):  # a container stops a moment after its keeper dies
            how = await sb.ended_by_contents()
            if how is not None:
                break
            await asyncio.sleep(0.05)
        if how is None:
            expect(await sb.alive(), "kill -9 -1 ended the sandbox, read as an infrastructure loss")
            return "kill -9 -1 from inside: the sandbox lives on"
        expect(not await sb.alive(), f"a live sandbox says it ended: {how}")
        return f"kill -9 -1 from inside ended the sandbox, counted against the attempt: {how}"
