"""A minimal Chrome DevTools Protocol client: launches Debian's headless
chromium and drives one page over a websocket (for the browser tests)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import websockets

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
    "--remote-debugging-port=0",
]


def find_chromium() -> str | None:
    env = os.environ.get("CRUCIBLE_CHROMIUM")
    if env:
        return env
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if path := shutil.which(name):
            return path
    return None


def require_chromium() -> str:
    """The browser, or: fail under CI (it must run there), skip locally."""
    path = find_chromium()
    if path is None:
        msg = "chromium not found (run scripts/setup-browser.sh)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(msg)
        pytest.skip(msg)
    return path


class CDPError(RuntimeError):
    pass


class Browser:
    """`async with Browser() as b:` one headless chromium with one page attached."""

    def __init__(self, binary: str | None = None) -> None:
        self.binary = binary or require_chromium()
        self.proc: asyncio.subprocess.Process | None = None
        self.profile = tempfile.TemporaryDirectory(
            prefix="crucible-chromium-", ignore_cleanup_errors=True
        )
        self.ws: Any = None
        self.session: str | None = None
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[Any]] = {}
        self.exceptions: list[str] = []
        self.reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Browser:
        profile = Path(self.profile.name)
        # Its own process group, so the renderer and zygote children end with it.
        self.proc = await asyncio.create_subprocess_exec(
            self.binary,
            *FLAGS,
            f"--user-data-dir={profile}",
            "about:blank",
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        port_file = profile / "DevToolsActivePort"
        for _ in range(300):  # up to 30 s for a cold start on a busy machine
            if port_file.exists() and len(port_file.read_text().splitlines()) >= 2:
                break
            if self.proc.returncode is not None:
                err = (
                    (await self.proc.stderr.read()).decode(errors="replace")
                    if self.proc.stderr
                    else ""
                )
                raise CDPError(f"chromium exited with {self.proc.returncode}: {err[-2000:]}")
            await asyncio.sleep(0.1)
        else:
            raise CDPError("chromium did not open its DevTools port")
        port, path = port_file.read_text().splitlines()[:2]
        self.ws = await websockets.connect(f"ws://127.0.0.1:{port}{path}", max_size=64 * 2**20)
        self.reader = asyncio.create_task(self._read())
        target = await self.send("Target.createTarget", {"url": "about:blank"}, browser=True)
        attached = await self.send(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}, browser=True
        )
        self.session = attached["sessionId"]
        await self.send("Page.enable")
        await self.send("Runtime.enable")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.reader:
            self.reader.cancel()
        if self.ws is not None:
            await self.ws.close()
        if self.proc is not None and self.proc.returncode is None:
            pgid = self.proc.pid  # the group this test started (start_new_session)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout=10)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
                await self.proc.wait()
            # children of the group may outlive the browser by a moment
            for _ in range(50):
                try:
                    os.killpg(pgid, 0)
                except ProcessLookupError:
                    break
                await asyncio.sleep(0.1)
        self.profile.cleanup()

    async def _read(self) -> None:
        async for raw in self.ws:
            msg = json.loads(raw)
            if "id" in msg and msg["id"] in self.pending:
                fut = self.pending.pop(msg["id"])
                if "error" in msg:
                    fut.set_exception(CDPError(str(msg["error"])))
                else:
                    fut.set_result(msg.get("result", {}))
            elif msg.get("method") == "Runtime.exceptionThrown":
                details = msg["params"]["exceptionDetails"]
                self.exceptions.append(
                    (details.get("exception") or {}).get("description") or details.get("text", "")
                )

    async def send(
        self, method: str, params: dict[str, Any] | None = None, *, browser: bool = False
    ) -> Any:
        msg_id = next(self.ids)
        msg: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if not browser and self.session:
            msg["sessionId"] = self.session
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[msg_id] = fut
        await self.ws.send(json.dumps(msg))
        return await asyncio.wait_for(fut, timeout=30)

    async def eval(self, expression: str) -> Any:
        res = await self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in res:
            raise CDPError(f"{expression}: {res['exceptionDetails']}")
        return res["result"].get("value")

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", {"url": url})
        await self.wait_for("document.readyState === 'complete'")

    async def wait_for(self, expression: str, timeout: float = 15.0) -> Any:
        """Poll a JS expression until it is truthy; return its value."""
        deadline = asyncio.get_running_loop().time() + timeout
        last: Any = None
        while asyncio.get_running_loop().time() < deadline:
            try:
                last = await self.eval(expression)
            except CDPError:
                last = None  # mid-navigation
            if last:
                return last
            await asyncio.sleep(0.1)
        raise AssertionError(f"timed out waiting for: {expression} (last: {last!r})")

    async def screenshot(self) -> bytes:
        res = await self.send("Page.captureScreenshot", {"format": "png"})
        return base64.b64decode(res["data"])
