"""The in-sandbox stage: tests/test.sh under Harbor's semantics, in a context the
verifier owns.

Order matters for trust: every agent process is killed first; then crucible
itself (the host, through the provider) makes /tests and /logs/verifier fresh
empty directories, with `Sandbox.reset_dir`, never a glob run inside; only
then are the tests copied in and test.sh run. Nothing the agent left behind
can see, alter or pre-empt grading.

The grading exec does not inherit the agent's context either (`grading_env`):
a HOME made for this exec alone, no user site-packages, the current directory
kept off Python's import path, no git or shell start-up files, no preload or
library-path variables, and a PATH of system directories. The task's
[verifier].env applies on top: a task that needs a variable back sets it there.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import uuid
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any

from crucible.errors import TaskInvalid, VerifierFailed
from crucible.sandboxes.base import ExecResult, Sandbox
from crucible.verifiers.rewards import REWARD_DIR, parse_reward_txt, split_reward_json
from crucible.verifiers.testsdir import one_tests_dir

TESTS_DIR = "/tests"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Exit code of the grading prelude when it cannot set the context up.
PRELUDE_FAILED = 70
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Variables that load code or configuration into whatever grading runs.
UNSET = (
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "PYTHONHOME",
    "PYTHONUSERBASE",
    "PYTHONEXECUTABLE",
    "PYTHONBREAKPOINT",
    "BASH_ENV",
    "ENV",
    "CDPATH",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_EXEC_PATH",
    "GIT_TEMPLATE_DIR",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "PERL5LIB",
    "PERL5OPT",
    "RUBYOPT",
    "RUBYLIB",
    "NODE_OPTIONS",
    "NODE_PATH",
    "XDG_CONFIG_HOME",
)

# A folder made beside the fresh HOME (HOME stays empty), on PYTHONPATH: its one
# module, sitecustomize,
# appends where `python3 -m`/`-c` (the cwd) or `python3 script.py` (the script's
# folder) would have put its first sys.path entry, after the interpreter's own.
TAIL_SITE = "-python"  # suffix of HOME
TAIL_SITECUSTOMIZE = """\
# crucible grading: the cwd or script folder goes last on sys.path, never first.
import os as _os, sys as _sys
def _crucible_first_entry():
    args = list(getattr(_sys, "orig_argv", [])[1:])
    while args:
        a = args.pop(0)
        if a in ("-W", "-X", "--check-hash-based-pycs"):
            args[:1] = []
        elif a == "-" or a.startswith(("-m", "-c")):
            break
        elif not a.startswith("-"):
            return _os.path.dirname(_os.path.abspath(a))
    return _os.getcwd()
try:
    _d = _crucible_first_entry()
    if _d not in _sys.path:
        _sys.path.append(_d)
except OSError:
    pass
