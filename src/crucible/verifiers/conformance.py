"""The conformance checks of grading: what the verifier's own test-script stage does in
a provider's sandbox (verifiers/script.py: the host-side reset of the reward folder, the
fresh grading context, the hand-over that leaves no agent process or planted file).

They grade with the real verifier, so they live on the verifier's side of the package
graph, not in sandboxes/conformance/ (the providers' own suite, which never imports a
verifier); `suite()` is both together, what `crucible sandboxes check` runs. Each check
goes through the public Sandbox contract only, so it holds for any provider.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from crucible.sandboxes.base import Sandbox
from crucible.sandboxes.conformance import CHECKS
from crucible.sandboxes.conformance.core import Check, Ctx, check, expect
from crucible.verifiers.rewards import REWARD_DIR
from crucible.verifiers.script import run_verifier, stage_tests

GRADING_CHECKS: dict[str, Check] = {}


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


def _tests(tmp: str, script: str) -> Path:
    """A tests folder in `tmp` whose test.sh is `script`."""
    Path(tmp, "test.sh").write_text(script)
    return Path(tmp)


async def _grade_probe(sb: Sandbox) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        staged = await stage_tests(sb, _tests(tmp, PROBE))
    r = await run_verifier(sb, staged, timeout_sec=60)
    expect(r.exit_code == 0, f"grading failed: exit {r.exit_code}: {r.stderr[-300:]}")
    return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)


@check("stale_reward_reset_from_host", GRADING_CHECKS)
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


@check("grading_env_is_fresh", GRADING_CHECKS)
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


@check("agent_leftovers_do_not_reach_grading", GRADING_CHECKS)
async def _leftovers(ctx: Ctx) -> str:
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
            staged = await stage_tests(sb, _tests(tmp, probe))
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


def suite() -> dict[str, Check]:
    """Every conformance check: the providers' own, then grading's."""
    return {**CHECKS, **GRADING_CHECKS}
