"""Grading runs in a context the verifier owns: attacks planted by the agent in
its HOME, its git configuration and its workdir do not reach the tests.

Each attack is an oracle solve.sh against an honest test.sh on a real local
sandbox (the host's /usr has python3 and git; the docker base image has
neither). Each solve.sh also proves its attack is live in the agent's own
context (a probe the test prints), so a pass here is the grading context's doing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.helpers.attack_tasks import HONEST_TEST, attack_task, attack_trial

from crucible.sandboxes.base import Sandbox
from crucible.verifiers.script import SYSTEM_PATH

PROBE = "cat /app/probe 2>/dev/null; "


def stdout_of(tmp_path: Path, trial_name: str) -> str:
    return (tmp_path / "job" / trial_name / "verifier" / "test-stdout.txt").read_text()


async def test_usercustomize_in_the_agents_home_does_not_run(tmp_path: Path) -> None:
    solve = (
        "d=$(python3 -c 'import site; print(site.getusersitepackages())')\n"
        'mkdir -p "$d" && printf "import os\\nos._exit(0)\\n" > "$d/usercustomize.py"\n'
        "python3 -c 'import sys; sys.exit(3)'; echo \"agent-context-rc=$?\" > /app/probe\n"
    )
    test = PROBE + (
        "if python3 -c 'import os, sys; sys.exit(0 if os.path.exists(\"/app/ok\") else 3)'; "
        "then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi"
    )
    r = await attack_trial("local", attack_task(tmp_path / "t", solve=solve, test=test), tmp_path)
    assert "agent-context-rc=0" in stdout_of(tmp_path, r.trial_name)  # the attack is live
    assert r.graded and r.reward == 0.0


@pytest.mark.parametrize("scope", ["--global", "--local"])
async def test_git_fsmonitor_from_the_agent_does_not_run(tmp_path: Path, scope: str) -> None:
    solve = (
        "cd /app && git init -q . && printf '#!/bin/sh\\ntouch /app/ok\\n' > /tmp/hook "
        f"&& chmod +x /tmp/hook && git config {scope} core.fsmonitor /tmp/hook\n"
        "git status >/dev/null 2>&1; [ -f /app/ok ] && echo fsmonitor-live > /app/probe\n"
        "rm -f /app/ok\n"
    )
    test = PROBE + "cd /app && git status --porcelain >/dev/null 2>&1; " + HONEST_TEST
    r = await attack_trial("local", attack_task(tmp_path / "t", solve=solve, test=test), tmp_path)
    assert "fsmonitor-live" in stdout_of(tmp_path, r.trial_name)
    assert r.graded and r.reward == 0.0


async def test_modules_planted_in_the_workdir_do_not_shadow_the_verifiers(tmp_path: Path) -> None:
    # `cd /app && python3 -m unittest`: a fake unittest package in /app, and a
    # sitecustomize.py there, must not stand in for the real ones.
    solve = (
        "mkdir -p /app/unittest && : > /app/unittest/__init__.py\n"
        "printf 'import sys\\nsys.exit(0)\\n' > /app/unittest/__main__.py\n"
        'printf \'open("/app/ok", "w")\\n\' > /app/sitecustomize.py\n'
        "cd /app && python3 -m unittest discover -s /nonexistent >/dev/null 2>&1; "
        'echo "agent-context-rc=$?" > /app/probe; rm -f /app/ok\n'
    )
    test = PROBE + (
        "cd /app && if python3 -m unittest discover -s /tests -p 'check_*.py'; "
        "then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi"
    )
    check = (
        "import os\nimport unittest\n\n\nclass T(unittest.TestCase):\n"
        "    def test_ok(self):\n        self.assertTrue(os.path.exists('/app/ok'))\n"
    )
    task = attack_task(tmp_path / "t", solve=solve, test=test, files={"tests/check_ok.py": check})
    r = await attack_trial("local", task, tmp_path)
    assert "agent-context-rc=0" in stdout_of(tmp_path, r.trial_name)
    assert r.graded and r.reward == 0.0


async def test_grading_env_is_fresh_and_the_tasks_env_applies_on_top(tmp_path: Path) -> None:
    solve = "mkdir -p /root/.local/bin && echo secret > /root/marker && echo 'touch /app/ok' > /root/.bashrc"
    test = (
        'echo "HOME=$HOME"; echo "entries=$(ls -A "$HOME" | wc -l)"; echo "PATH=$PATH"\n'
        'echo "SAFE=$PYTHONSAFEPATH NOUSER=$PYTHONNOUSERSITE GIT=$GIT_CONFIG_GLOBAL/$GIT_CONFIG_NOSYSTEM"\n'
        'echo "TASKVAR=$TASKVAR PP=${PYTHONPATH-unset} LD=${LD_PRELOAD-unset}"\n' + HONEST_TEST
    )
    toml = '[verifier.env]\nTASKVAR = "from task"\n'
    r = await attack_trial(
        "local", attack_task(tmp_path / "t", solve=solve, test=test, toml=toml), tmp_path
    )
    out = dict(
        line.split("=", 1) for line in stdout_of(tmp_path, r.trial_name).splitlines() if "=" in line
    )
    assert out["HOME"].startswith("/tmp/.crucible-home-") and out["entries"] == "0"
    assert out["PATH"] == SYSTEM_PATH
    assert out["SAFE"] == "1 NOUSER=1 GIT=/dev/null/1"
    # PYTHONPATH holds only crucible's folder beside HOME (the sitecustomize that puts
    # the cwd last on sys.path), made in the same exec
    assert out["TASKVAR"] == f"from task PP={out['HOME']}-python LD=unset"
    assert r.graded and r.reward == 0.0  # and no start-up file ran


async def test_the_agents_modules_import_but_never_shadow(tmp_path: Path) -> None:
    # PYTHONSAFEPATH keeps the cwd and a script's folder off the front of sys.path;
    # crucible's sitecustomize appends them at the end, so the tests can import
    # what the agent built (a multi-file program, `-m pytest` from /app) while a
    # module the agent names like the verifier's (json, here) is not the one loaded.
    solve = (
        "printf 'X = 1\\n' > /app/lib.py\n"
        "printf 'import sys; sys.exit(0)\\n' > /app/json.py\n"
        'printf \'import json, lib\\nassert json.dumps([lib.X]) == "[1]"\\nopen("/app/ran", "w")\\n\' > /app/prog.py\n'
    )
    test = (
        "rm -f /app/ok /app/ran; cd /app && python3 prog.py && [ -f /app/ran ] "
        "&& python3 -c 'import lib, json; json.dumps(lib.X)' && touch /app/ok; " + HONEST_TEST
    )
    r = await attack_trial("local", attack_task(tmp_path / "a", solve=solve, test=test), tmp_path)
    assert r.graded and r.reward == 1.0


async def test_path_keeps_the_images_toolchains_but_not_where_the_agent_writes(
    tmp_path: Path,
) -> None:
    # An image's ENV PATH (here the task's environment env) may name /opt toolchains;
    # the entries under HOME, /tmp, the workdir or /logs are dropped from grading.
    env = '[environment.env]\nPATH = "/root/.local/bin:/opt/tool/bin:/app/bin:/tmp/x:.:/usr/bin:/logs/a"\n'
    solve = "mkdir -p /root/.local/bin && printf '#!/bin/sh\\ntouch /app/ok\\n' > /root/.local/bin/mytool && chmod +x /root/.local/bin/mytool"
    test = 'echo "PATH=$PATH"; mytool 2>/dev/null; ' + HONEST_TEST
    r = await attack_trial(
        "local", attack_task(tmp_path / "t", solve=solve, test=test, toml=env), tmp_path
    )
    line = next(x for x in stdout_of(tmp_path, r.trial_name).splitlines() if x.startswith("PATH="))
    assert line == f"PATH={SYSTEM_PATH}:/opt/tool/bin"
    assert r.graded and r.reward == 0.0


async def _plant_site_link(box: Sandbox, home: str) -> None:
    """As an agent would: a link at the grading HOME's site folder, to a folder of its
    own; then the agent's processes are gone, as before grading."""
    from crucible.verifiers.script import TAIL_SITE

    planted = await box.exec(f"mkdir /tmp/elsewhere && ln -s /tmp/elsewhere {home}{TAIL_SITE}")
    assert planted.exit_code == 0, planted.stderr
    await box.kill_all()