del _os, _sys, _crucible_first_entry
"""

# Git settings forced at the highest precedence (command-line scope), so a
# repository config the agent wrote in the workdir cannot run code through them.
GIT_FORCED = (("core.fsmonitor", "false"), ("core.hooksPath", "/dev/null"), ("core.pager", "cat"))


def grading_env(home: str) -> dict[str, str]:
    """The variables the grading exec sets (PATH is built in the prelude)."""
    env = {
        "HOME": home,
        "PYTHONNOUSERSITE": "1",
        # Neither the cwd (`python3 -m pytest` run from the workdir) nor a script's
        # directory goes FIRST on sys.path: the agent's files cannot shadow a module.
        # TAIL_SITE's sitecustomize puts that directory LAST instead, so tests still
        # import what the agent built (`from wordstats import ...` run from /app).
        "PYTHONSAFEPATH": "1",
        "PYTHONPATH": home + TAIL_SITE,
        "PYTHONDONTWRITEBYTECODE": "1",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_COUNT": str(len(GIT_FORCED)),
    }
    for i, (key, value) in enumerate(GIT_FORCED):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env


async def stage_tests(sandbox: Sandbox, tests_dir: Path | Sequence[Path]) -> str:
    """End the agent phase (kill its processes), then prepare_grading."""
    await sandbox.kill_all()
    return await prepare_grading(sandbox, tests_dir)


async def prepare_grading(sandbox: Sandbox, tests_dir: Path | Sequence[Path]) -> str:
    """Once no agent process is left: make /tests and the reward folder fresh from
    the host side (at once: they are independent) and copy the tests in (several
    folders one over the other, in order: a multi-step task's `Task.tests_dirs`);
    return where they are, for run_verifier."""
    sources = [tests_dir] if isinstance(tests_dir, Path) else list(tests_dir)

    async def tests() -> None:
        await sandbox.reset_dir(TESTS_DIR)
        # One upload: several folders merged on the host first (verifiers/testsdir.py).
        async with one_tests_dir(sources) as folder:
            await sandbox.upload_dir(folder, TESTS_DIR)

    await _all(tests(), sandbox.reset_dir(REWARD_DIR))
    return TESTS_DIR


async def _all(*aws: Awaitable[None]) -> None:
    """Await them concurrently; on the first failure cancel the rest, raise it as is."""
    tasks = [asyncio.ensure_future(aw) for aw in aws]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def grading_script(
    *,
    home: str,
    workdir: str,
    env: dict[str, str] | None = None,
    user: str | None = None,
    tests: str = TESTS_DIR,
    kit: str | None = None,
    home_made: bool = False,
) -> str:
    """The shell script of the grading exec: context first, then test.sh. With `kit`
    (Sandbox.grading_kit), every command of crucible's own is the kit's, by absolute
    path: its bash runs test.sh, its busybox makes the folders and switches the user.
    `home_made`: the sandbox made HOME and its site folder from the host already
    (home_from_host); the script does not."""
    bb = f"{shlex.quote(kit)}/busybox " if kit else ""
    bash = f"{shlex.quote(kit)}/bash" if kit else "bash"
    lines = ["unset " + " ".join(UNSET)]
    # PATH: the system directories, then the image's own entries (a toolchain
    # under /opt, say) unless they lie where the agent writes.
    unsafe = sorted({"/tmp", "/var/tmp", "/dev/shm", "/root", "/home", "/logs", workdir})
    cases = "|".join(f"{shlex.quote(d)}|{shlex.quote(d)}/*" for d in unsafe if d != "/")
    lines += [
        f"p={SYSTEM_PATH}",
        "set -f; IFS=:",
        'for d in $PATH; do case "$d" in',
        f'    /*) case "$d" in {cases}) ;; *) case ":$p:" in *":$d:"*) ;; *) p="$p:$d";; esac;; esac;;',
        "esac; done",
        "unset IFS; set +f",
        'export PATH="$p"',
    ]
    for key, value in grading_env(home).items():
        lines.append(f"export {key}={shlex.quote(value)}")
    # A HOME nobody knew before this exec: a random name, made here or by the host
    # just before (mkdir fails on anything already there), owned by whoever runs the tests.
    q_home = shlex.quote(home)
    q_site = shlex.quote(home + TAIL_SITE)
    switch = _switches(user)
    if not home_made:
        if switch:  # the site stays root's, readable by the tests' user
            lines.append(f"{bb}mkdir -m 0700 -- {q_home} || exit {PRELUDE_FAILED}")
            lines.append(f"{bb}mkdir -m 0755 -- {q_site} || exit {PRELUDE_FAILED}")
        else:  # root reads both: one mkdir (an exec costs ~1 ms), the site private too
            lines.append(f"{bb}mkdir -m 0700 -- {q_home} {q_site} || exit {PRELUDE_FAILED}")
        lines.append(
            f"printf %s {shlex.quote(TAIL_SITECUSTOMIZE)} > {q_site}/sitecustomize.py"
            f" || exit {PRELUDE_FAILED}"
        )
    for key, value in (env or {}).items():  # the task's [verifier].env, on top
        if not _ENV_KEY.fullmatch(key):
            raise TaskInvalid(f"[verifier].env: {key!r} is not a variable name")
        lines.append(f"export {key}={shlex.quote(value)}")
    run = f"{bash} --noprofile --norc {tests}/test.sh"
    if switch:
        who = shlex.quote(str(user))
        # Fresh, empty directories: a plain chown cannot be led elsewhere.
        lines.append(f"{bb}chown -- {who} {q_home} {REWARD_DIR} || exit {PRELUDE_FAILED}")
        if kit:  # busybox's su as root: no password, the environment kept (-p)
            run = f"{bb}su -p -s {bash} {who} -c {shlex.quote(f'exec {run}')}"
        else:
            run = f"runuser -m -u {who} -- {run}"
    lines.append(f"cd -- {shlex.quote(workdir)} || exit {PRELUDE_FAILED}")
    lines.append(f"exec {run}")
    return "\n".join(lines) + "\n"


def _switches(user: str | None) -> bool:
    return user is not None and str(user) not in ("root", "0")


async def home_from_host(sandbox: Sandbox, home: str) -> bool:
    """Root's HOME and site folder (both 0700, the site with its sitecustomize), made
    from the host where the sandbox can (no exec); False: the grading script makes them.
    Anything standing at either name fails it there as it would in the script."""
    site = {"sitecustomize.py": TAIL_SITECUSTOMIZE.encode()}
    try:
        return await sandbox.make_fresh_dir(home) and await sandbox.make_fresh_dir(
            home + TAIL_SITE, files=site
        )
    except OSError:
        return False  # the script's mkdir then fails on it: "could not be set up"


async def run_verifier(
    sandbox: Sandbox,
    staged: str,
    *,
    timeout_sec: float,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    user: str | None = None,
) -> ExecResult:
    """Run test.sh from `staged` (what stage_tests or prepare_grading returned, which
    also reset the reward folder) in the grading context.

    The prelude runs as root; with `user` (task.toml [verifier].user) the tests
    then run as that user, who owns the fresh reward folder and HOME.
    """
    workdir = cwd or sandbox.spec.workdir
    home = f"/tmp/.crucible-home-{uuid.uuid4().hex}"
    kit = sandbox.grading_kit()
    made = not _switches(user) and await home_from_host(sandbox, home)
    script = grading_script(
        home=home, workdir=workdir, env=env, user=user, tests=staged, kit=kit, home_made=made
    )
    if kit is None:
        return await sandbox.exec(script, timeout=timeout_sec, cwd="/")
    # The script itself runs in the kit's bash, never in the image's `sh -c`.
    # BASH_ENV goes first: bash -c would source it before the script's own `unset`.
    argv = [f"{kit}/busybox", "env", "-u", "BASH_ENV", f"{kit}/bash", "--noprofile", "--norc"]
    argv += ["-c", script]
    return await sandbox.exec(argv, timeout=timeout_sec, cwd="/")


def read_rewards(verifier_dir: Path) -> tuple[dict[str, float], dict[str, Any]]:
    """From the collected /logs/verifier: reward.json if present (it wins), else
    reward.txt, as (rewards, details): reward.json's values that are not numbers are
    details, kept apart from the rewards. Anything that goes wrong reading them is the
    attempt's: VerifierFailed."""
    json_file, txt_file = verifier_dir / "reward.json", verifier_dir / "reward.txt"
    try:
        if json_file.is_file():
            return split_reward_json(_read_capped(json_file))
        if txt_file.is_file():
            return parse_reward_txt(_read_capped(txt_file)), {}
    except VerifierFailed:
        raise
    except Exception as exc:  # a huge integer, an unreadable file, a decode limit
        raise VerifierFailed(f"unreadable reward: {type(exc).__name__}: {exc}"[:500]) from exc
    raise VerifierFailed(f"the verifier wrote no reward ({REWARD_DIR}/reward.json or reward.txt)")


MAX_REWARD_BYTES = 1 << 20


def _read_capped(path: Path) -> str:
    with path.open("rb") as f:
        data = f.read(MAX_REWARD_BYTES + 1)
    if len(data) > MAX_REWARD_BYTES:
        raise VerifierFailed(f"{path.name} is larger than {MAX_REWARD_BYTES} bytes")
    return data.decode(errors="replace")
