"""A client of the grading service (`crucible serve`): grades and sessions over HTTP.

Every adapter in trainers/ calls the service through this. Grading is idempotent by
item id, so the client retries a request that failed in transport (the service never
starts a second sandbox for an id it has seen), and it polls `pending` items until
their `wait_s` is spent. The URL and token come from the arguments, or from
CRUCIBLE_SERVE_URL and CRUCIBLE_SERVE_TOKEN (or a file named by CRUCIBLE_SERVE_TOKEN_FILE).
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from crucible.records.serve import (
    ExecResponse,
    GradeItem,
    GradeRequest,
    GradeResponse,
    GradeResult,
    GradeStatus,
    SessionInfo,
)

URL_ENV = "CRUCIBLE_SERVE_URL"
TOKEN_ENV = "CRUCIBLE_SERVE_TOKEN"
TOKEN_FILE_ENV = "CRUCIBLE_SERVE_TOKEN_FILE"
DEFAULT_WAIT_S = 600.0
TRANSPORT_RETRIES = 5
POLL_S = 0.5


class ServiceError(RuntimeError):
    """The service refused a request (4xx) or kept failing (5xx, transport)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def resolve(url: str | None, token: str | None) -> tuple[str, str]:
    url = url or os.environ.get(URL_ENV)
    if not url:
        raise ServiceError(f"no service URL: pass url= or set {URL_ENV}")
    if token is None:
        token = os.environ.get(TOKEN_ENV)
    if token is None and os.environ.get(TOKEN_FILE_ENV):
        token = Path(os.environ[TOKEN_FILE_ENV]).read_text().strip()
    if not token:
        raise ServiceError(f"no token: pass token= or set {TOKEN_ENV} or {TOKEN_FILE_ENV}")
    return url.rstrip("/"), token


def _items(items: Iterable[GradeItem | Mapping[str, Any]]) -> list[GradeItem]:
    return [i if isinstance(i, GradeItem) else GradeItem.model_validate(i) for i in items]


def _check(resp: httpx.Response) -> httpx.Response:
    if resp.status_code >= 400:
        try:
            detail = resp.json().get("detail", resp.text)
        except ValueError:
            detail = resp.text
        raise ServiceError(f"{resp.status_code}: {str(detail)[:500]}", resp.status_code)
    return resp


def _http_options(url: str, token: str, timeout_s: float, verify: bool | str) -> dict[str, Any]:
    """What both clients' httpx clients are made with: the bearer token, no read timeout
    (a grade may take as long as its `wait_s`)."""
    return {"base_url": url, "headers": {"Authorization": f"Bearer {token}"},
            "timeout": httpx.Timeout(timeout_s, read=None), "verify": verify}  # fmt: skip


class ServiceClient:
    """Blocking client (what TRL's and verl's reward calls want)."""

    def __init__(self, url: str | None = None, token: str | None = None, *,
                 timeout_s: float = 30.0, verify: bool | str = True) -> None:  # fmt: skip
        self.url, token = resolve(url, token)
        self._http = httpx.Client(**_http_options(self.url, token, timeout_s, verify))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, method: str, path: str, **kw: Any) -> httpx.Response:
        for attempt in range(TRANSPORT_RETRIES + 1):
            try:
                resp = self._http.request(method, path, **kw)
            except httpx.TransportError as exc:
                if attempt == TRANSPORT_RETRIES:
                    raise ServiceError(f"the service did not answer: {exc}") from exc
            else:
                if resp.status_code < 500 or attempt == TRANSPORT_RETRIES:
                    return _check(resp)
            time.sleep(min(8.0, 0.25 * 2**attempt))
        raise AssertionError("unreachable")

    def health(self) -> dict[str, Any]:
        data: dict[str, Any] = self._send("GET", "/health").json()
        return data

    def grade(self, items: Iterable[GradeItem | Mapping[str, Any]],
              wait_s: float = DEFAULT_WAIT_S) -> list[GradeResult]:  # fmt: skip
        """Grade every item; results in input order. Items still `pending` after
        `wait_s` come back pending."""
        batch = _items(items)
        deadline = time.monotonic() + wait_s
        req = GradeRequest(items=batch, wait_s=wait_s)
        body = self._send("POST", "/v1/grade", json=req.model_dump(mode="json")).json()
        results = GradeResponse.model_validate(body).results
        while True:
            left = deadline - time.monotonic()
            waiting = [i for i, r in enumerate(results) if r.status == GradeStatus.pending]
            if not waiting or left <= 0:
                return results
            time.sleep(min(POLL_S, left))
            for i in waiting:
                got = self._send(
                    "GET", f"/v1/grade/{quote(results[i].id, safe='')}", params={"wait_s": 0}
                )
                results[i] = GradeResult.model_validate(got.json())

    # -- sessions ----------------------------------------------------------------
    def open_session(self, task: str, *, task_hash: str | None = None,
                     idle_timeout_s: float | None = None) -> SessionInfo:  # fmt: skip
        got = self._send(
            "POST", "/v1/sessions", json=_session_body(task, task_hash, idle_timeout_s)
        )
        return SessionInfo.model_validate(got.json())

    def exec(self, session: str, command: str | list[str], *, timeout_s: float = 60.0,
             cwd: str | None = None, env: dict[str, str] | None = None,
             input: str | None = None) -> ExecResponse:  # fmt: skip
        body = _exec_body(command, timeout_s, cwd, env, input)
        got = self._send("POST", f"/v1/sessions/{_seg(session)}/exec", json=body)
        return ExecResponse.model_validate(got.json())

    def upload(self, session: str, path: str, content: str | bytes, mode: int = 0o644) -> None:
        body = _upload_body(path, content, mode)
        self._send("POST", f"/v1/sessions/{_seg(session)}/upload", json=body)

    def download(self, session: str, path: str) -> bytes:
        got = self._send("GET", f"/v1/sessions/{_seg(session)}/download", params={"path": path})
        return _downloaded(got.json())

    def grade_session(self, session: str, grade_id: str | None = None) -> GradeResult:
        got = self._send("POST", f"/v1/sessions/{_seg(session)}/grade", json={"id": grade_id})
        return GradeResult.model_validate(got.json())

    def close_session(self, session: str) -> None:
        self._send("DELETE", f"/v1/sessions/{_seg(session)}")


