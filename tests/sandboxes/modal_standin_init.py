"""PID 1 of a stand-in Modal sandbox: dumb-init-like, with an exec server inside.

Modelled on what a Modal sandbox runs (issue 18, review of modal 1.6.4): pid 1
is a dumb-init whose single child is the sandbox's entrypoint (with no command
given, Modal sleeps "indefinitely until timeout or termination":
https://modal-labs.github.io/libmodal/types/SandboxCreateParams.html). When
that child dies, dumb-init exits and the sandbox with it. So here pid 1 forks
`sleep infinity` first and exits as soon as it is reaped: a `kill -9 -1` from
an exec ends the sandbox, as it would on Modal.

Execs run on request, as children of pid 1. An exec's timeout kills only its
direct process (Modal's exec timeout ends the command it started; orphans it
left behind live on: modal/container_process.py:150-186 only reports -1). A
memory limit, when the create asked for one as (request, limit), is applied
to every exec as RLIMIT_AS: a stand-in for the container's hard cap.

Protocol, one JSON object per line: on stdin
`{"id", "argv", "cwd", "env", "timeout", "io", "memory_mb"}` where io is a
directory holding `stdin` and receiving `stdout` / `stderr`; on stdout
`{"id", "code"}` when the exec's process exits (-1 when it ran past its
timeout, 128+N when a signal N ended it, 127 when it could not start), and
`{"entrypoint": pid}` once at start.
Standard library only: it runs on the host's /usr/bin/python3.
"""

import json
import os
import resource
import select
import signal
import sys
import time


def spawn(req):
    io = req["io"]
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            if req.get("memory_mb"):
                limit = int(req["memory_mb"]) << 20
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            fd_in = os.open(os.path.join(io, "stdin"), os.O_RDONLY)
            fd_out = os.open(
                os.path.join(io, "stdout"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600
            )
            fd_err = os.open(
                os.path.join(io, "stderr"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600
            )
            os.dup2(fd_in, 0)
            os.dup2(fd_out, 1)
            os.dup2(fd_err, 2)
            os.chdir(req["cwd"])
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            os.execvpe(req["argv"][0], req["argv"], req["env"])
        except BaseException as exc:
            try:
                os.write(2, f"exec failed: {exc}\n".encode())
            finally:
                os._exit(127)
    return pid


def start_entrypoint():
    pid = os.fork()
    if pid == 0:
        try:
            os.execv("/bin/sleep", ["sleep", "infinity"])
        finally:
            os._exit(127)
    return pid


def say(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    entrypoint = start_entrypoint()
    say({"entrypoint": entrypoint})
    running = {}  # pid -> [id, deadline or None, timed_out]
    buf = b""
    stdin_open = True
    while stdin_open or running:
        ready, _, _ = select.select([0] if stdin_open else [], [], [], 0.02)
        if ready:
            chunk = os.read(0, 1 << 16)
            if not chunk:
                stdin_open = False  # the host is gone: finish and leave
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                req = json.loads(line)
                deadline = None if req.get("timeout") is None else time.monotonic() + req["timeout"]
                running[spawn(req)] = [req["id"], deadline, False]
        now = time.monotonic()
        for pid, entry in running.items():
            if entry[1] is not None and now >= entry[1] and not entry[2]:
                entry[2] = True
                try:
                    os.kill(pid, signal.SIGKILL)  # the direct process only, as Modal does
                except ProcessLookupError:
                    pass
        while True:  # reap the execs, and any orphan that pid 1 inherits
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid == entrypoint:
                # dumb-init: its child is gone, so it exits with the child's status
                # (128 + signal when killed), and the sandbox ends.
                sys.exit(
                    128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                )
            entry = running.pop(pid, None)
            if entry is None:
                continue
            if entry[2]:
                code = -1
            elif os.WIFSIGNALED(status):
                code = 128 + os.WTERMSIG(status)
            else:
                code = os.WEXITSTATUS(status)
            say({"id": entry[0], "code": code})


if __name__ == "__main__":
    main()
