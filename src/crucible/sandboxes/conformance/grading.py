"""Checks of the grading contract: the host-side reset of a folder holds against
what an agent leaves there, grading runs in a fresh context, and a sandbox
knows whether it is alive. Through the public Sandbox contract (reset_dir,
alive) and the verifier's own run_verifier, so they hold for any provider.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from pathlib import Path

from crucible.errors import SandboxFailed
from crucible.sandboxes.base import Sandbox
from crucible.sandboxes.conformance.core import Ctx, check, expect
from crucible.verifiers.rewards import REWARD_DIR
from crucible.verifiers.script import run_verifier, stage_tests

PLANT = f"mkdir -p {REWARD_DIR} && echo '{{\"reward\": 1}}' > {REWARD_DIR}/reward.json"

# What an agent does to keep a planted reward past an in-sandbox reset.
TRAPS = {
    "mode 0311": f"{PLANT} && chmod 0311 {REWARD_DIR}",
    "read-only /logs": f"{PLANT} && chmod 0555 {REWARD_DIR} /logs",
    "symlinked folder": "mkdir -p /tmp/elsewhere && echo '{\"reward\": 1}' > /tmp/elsewhere/reward.json"
    f" && rm -rf {REWARD_DIR} && ln -s /tmp/elsewhere {REWARD_DIR}",
    "a file instead": f"rm -rf {REWARD_DIR} && echo 1 > {REWARD_DIR}",
    "future mtime, hidden name": f"{PLANT} && touch -d 2099-01-01 {REWARD_DIR}/reward.json "
    f"&& echo 1 > {REWARD_DIR}/.reward.txt",
}

# Run as the tests would: report what grading sees, as key=value lines.
PROBE = """\
echo "listing=$(ls -A /logs/verifier | tr '\\n' ' ')"
if [ -L /logs/verifier ]; then echo "kind=link"; elif [ -d /logs/verifier ]; then echo "kind=dir"; else echo "kind=other"; fi
echo "elsewhere=$(cat /tmp/elsewhere/reward.json 2>/dev/null)"
echo "home=$HOME"
echo "home_entries=$(ls -A "$HOME" | wc -l)"
echo "agent_marker=$(cat "$HOME/agent-marker" 2>/dev/null)"
echo "nousersite=$PYTHONNOUSERSITE safepath=$PYTHONSAFEPATH"
echo "gitglobal=$GIT_CONFIG_GLOBAL gitsystem=$GIT_CONFIG_NOSYSTEM"
echo "preload=${LD_PRELOAD-unset} pythonpath=${PYTHONPATH-unset} bash_env=${BASH_ENV-unset}"
echo "path=$PATH"
if command -v python3 >/dev/null; then
    echo "usersite=$(python3 -c 'import site; print(site.ENABLE_USER_SITE)')"
fi
echo 0 > /logs/verifier/reward.txt
"""


def _probe_tests(tmp: str) -> Path:
    Path(tmp, "test.sh").write_text(PROBE)
    return Path(tmp)


async def _grade_probe(sb: Sandbox) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        staged = await stage_tests(sb, _probe_tests(tmp))
    r = await run_verifier(sb, staged, timeout_sec=60)
    expect(r.exit_code == 0, f"grading failed: exit {r.exit_code}: {r.stderr[-300:]}")
    return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)


@check("stale_reward_reset_from_host")
async def _stale_reset(ctx: Ctx) -> str:
    held = []
    for name, trap in TRAPS.items():
        async with ctx.sandbox("stale_reward_reset_from_host") as sb:
            r = await sb.exec(trap, timeout=30, cwd="/")
            expect(r.ok, f"{name}: could not plant: {r.stderr[-200:]}")
            seen = await _grade_probe(sb)
            expect(seen.get("kind") == "dir", f"{name}: the reward folder is a {seen.get('kind')}")
            expect(seen.get("listing", "x").strip() == "", f"{name}: left {seen.get('listing')!r}")
            if name == "symlinked folder":  # reset, not followed: the link's target is intact
                expect(seen.get("elsewhere") == '{"reward": 1}', "the reset followed the link")
            reward = await sb.read_file(f"{REWARD_DIR}/reward.txt")
            expect(reward.strip() == b"0", f"{name}: the honest reward did not land: {reward!r}")
            held.append(name)
    return "planted rewards gone before the tests ran: " + ", ".join(held)


@check("grading_env_is_fresh")
async def _fresh_env(ctx: Ctx) -> str:
    async with ctx.sandbox("grading_env_is_fresh") as sb:
        plant = (
            'echo agent > "$HOME/agent-marker"; mkdir -p "$HOME/.local/bin"; '
            'printf "[core]\\n\\tfsmonitor = /tmp/hook\\n" > "$HOME/.gitconfig"; echo planted'
        )
        r = await sb.exec(plant, timeout=30)
        expect(r.stdout.strip() == "planted", f"could not plant in HOME: {r.stderr[-200:]}")
        seen = await _grade_probe(sb)
    home = seen.get("home", "")
    expect(home.startswith("/tmp/.crucible-home-"), f"HOME is {home!r}, not made for grading")
    expect(seen.get("home_entries") == "0", f"HOME holds {seen.get('home_entries')} entries")
    expect(seen.get("agent_marker") == "", "the agent's HOME reached grading")
    expect(seen.get("nousersite") == "1 safepath=1", f"python flags: {seen.get('nousersite')}")
    expect(seen.get("gitglobal") == "/dev/null gitsystem=1", f"git: {seen.get('gitglobal')}")
    # PYTHONPATH names only crucible's folder beside the fresh HOME (its sitecustomize
    # puts the cwd last on sys.path), never anything the agent set.
    expect(
        seen.get("preload") == f"unset pythonpath={home}-python bash_env=unset",
        f"loader variables: {seen.get('preload')}",
    )
    path = seen.get("path", "")
    expect(
        not any(d.startswith(("/root", "/home", "/tmp")) for d in path.split(":")),
        f"PATH reaches where the agent writes: {path}",
    )
    expect(seen.get("usersite", "False") == "False", "python's user site is enabled in grading")
    return f"HOME {home} (empty), no user site, no git or loader config; PATH {path}"


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