class AsyncServiceClient:
    """Non-blocking client (slime's async rm, verifiers' rubric)."""

    def __init__(self, url: str | None = None, token: str | None = None, *,
                 timeout_s: float = 30.0, verify: bool | str = True) -> None:  # fmt: skip
        self.url, token = resolve(url, token)
        self._http = httpx.AsyncClient(**_http_options(self.url, token, timeout_s, verify))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncServiceClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _send(self, method: str, path: str, **kw: Any) -> httpx.Response:
        for attempt in range(TRANSPORT_RETRIES + 1):
            try:
                resp = await self._http.request(method, path, **kw)
            except httpx.TransportError as exc:
                if attempt == TRANSPORT_RETRIES:
                    raise ServiceError(f"the service did not answer: {exc}") from exc
            else:
                if resp.status_code < 500 or attempt == TRANSPORT_RETRIES:
                    return _check(resp)
            await asyncio.sleep(min(8.0, 0.25 * 2**attempt))
        raise AssertionError("unreachable")

    async def grade(self, items: Iterable[GradeItem | Mapping[str, Any]],
                    wait_s: float = DEFAULT_WAIT_S) -> list[GradeResult]:  # fmt: skip
        batch = _items(items)
        deadline = time.monotonic() + wait_s
        req = GradeRequest(items=batch, wait_s=wait_s)
        got = await self._send("POST", "/v1/grade", json=req.model_dump(mode="json"))
        results = GradeResponse.model_validate(got.json()).results
        while True:
            left = deadline - time.monotonic()
            waiting = [i for i, r in enumerate(results) if r.status == GradeStatus.pending]
            if not waiting or left <= 0:
                return results
            await asyncio.sleep(min(POLL_S, left))
            for i in waiting:
                got = await self._send(
                    "GET", f"/v1/grade/{quote(results[i].id, safe='')}", params={"wait_s": 0}
                )
                results[i] = GradeResult.model_validate(got.json())

    # -- sessions (the same calls as ServiceClient's, awaited) ---------------------
    async def open_session(self, task: str, *, task_hash: str | None = None,
                           idle_timeout_s: float | None = None) -> SessionInfo:  # fmt: skip
        body = _session_body(task, task_hash, idle_timeout_s)
        return SessionInfo.model_validate(
            (await self._send("POST", "/v1/sessions", json=body)).json()
        )

    async def exec(self, session: str, command: str | list[str], *, timeout_s: float = 60.0,
                   cwd: str | None = None, env: dict[str, str] | None = None,
                   input: str | None = None) -> ExecResponse:  # fmt: skip
        body = _exec_body(command, timeout_s, cwd, env, input)
        got = await self._send("POST", f"/v1/sessions/{_seg(session)}/exec", json=body)
        return ExecResponse.model_validate(got.json())

    async def upload(self, session: str, path: str, content: str | bytes,
                     mode: int = 0o644) -> None:  # fmt: skip
        body = _upload_body(path, content, mode)
        await self._send("POST", f"/v1/sessions/{_seg(session)}/upload", json=body)

    async def download(self, session: str, path: str) -> bytes:
        path_q = {"path": path}
        got = await self._send("GET", f"/v1/sessions/{_seg(session)}/download", params=path_q)
        return _downloaded(got.json())

    async def grade_session(self, session: str, grade_id: str | None = None) -> GradeResult:
        got = await self._send("POST", f"/v1/sessions/{_seg(session)}/grade", json={"id": grade_id})
        return GradeResult.model_validate(got.json())

    async def close_session(self, session: str) -> None:
        await self._send("DELETE", f"/v1/sessions/{_seg(session)}")


# -- request bodies both clients send ---------------------------------------------------
def _seg(session: str) -> str:
    return quote(session, safe="")


def _session_body(task: str, task_hash: str | None, idle_timeout_s: float | None) -> dict[str, Any]:
    body: dict[str, Any] = {"task": {"id": task, "hash": task_hash}}
    if idle_timeout_s is not None:
        body["idle_timeout_s"] = idle_timeout_s
    return body


def _exec_body(command: str | list[str], timeout_s: float, cwd: str | None,
               env: dict[str, str] | None, input: str | None) -> dict[str, Any]:  # fmt: skip
    return {"command": command, "timeout_s": timeout_s, "cwd": cwd, "env": env or {},
            "input": input}  # fmt: skip


def _upload_body(path: str, content: str | bytes, mode: int) -> dict[str, Any]:
    if isinstance(content, bytes):
        return {"path": path, "content": base64.b64encode(content).decode(), "base64": True,
                "mode": mode}  # fmt: skip
    return {"path": path, "content": content, "mode": mode}


def _downloaded(got: dict[str, Any]) -> bytes:
    content = str(got["content"])
    return base64.b64decode(content) if got.get("base64") else content.encode()
