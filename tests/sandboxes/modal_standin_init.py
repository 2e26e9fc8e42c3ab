"""PID 1 of a stand-in Modal sandbox: runs execs on request, reaps every process.

Runs inside bubblewrap (`--as-pid-1`), so `kill -9 -1` from an exec (what the
provider's kill_all sends) ends every process but this one, and a background
process started by one exec lives on until then or until the sandbox ends.

Protocol, one JSON object per line: on stdin
`{"id", "argv", "cwd", "env", "timeout", "io"}` where io is a directory
holding `stdin` and receiving `stdout` / `stderr`; on stdout `{"id", "code"}`
when the exec's process exits (-1 when it ran past its timeout, 128+N when a
signal N ended it, 127 when it could not start).
Standard library only: it runs on the host's /usr/bin/python3.
"""

import json
import os
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


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
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
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        while True:  # reap the execs, and any orphan that pid 1 inherits
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            entry = running.pop(pid, None)
            if entry is None:
                continue
            if entry[2]:
                code = -1
            elif os.WIFSIGNALED(status):
                code = 128 + os.WTERMSIG(status)
            else:
                code = os.WEXITSTATUS(status)
            sys.stdout.write(json.dumps({"id": entry[0], "code": code}) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
