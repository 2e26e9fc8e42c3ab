"""Running one command in a Docker container: the attached exec stream, and the in-container scripts.

The Engine API multiplexes an exec's stdout and stderr on one hijacked HTTP
connection (8-byte frame headers); stdin goes the other way on the same
socket and ends with a half-close. These are blocking socket calls, run on
the provider's own thread pool so that long commands never starve asyncio's
default executor.

Each exec carries an environment marker (`CRUCIBLE_EXEC_ID`): Docker starts
every exec in a session of its own, so the processes to kill on a timeout are
the sessions of the marked processes, plus any marked process that left its
session. The scripts below need only a POSIX shell, `grep` and `/proc`.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from crucible.sandboxes.proc import CappedBuffer

MARKER_VAR = "CRUCIBLE_EXEC_ID"
# The grading kit's read-only bind (sandboxes/gradekit.py): the kill sweep, the resets and
# grading run its static busybox and bash, never the image's sh, grep or rm.
KIT_MOUNT = "/.crucible-kit"

# The container's main process under docker-init: a shell that sleeps forever
# (`sleep infinity` where the image's sleep knows it, else a loop).
KEEPER_CMD = ["sh", "-c", "sleep infinity 2>/dev/null; while :; do sleep 86400; done"]

# Kill processes, stopping them first so that a fork bomb cannot outrun the
# sweep; repeat until a sweep finds nothing. Arguments: MODE MARKER.
#   exec: the sessions of processes marked CRUCIBLE_EXEC_ID=MARKER, and those processes
#   all:  every process but pid 1, the keeper (pid 1's oldest child) and the keeper's children
# Never touches pid 1, this script, or its own session.
KILL_SCRIPT = r"""
mode=$1; marker=$2; me=$$
pstat() {
  line=
  read -r line 2>/dev/null < "/proc/$1/stat" || return 1
  rest=${line##*) }
  set -- $rest
  state=$1; ppid=$2; sid=$4
}
pstat "$me" && self_sid=$sid
pstat 1 && init_sid=$sid
round=0
while [ "$round" -lt 50 ]; do
  round=$((round + 1))
  marked=" "; sids=" "; keeper=
  if [ "$mode" = exec ]; then
    for f in $(grep -lzx "CRUCIBLE_EXEC_ID=$marker" /proc/[0-9]*/environ 2>/dev/null); do
      p=${f#/proc/}; p=${p%/environ}
      pstat "$p" || continue
      marked="$marked$p "
      if [ "$sid" != "$self_sid" ] && [ "$sid" != "$init_sid" ]; then sids="$sids$sid "; fi
    done
  else
    for d in /proc/[0-9]*; do
      p=${d#/proc/}
      pstat "$p" || continue
      if [ "$ppid" = 1 ] && { [ -z "$keeper" ] || [ "$p" -lt "$keeper" ]; }; then keeper=$p; fi
    done
  fi
  targets=
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = 1 ] && continue
    [ "$p" = "$me" ] && continue
    pstat "$p" || continue
    case $state in Z|X|x) continue ;; esac
    [ "$ppid" = "$me" ] && continue
    [ "$sid" = "$self_sid" ] && continue
    if [ "$mode" = exec ]; then
      case "$marked" in *" $p "*) ;; *)
        case "$sids" in *" $sid "*) ;; *) continue ;; esac ;;
      esac
    else
      [ "$p" = "$keeper" ] && continue
      [ "$ppid" = "$keeper" ] && continue
    fi
    targets="$targets $p"
  done
  [ -z "$targets" ] && exit 0
  kill -STOP $targets 2>/dev/null
  kill -KILL $targets 2>/dev/null
done
exit 0
"""

# The memory cgroup's counters (cgroup v2, then v1); the caller reads `oom_kill N`.
OOM_COUNT_CMD = [
    "cat",
    "/sys/fs/cgroup/memory.events",
    "/sys/fs/cgroup/memory/memory.oom_control",
]

_HEADER = struct.Struct(">BxxxL")


class ExecStream:
    """One attached exec: a buffered reader for its frames and the raw socket for stdin."""

    def __init__(self, api: Any, exec_id: str) -> None:
        # The public exec_start(socket=True) hands back only the raw socket, and
        # bytes that http.client buffered past the 101 headers would be lost;
        # reading through the response's own buffered reader keeps them.
        self._response = api._post_json(
            api._url("/exec/{0}/start", exec_id),
            headers={"Connection": "Upgrade", "Upgrade": "tcp"},
            data={"Tty": False, "Detach": False},
            stream=True,
        )
        self._sock = api._get_raw_response_socket(self._response)
        api._disable_socket_timeout(self._sock)
        fp = getattr(getattr(self._response.raw, "_fp", None), "fp", None)
        self._reader: Any = fp if fp is not None else self._sock
        self._raw: Any = getattr(self._sock, "_sock", self._sock)

    def pump(self, cap: int) -> tuple[bytes, bytes, bool]:
        """Read frames to the end of the stream; keep `cap` bytes of each stream."""
        out, err = CappedBuffer(cap), CappedBuffer(cap)
        bufs = {1: out, 2: err}
        try:
            while True:
                header = self._read_exact(_HEADER.size)
                if len(header) < _HEADER.size:
                    break
                kind, size = _HEADER.unpack(header)
                buf = bufs.get(kind)
                while size > 0:
                    chunk = self._read_some(min(size, 1 << 16))
                    if not chunk:
                        break
                    size -= len(chunk)
                    if buf is not None:
                        buf.feed(chunk)
                if size > 0:
                    break
        except (OSError, ValueError):
            pass  # the socket was shut down under us (timeout) or the engine went away
        return out.getvalue(), err.getvalue(), out.truncated or err.truncated

    def feed(self, data: bytes) -> None:
        """Write stdin, then half-close so the command sees end of file."""
        try:
            if data:
                self._raw.sendall(data)
        except OSError:
            pass  # the command exited without reading all its input
        finally:
            self._half_close()

    def abort(self) -> None:
        """Unblock a pump stuck on a stream that some escaped process still holds."""
        try:
            self._raw.shutdown(socket.SHUT_RDWR)
        except (OSError, AttributeError):
            pass

    def close(self) -> None:
        for closer in (self._sock.close, self._response.close):
            try:
                closer()
            except Exception:
                pass

    def _half_close(self) -> None:
        try:
            if hasattr(self._raw, "shutdown_write"):  # paramiko channel (ssh://)
                self._raw.shutdown_write()
            else:
                self._raw.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def _read_some(self, n: int) -> bytes:
        if hasattr(self._reader, "read1"):
            data: bytes = self._reader.read1(n)
        elif hasattr(self._reader, "recv"):
            data = self._reader.recv(n)
        else:
            data = self._reader.read(n)
        return data

    def _read_exact(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self._read_some(n - len(out))
            if not chunk:
                break
            out += chunk
        return out
