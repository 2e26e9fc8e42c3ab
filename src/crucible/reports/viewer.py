"""The local web viewer: a small JSON API over a jobs dir, and the page that browses it.

Routes (GET only):
  /                                   the page (static/index.html), /static/<file> its assets
  /api/jobs                           every job, newest first
  /api/jobs/<job>                     one job: config, metrics, tasks, trials in progress
  /api/jobs/<job>/tasks/<task>        one task's trials and its instruction
  /api/jobs/<job>/trials/<trial>      one trial: record, instruction, trajectory, logs, verifier output
  /api/jobs/<job>/trials/<trial>/files/<path>   a file of the trial folder, as text
  /api/train/<run>                    a training run: reward per step, latest samples
  /api/train/<run>/plot.svg           its reward and components per step, as SVG

Trial folders hold untrusted output: names are checked to be direct children
of the jobs dir, file paths must resolve inside their trial folder, and the
Host header must name this machine (against DNS rebinding). Every request needs
the server's token (webauth/token.py), even on loopback: a local sandbox or any
other process on this host reaches 127.0.0.1, and sends whatever Host it likes. Files and JSON are
re-read from disk on each request (parsed records are cached by mtime and
size), so the page follows a running job by polling.
"""

from __future__ import annotations

import json
import mimetypes
import re
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from crucible.metrics.model import MetricOptions
from crucible.reports.viewer_api import ApiError, ViewerAPI, not_found
from crucible.webauth.token import TokenGate, new_token

STATIC_FILES = {"index.html", "app.js", "app.css"}
LOCAL_HOSTS = {"localhost", "127.0.0.1", "[::1]", "::1"}
_HOST = re.compile(r"(\[[0-9a-f:.]+\]|[^:\[\]@/]+)(?::[0-9]{1,5})?")


def static_file(name: str) -> bytes:
    if name not in STATIC_FILES:
        raise not_found(name)
    return (resources.files("crucible.reports") / "static" / name).read_bytes()


class _Handler(BaseHTTPRequestHandler):
    server: ViewerServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    def _send(
        self, status: int, body: bytes, ctype: str, *, extra: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header(
            "Content-Security-Policy",
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'",
        )
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, data: Any) -> None:
        body = json.dumps(data, default=str).encode()
        self._send(status, body, "application/json; charset=utf-8")

    def _host_ok(self) -> bool:
        # The whole header must be a name and an optional numeric port: a prefix check let
        # "127.0.0.1:1@evil" and "[::1]evil" through.
        m = _HOST.fullmatch((self.headers.get("Host") or "").strip().lower())
        name = m.group(1) if m else ""
        return name in LOCAL_HOSTS or name in self.server.allowed_hosts

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        try:
            if not self._host_ok():
                raise ApiError(HTTPStatus.FORBIDDEN, "unexpected Host header")
            path = urlsplit(self.path).path
            verdict = self.server.gate.check(
                self.path, self.headers, redirect=not path.startswith("/api/")
            )
            if not verdict.ok:
                raise ApiError(HTTPStatus(verdict.status), verdict.why)
            if verdict.redirect is not None:  # the token leaves the address bar
                assert verdict.set_cookie is not None
                self._send(
                    HTTPStatus.FOUND,
                    b"",
                    "text/plain; charset=utf-8",
                    extra={"Location": verdict.redirect, "Set-Cookie": verdict.set_cookie},
                )
                return
            self._route(path)
        except ApiError as exc:
            self._json(exc.status, {"error": exc.message})
        except Exception as exc:  # keep serving; the page shows the error
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(exc).__name__}: {exc}"})

    def _route(self, raw_path: str) -> None:
        api = self.server.api
        # Split before unquoting so an encoded '/' (%2F) stays inside one segment.
        parts = [unquote(p) for p in raw_path.split("/") if p]
        if not parts or parts == ["index.html"]:
            self._send(200, static_file("index.html"), "text/html; charset=utf-8")
            return
        if parts[0] == "static" and len(parts) == 2:
            ctype = mimetypes.guess_type(parts[1])[0] or "application/octet-stream"
            if ctype.startswith("text/") or ctype.endswith("javascript"):
                ctype += "; charset=utf-8"
            self._send(200, static_file(parts[1]), ctype)
            return
        if parts[:2] == ["api", "train"] and len(parts) in (3, 4):
            self._train(parts[2], parts[3] if len(parts) == 4 else None)
            return
        if parts[0] != "api" or len(parts) < 2 or parts[1] != "jobs":
            raise not_found("route")
        rest = parts[2:]
        if not rest:
            self._json(200, api.jobs())
        elif len(rest) == 1:
            self._json(200, api.job(rest[0]))
        elif len(rest) == 3 and rest[1] == "tasks":
            self._json(200, api.task(rest[0], rest[2]))
        elif len(rest) == 3 and rest[1] == "trials":
            self._json(200, api.trial(rest[0], rest[2]))
        elif len(rest) >= 5 and rest[1] == "trials" and rest[3] == "files":
            path = api.file(rest[0], rest[2], "/".join(rest[4:]))
            data = path.read_bytes()
            self._send(200, data, "text/plain; charset=utf-8")
        else:
            raise not_found("route")

    def _train(self, name: str, what: str | None) -> None:
        from crucible.reports.train_plot import is_train_dir
        from crucible.reports.viewer_api import _child
        from crucible.reports.viewer_train import train_plot, train_run

        folder = _child(self.server.api.jobs_dir, name)
        if folder is None or not is_train_dir(folder) or what not in (None, "plot.svg"):
            raise not_found("training run")
        if what is None:
            self._json(200, train_run(folder))
        else:
            self._send(200, train_plot(folder), "image/svg+xml; charset=utf-8")


class ViewerServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        jobs_dir: Path,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        options: MetricOptions | None = None,
        verbose: bool = False,
        token: str | None = None,
    ) -> None:
        self.api = ViewerAPI(jobs_dir, options)
        self.verbose = verbose
        # Binding a non-local address is the user's choice; then its name is a valid Host too.
        self.allowed_hosts = {host.lower()}
        super().__init__((host, port), _Handler)
        self.gate = TokenGate(token or new_token(), port=int(self.server_address[1]))

    @property
    def base_url(self) -> str:
        """The server's address, without the token."""
        host, port = self.server_address[:2]
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else str(host)
        if ":" in shown:
            shown = f"[{shown}]"
        return f"http://{shown}:{port}/"

    @property
    def url(self) -> str:
        """The URL to open: the address with the token (printed, as Jupyter does)."""
        return self.gate.url(self.base_url)