async def test_a_site_folder_planted_beside_home_stops_the_grading() -> None:
    """The root prelude makes HOME and its site folder in one mkdir: a symlink the
    agent planted at the site's name (had it guessed HOME) fails the grading before
    test.sh runs, and nothing is written through it."""
    from crucible.sandboxes.base import SandboxSpec
    from crucible.sandboxes.local.provider import LocalProvider
    from crucible.verifiers.script import PRELUDE_FAILED, grading_script

    home = "/tmp/.crucible-home-planted"
    provider = LocalProvider(userland="host")
    try:
        async with await provider.create(SandboxSpec(job_id="test-site-plant")) as box:
            await _plant_site_link(box, home)
            script = grading_script(home=home, workdir="/", tests="/nonexistent")
            r = await box.exec(script, timeout=60, cwd="/")
            assert r.exit_code == PRELUDE_FAILED, (r.exit_code, r.stderr)
            left = await box.exec("ls -A /tmp/elsewhere | wc -l")
            assert left.stdout.strip() == "0"  # no sitecustomize.py through the link
    finally:
        await provider.aclose()


async def test_home_made_from_the_host_is_the_preludes_and_never_follows_a_link() -> None:
    """The local sandbox makes root's HOME and site folder from the host (no exec): as
    the prelude would, 0700 and root's, the sitecustomize inside. A link planted at the
    site's name is neither followed nor replaced: the grading fails as in the prelude."""
    from crucible.sandboxes.base import SandboxSpec
    from crucible.sandboxes.local.provider import LocalProvider
    from crucible.verifiers.script import (
        PRELUDE_FAILED,
        TAIL_SITE,
        TAIL_SITECUSTOMIZE,
        grading_script,
        home_from_host,
    )

    home, planted_home = "/tmp/.crucible-home-fresh", "/tmp/.crucible-home-planted"
    provider = LocalProvider(userland="host")
    try:
        async with await provider.create(SandboxSpec(job_id="test-host-home")) as box:
            await _plant_site_link(box, planted_home)
            assert await home_from_host(box, home)
            site = f"{home}{TAIL_SITE}"
            r = await box.exec(f"stat -c '%a %u %F' {home} {site}; ls -A {home} | wc -l")
            assert r.stdout.split("\n")[:3] == ["700 0 directory"] * 2 + ["0"], r
            assert await box.read_file(f"{site}/sitecustomize.py") == TAIL_SITECUSTOMIZE.encode()
            assert not await home_from_host(box, planted_home)
            left = await box.exec("ls -A /tmp/elsewhere | wc -l")
            assert left.stdout.strip() == "0"  # no sitecustomize.py through the link
            script = grading_script(home=planted_home, workdir="/", tests="/nonexistent")
            r = await box.exec(script, timeout=60, cwd="/")
            assert r.exit_code == PRELUDE_FAILED, (r.exit_code, r.stderr)
    finally:
        await provider.aclose()
