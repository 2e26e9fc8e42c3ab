"""The in-sandbox programs of the `local` provider: pid 1's script and its worker loop.

- pid 1 is bash (bwrap --as-pid-1). As the namespace's init it cannot be
  killed or stopped from inside: the kernel drops signals from inside that
  init has no handler for, SIGKILL included, and bash handles only SIGCHLD,
  with which it reaps every orphan at once (zombies would count against
  pids.max). Its binary is an unreadable copy (mode 0111), which makes it
  non-dumpable: nothing inside can ptrace it or reopen its fds through
  /proc/1/fd. It sits in the slot's pids group, which has headroom over the
  limit, so a fork bomb cannot stop it from forking (cgroups.INNER).
- pid 1 keeps a *worker* running: a dash loop (likewise unreadable) that reads
  request ids on its stdin (a pipe only we hold) and forks a subshell per
  request, which moves itself into the inner pids and memory groups and sources the
  request's script (`sh -c` semantics, no exec per request) with stdout and
  stderr on FIFOs in the control dir; it reports "start ID NSPID" and
  "ID EXITCODE" on stdout. When the worker dies (the agent killed it, or
  kill_all did), pid 1 starts another, which reads the requests still waiting.
  An exec whose own subshell was killed (`kill -9 -1`) ends with 137.
So an agent can neither lose the sandbox nor outlive kill_all; if pid 1 dies
anyway (only the host can do that) the sandbox is lost: SandboxFailed.
"""

from __future__ import annotations

import os
import shlex

CTL = "/.crucible"  # control dir inside the sandbox (FIFOs, request scripts), read-only there
# pid 1's binary inside the control dir: a copy of bash that nothing inside may
# read (mode 0111). Executing an unreadable file makes the process non-dumpable,
# so no process of the agent can ptrace pid 1 or reopen its fds (its request
# pipe, its cgroup file) through /proc/1/fd.
INIT_NAME = "init"
INNER_FDS = (9, 8)  # where the inner groups' files sit: dash takes single-digit fds only
WORKER_NAME = "sh"  # likewise an unreadable copy of /bin/sh, for the worker


# pid 1 is bash, not dash: it reaps children from its SIGCHLD handler, so
# orphans never pile up as zombies (which would count against pids.max). It
# does nothing but keep a *worker* running: a dash loop that forks a subshell
# per request (the `sh -c` semantics of the contract, without an exec per
# request). Whatever kills the worker (the agent, kill_all), pid 1 starts
# another, which reads the requests still waiting in the pipe.


def server_script(
    join_fds: list[int],
    inner_fds: list[int],
    worker_sh: str | None,
    rlimits: tuple[int, int] | None = None,
) -> str:
    """pid 1's program. It first moves itself into the slot's cgroups through the
    inherited `join_fds` (then closes them: nothing it forks ever holds one), and
    says "ready 1" when that worked ("ready 0": the host moves it instead). Each
    exec's subshell moves itself into the inner pids and memory groups through
    `inner_fds` (none of them 8 or 9) and closes them before running the
    command (see cgroups.INNER)."""
    if join_fds:
        writes = " && ".join(f"echo 0 >&{fd}" for fd in join_fds)
        closes = " ".join(f"{fd}>&-" for fd in join_fds)
        join = f"{{ {writes}; }} 2>/dev/null && J=1 || J=0\nexec {closes}\n"
    else:
        join = "J=0\n"
    if rlimits is not None:  # no cgroups: memory (KiB of address space) and processes
        join += f"ulimit -v {rlimits[0]} && ulimit -u {rlimits[1]} || exit 3\n"
    inner = ""
    if len(inner_fds) > len(INNER_FDS):
        raise ValueError("too many inner groups")
    for fd, to in zip(inner_fds, INNER_FDS, strict=False):
        join += f"exec {to}>&{fd} {fd}>&-\n"
        inner += f"echo 0 >&{to}; exec {to}>&-; "
    # The exec's own subshell says "start ID PID" (its pid read from /proc/self/stat,
    # no fork) before the command runs: a command that kills it, or the worker,
    # at once (`kill -9 -1`) can no longer leave us without its pid.
    # The OOM killer takes the agent's processes first (they start at +1000,
    # which needs no privilege), then the worker (+500), pid 1 last of all.
    reset = "echo 1000 >/proc/self/oom_score_adj; "
    run = '( . "$D/$id.sh" )' if worker_sh else '/bin/sh "$D/$id.sh"'
    loop = f"""echo 500 >/proc/self/oom_score_adj
while read -r id src; do
  {{ read -r me _ </proc/self/stat; echo "start $id $me"; {inner}{reset}{run} <"$src" >"$D/$id.out" 2>"$D/$id.err"; echo "$id $?"; }} &
done
"""
    if worker_sh is None:  # pid 1 serves requests itself (a bash subshell + sh per exec)
        return f'D={CTL}\n{join}echo "ready $J"\n{loop}'
    # the worker exits 0 only at the end of the requests (we closed the pipe)
    return (
        f'D={CTL}\n{join}echo "ready $J"\nW={shlex.quote(f"D={CTL}" + chr(10) + loop)}\n'
        f'while :; do {worker_sh} -c "$W" sh && exit 0; done\n'
    )


def find_bash() -> str:
    for path in ("/bin/bash", "/usr/bin/bash"):
        if os.access(path, os.X_OK):
            return path
    return "/bin/sh"  # works; orphans are then reaped only at the next request
