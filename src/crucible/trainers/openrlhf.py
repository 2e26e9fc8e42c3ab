"""An OpenRLHF remote reward model (`--reward.remote_url`) over a running `crucible serve`.

OpenRLHF 0.11 (it does not install here; shapes checked against its source at 3c3be62,
version.txt 0.11.0) posts, per rollout, from openrlhf/utils/agent.py
`SingleTurnAgentExecutor._fetch_rewards_via_http`:
    {"query": [prompt+response text, decoded with special tokens], "prompts": [prompt],
     "labels": [the dataset's --data.label_key value]}
with a 180 s timeout, 5 tries, no headers of its own, and reads `rewards`, `scores`
(falling back to `rewards`) and `extra_logs` from the answer, the shape its own
openrlhf/cli/serve_rm.py returns: {"rewards": [...], "scores": [...], "extra_logs":
{name: [...]}}. A request that keeps failing leaves the reward None, which it cannot
train on, so this endpoint always answers a number: an `unscorable` grade (or one still
pending) gets `unscorable_value`, chosen by the user, and `extra_logs.crucible_unscorable`
says which. The grade id comes from the request's content (task, submission), so
OpenRLHF's retries never start a second sandbox.

OpenRLHF cannot send an Authorization header, so the token may come in the URL
(`http://127.0.0.1:PORT/v1/openrlhf?token=...`); it is compared in constant time.

    python -m crucible.trainers.openrlhf --port 5000 --unscorable-value 0.0
"""

from __future__ import annotations

import argparse
import secrets
import socket
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field

from crucible.records.serve import GradeItem, GradeResult, GradeStatus
from crucible.trainers.client import DEFAULT_WAIT_S, AsyncServiceClient, ServiceError
from crucible.trainers.common import (
    SubmissionMode,
    find_task,
    grade_async,
    grade_sync,
    merge,
    prepare,
    sync_client,
)
from crucible.webauth.token import check_token, new_token, read_token_file

PATH = "/v1/openrlhf"
MAX_BATCH = 1000
MAX_BODY_BYTES = 64 * 1024 * 1024
DEFAULT_EOS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>", "<eos>", "<|end|>")
GradeFn = Callable[[list[GradeItem], float], Awaitable[list[GradeResult]]]


class RemoteRMRequest(BaseModel):
    """The body OpenRLHF posts (extra keys from other versions are ignored)."""

    model_config = ConfigDict(extra="ignore")

    query: list[str] = Field(max_length=MAX_BATCH)
    prompts: list[str] | None = None
    labels: list[Any] | None = None


def response_text(query: str, prompt: str | None, eos: Sequence[str] = DEFAULT_EOS) -> str:
    """The completion inside OpenRLHF's `query` (prompt + response): what follows the
    prompt, without the end-of-sequence tokens it was decoded with."""
    text = query
    if prompt and prompt in query:
        text = query[query.index(prompt) + len(prompt) :]
    changed = True
    while changed:
        changed = False
        stripped = text.rstrip()
        for tok in eos:
            if tok and stripped.endswith(tok):
                text, changed = stripped[: -len(tok)], True
    return text


def token_check(token: str) -> Callable[[Request], None]:
    """A FastAPI dependency: the token from `?token=` or `Authorization: Bearer`,
    compared in constant time; 401 otherwise."""
    secret = token.encode()

    def check(request: Request) -> None:
        given = request.query_params.get("token")
        if given is None:
            auth = request.headers.get("authorization", "")
            given = auth[7:].strip() if auth.lower().startswith("bearer ") else None
        if not given or not secrets.compare_digest(given.encode("utf-8", "replace"), secret):
            raise HTTPException(status_code=401, detail="a valid token is required")

    return check


def openrlhf_router(grade_fn: GradeFn, dependencies: Sequence[Any] = (), *,
                    unscorable_value: float = 0.0, submission: SubmissionMode = "text",
                    wait_s: float = DEFAULT_WAIT_S, salt: str = "",
                    eos: Sequence[str] = DEFAULT_EOS, path: str = PATH) -> APIRouter:  # fmt: skip
    """POST `path` speaking remote_rm_url's shapes. `grade_fn(items, wait_s)` grades
    (an AsyncServiceClient's `grade`, or a service's own); `dependencies` guard it
    (`Depends(token_check(token))` when nothing else checks the token)."""
    router = APIRouter(dependencies=list(dependencies))

    @router.post(path)
    async def remote_rm(body: RemoteRMRequest) -> dict[str, Any]:
        try:
            prepared = prepare_batch(body.query, body.prompts, body.labels, submission, salt, eos)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from exc
        items = [p for p in prepared if isinstance(p, GradeItem)]
        results = merge(prepared, await grade_fn(items, wait_s) if items else [])
        return shape(results, unscorable_value)

    return router


def prepare_batch(queries: Sequence[str], prompts: Sequence[str | None] | None,
                  labels: Sequence[Any] | None, submission: SubmissionMode = "text",
                  salt: str = "", eos: Sequence[str] = DEFAULT_EOS
                  ) -> list[GradeItem | GradeResult]:  # fmt: skip
    """OpenRLHF's three lists as grade items; ValueError on a length mismatch or a
    label that names no task."""
    n = len(queries)
    ps: list[str | None] = list(prompts) if prompts else [None] * n
    ls: list[Any] = list(labels) if labels else [None] * n
    if len(ps) != n or len(ls) != n:
        raise ValueError("query, prompts and labels must have the same length")
    return [prepare(find_task(label), response_text(q, p, eos), submission, salt,
                    {"trainer": "openrlhf"})
            for q, p, label in zip(queries, ps, ls, strict=True)]  # fmt: skip


