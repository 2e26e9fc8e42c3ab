"""The grading half of a live `local` sandbox (a mixin): resetting a directory,
or making a fresh one, from the host through the root handle it holds, and
telling a live sandbox from a lost one.

Both are the host's own decisions: the reset walks the sandbox's tree with
fds that never follow a link (hostfs.reset_dir), and liveness is the state of
the sandbox's pid 1, which nothing inside can kill.
"""

from __future__ import annotations

import os
import select

from crucible.sandboxes import proc
from crucible.sandboxes.local import hostfs
from crucible.sandboxes.local.files import MOUNTED
from crucible.sandboxes.local.init import CTL


class LocalGrading:
    """Needs the sandbox's root handle, its pid 1, and its lost/closed state."""

    _root_fd: int
    host_owner: tuple[int, int]
    init_pid: int
    _init_fd: int
    _pidfd: int  # bwrap's
    _lost: str | None
    _closed: bool

    def _check(self) -> None:
        raise NotImplementedError

    async def reset_dir(self, path: str) -> None:
        self._check()
        parts = hostfs.split(path)  # refuses ".."
        try:  # made as the sandbox's host owner, the uid that is root (or USER) inside
            hostfs.reset_dir(self._root_fd, parts, self.host_owner)
        except hostfs.Unsafe as exc:
            raise OSError(f"cannot reset {path}: a link or a non-directory at {exc}") from exc
        except RecursionError as exc:  # belt and braces: MAX_RESET_DEPTH comes first
            raise OSError(f"cannot reset {path}: tree too deep") from exc

    async def make_fresh_dir(
        self, path: str, mode: int = 0o700, files: dict[str, bytes] | None = None
    ) -> bool:
        self._check()
        parts = hostfs.split(path)
        if not parts or parts[0] in MOUNTED or parts[0] == CTL[1:]:
            return False  # a host mount or ours: made inside, if at all
        try:  # as the sandbox's host owner, like reset_dir
            hostfs.make_fresh_dir(self._root_fd, parts, mode, files or {}, self.host_owner)
        except hostfs.Unsafe:
            return False  # a link on the way: the exec makes it, in the sandbox's view
        return True

    async def ended_by_contents(self) -> str | None:
        """pid 1 ended while crucible had not closed the sandbox: only what runs inside
        ends it (nothing inside can signal it, but a process of its uid can prlimit it:
        `--nproc=0` makes its next fork of a worker fail and dash exit, a hard `--cpu` has
        the kernel kill it). bwrap (ours, waited on through a pidfd) then exits with pid
        1's status; bwrap itself killed from outside is a loss of the host's: None."""
        if self._closed or self._pidfd < 0 or await self.alive():
            return None
        try:
            flags = os.WEXITED | os.WNOHANG | os.WNOWAIT  # a look: _reap still reaps it
            info = os.waitid(os.P_PIDFD, self._pidfd, flags)  # noqa: ASYNC222 (WNOHANG)
        except OSError:
            return None
        if info is None or info.si_code != os.CLD_EXITED:
            return None
        code = info.si_status
        how = f"killed by signal {code - 128}" if code > 128 else f"exited with status {code}"
        return f"its pid 1 {how} (a limit set on it from inside)"

    async def alive(self) -> bool:
        if self._closed or self._lost or not self.init_pid:
            return False
        if self._init_fd >= 0:  # a pidfd turns readable when its process exits
            # poll, not select: an fd past 1023 (oneshotio.room_for_fds) is select's error
            poller = select.poll()
            poller.register(self._init_fd, select.POLLIN)
            return not poller.poll(0)
        return proc.state_of(self.init_pid) not in (None, "Z")
