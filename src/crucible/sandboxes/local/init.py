"""The in-sandbox programs of the `local` provider: pid 1's script and its worker loop.

- pid 1 is dash (bwrap --as-pid-1). As the namespace's init it cannot be
  killed or stopped from inside: the kernel drops signals from inside that
  init has no handler for, SIGKILL included; pid 1 ignores SIGINT (which dash
  would catch) and its one handler, SIGCHLD's, only marks a child to reap. It spends its
  life waiting on its worker (below), and that wait (`wait4(-1)`) reaps every
  orphan as it exits, so zombies do not pile up against pids.max. Its binary is
  an unreadable copy (mode 0111), which makes it non-dumpable: nothing inside
  can ptrace it or reopen its fds through /proc/1/fd. It sits in the slot's
  pids group, which has headroom over the limit, so a fork bomb cannot stop it
  from forking (cgroups.INNER).
- pid 1 keeps a *worker* running: a subshell of its own (a fork, no exec: it is
  as non-dumpable as pid 1) looping over request ids on its stdin (a pipe only
  we hold). It forks a subshell per request, which moves itself into the inner
  pids and memory groups and sources the request's script (`sh -c` semantics,
  no exec per request) with stdout and stderr on FIFOs in the control dir; it
  reports "start ID NSPID" and "ID EXITCODE" on stdout. When the worker dies
  (the agent killed it, or kill_all did), pid 1 forks another, which reads the
  requests still waiting. An exec whose own subshell was killed (`kill -9 -1`)
  ends with 137.
So an agent can neither lose the sandbox nor outlive kill_all; if pid 1 dies
anyway (only the host can do that) the sandbox is lost: SandboxFailed.
"""

from __future__ import annotations

import os
import shutil

CTL = "/.crucible"  # control dir inside the sandbox (FIFOs, request scripts), read-only there
# pid 1's binary inside the control dir: a copy of dash that nothing inside may
# read (mode 0111). Executing an unreadable file makes the process non-dumpable,
# so no process of the agent can ptrace pid 1 or its worker, or reopen their fds
# (the request pipe) through /proc/1/fd.
INIT_NAME = "init"
# Where bwrap and pid 1 find what the host hands them (posix_spawn's dup2s: dash takes
# single-digit fds only): bwrap's info fd, the slot's groups pid 1 joins, and the inner
# groups each exec's subshell joins.
INFO_FD = 3
JOIN_FDS = (4, 5, 6)
INNER_FDS = (9, 8)


def server_script(
    join_fds: list[int] | tuple[int, ...],
    inner_fds: list[int] | tuple[int, ...],
    rlimits: tuple[int, int] | None = None,
) -> str:
    """pid 1's program. It first moves itself into the slot's cgroups through the
    inherited `join_fds` (then closes them: nothing it forks ever holds one), and
    says "ready 1" when that worked ("ready 0": the host moves it instead). Each
    exec's subshell moves itself into the inner pids and memory groups through
    `inner_fds` and closes them before running the command (see cgroups.INNER)."""
    for fd in (*join_fds, *inner_fds):
        if not 0 <= fd <= 9:
            raise ValueError(f"fd {fd}: pid 1 (dash) takes single-digit fds only")
    if join_fds:
        writes = " && ".join(f"echo 0 >&{fd}" for fd in join_fds)
        closes = " ".join(f"{fd}>&-" for fd in join_fds)
        join = f"{{ {writes}; }} 2>/dev/null && J=1 || J=0\nexec {closes}\n"
    else:
        join = "J=0\n"
    if rlimits is not None:  # no cgroups: memory (KiB of address space) and processes
        procs = f"{{ ulimit -u {rlimits[1]} 2>/dev/null || ulimit -p {rlimits[1]}; }}"
        join += f"ulimit -v {rlimits[0]} && {procs} || exit 3\n"
    inner = "".join(f"echo 0 >&{fd}; exec {fd}>&-; " for fd in inner_fds)
    # The exec's own subshell says "start ID PID" (its pid read from /proc/self/stat,
    # no fork) before the command runs: a command that kills it, or the worker,
    # at once (`kill -9 -1`) can no longer leave us without its pid.
    # The OOM killer takes the agent's processes first (they start at +1000,
    # which needs no privilege), then the worker (+500), pid 1 last of all.
    reset = "echo 1000 >/proc/self/oom_score_adj; "
    loop = f"""echo 500 >/proc/self/oom_score_adj
while read -r id src; do
  {{ read -r me _ </proc/self/stat; echo "start $id $me"; {inner}{reset}( . "$D/$id.sh" ) <"$src" >"$D/$id.out" 2>"$D/$id.err"; echo "$id $?"; }} &
done
"""
    # The worker exits 0 only at the end of the requests (we closed the pipe). `command
    # eval`: a fork that fails (a process limit set on pid 1 from inside, via prlimit) is
    # an error a non-interactive dash exits for, and pid 1 with it; so it tries again
    # (until the sweep puts the soft limit back; under a hard one, later execs time out in
    # a live sandbox: the attempt's counted failure, never a lost sandbox).
    # dash catches SIGINT while it waits on a foreground job, and exits for it once the
    # job is over: an agent's `kill -INT 1` would end pid 1 at the next sweep. Ignored
    # instead (the kernel then drops it, as every other signal from inside: SIGCHLD's
    # handler only marks a child to reap). What pid 1 forks ignores it too, as every
    # background job of a shell without job control, the exec's subshell, always did.
    return f'trap "" INT\nD={CTL}\n{join}echo "ready $J"\nw() {{\n{loop}}}\nwhile :; do command eval "(w)" && exit 0; done\n'


def find_sh() -> str:
    """The shell pid 1 and every exec's wrapper run: dash where there is one."""
    return os.path.realpath(shutil.which("dash") or "/bin/sh")


def find_bash() -> str:
    for path in ("/bin/bash", "/usr/bin/bash"):
        if os.access(path, os.X_OK):
            return path
    return "/bin/sh"