RewardFunc = Callable[..., dict[str, Any]]


def make_reward_func(*, unscorable_value: float = 0.0, submission: SubmissionMode = "text",
                     wait_s: float = DEFAULT_WAIT_S, salt: str = "",
                     eos: Sequence[str] = DEFAULT_EOS, url: str | None = None,
                     token: str | None = None) -> RewardFunc:  # fmt: skip
    """OpenRLHF's other remote_rm_url: a .py file whose `reward_func(queries, prompts,
    labels)` it loads and runs in a thread (openrlhf/utils/agent.py
    `_fetch_rewards_via_func`), answering the endpoint's shape; no proxy needed."""

    def reward_func(queries: list[str], prompts: list[str], labels: list[Any],
                    **kwargs: Any) -> dict[str, Any]:  # fmt: skip
        prepared = prepare_batch(queries, prompts, labels, submission, salt, eos)
        return shape(grade_sync(sync_client(url, token), prepared, wait_s), unscorable_value)

    return reward_func


def shape(results: list[GradeResult], unscorable_value: float) -> dict[str, Any]:
    """The answer OpenRLHF reads: a number for every item, never None."""
    rewards: list[float] = []
    flags: dict[str, list[float]] = {"crucible_unscorable": [], "crucible_invalid": []}
    for r in results:
        lost = r.status in (GradeStatus.unscorable, GradeStatus.pending) or r.reward is None
        rewards.append(float(unscorable_value) if lost else float(r.reward or 0.0))
        flags["crucible_unscorable"].append(float(lost))
        flags["crucible_invalid"].append(float(r.status == GradeStatus.invalid))
    return {"rewards": rewards, "scores": rewards, "extra_logs": flags}


class DeclaredBodyCap:
    """ASGI: a body must declare its length (aiohttp's `json=` does), at most `max_bytes`;
    411 or 413 before anything reads it."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("method") == "POST":
            length = dict(scope.get("headers", [])).get(b"content-length", b"")
            status = 411 if not length.isdigit() else 413 if int(length) > self.max_bytes else 0
            if status:
                body = b'{"detail": "the body must declare a length of at most %d bytes"}' % (
                    self.max_bytes
                )
                headers = [(b"content-type", b"application/json"),
                           (b"content-length", b"%d" % len(body))]  # fmt: skip
                await send({"type": "http.response.start", "status": status, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def proxy_app(client: AsyncServiceClient, token: str, *, max_body_bytes: int = MAX_BODY_BYTES,
              **options: Any) -> FastAPI:  # fmt: skip
    """A standalone app: OpenRLHF's endpoint in front of a running service."""

    async def grade(items: list[GradeItem], wait_s: float) -> list[GradeResult]:
        try:
            return await grade_async(client, list[GradeItem | GradeResult](items), wait_s)
        except ServiceError as exc:  # a 4xx: unknown task, hash mismatch
            raise HTTPException(exc.status or 400, str(exc)) from exc

    app = FastAPI(title="crucible remote reward model for OpenRLHF")
    app.include_router(openrlhf_router(grade, [Depends(token_check(token))], **options))
    app.add_middleware(DeclaredBodyCap, max_bytes=max_body_bytes)
    return app


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m crucible.trainers.openrlhf",
                                description="OpenRLHF's remote_rm_url over crucible serve")  # fmt: skip
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5000)
    p.add_argument("--token-file", type=Path, help="this endpoint's token (else one is made)")
    p.add_argument("--service-url", help="crucible serve's URL (else CRUCIBLE_SERVE_URL)")
    p.add_argument("--unscorable-value", type=float, default=0.0)
    p.add_argument("--submission", choices=["text", "files", "patch"], default="text")
    p.add_argument("--wait-s", type=float, default=DEFAULT_WAIT_S)
    p.add_argument("--max-body-mb", type=float, default=MAX_BODY_BYTES / 2**20)
    p.add_argument("--insecure", action="store_true", help="allow a non-loopback bind")
    a = p.parse_args(argv)
    if a.host not in ("127.0.0.1", "localhost", "::1") and not a.insecure:
        p.error("binding beyond loopback serves the token in clear: pass --insecure to do it")
    token = read_token_file(a.token_file) if a.token_file else check_token(new_token())
    client = AsyncServiceClient(a.service_url)
    app = proxy_app(client, token, unscorable_value=a.unscorable_value,
                    submission=a.submission, wait_s=a.wait_s,
                    max_body_bytes=int(a.max_body_mb * 2**20))  # fmt: skip
    import uvicorn

    family, kind, proto, _, addr = socket.getaddrinfo(a.host, a.port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(addr)  # bound and listening before the URL is printed: --port 0 prints
    sock.listen(2048)  # the real port, and a client that reads it at once is queued
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"remote_rm_url: http://{shown}:{port}{PATH}?token={token}", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
