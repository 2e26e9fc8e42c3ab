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
from crucible.trainers.common import SubmissionMode, find_task, grade_async, merge, prepare
from crucible.webauth.token import check_token, new_token, read_token_file

PATH = "/v1/openrlhf"
MAX_BATCH = 1000
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
        n = len(body.query)
        prompts: list[str | None] = list(body.prompts) if body.prompts else [None] * n
        labels: list[Any] = body.labels or [None] * n
        if len(prompts) != n or len(labels) != n:
            raise HTTPException(422, "query, prompts and labels must have the same length")
        prepared: list[GradeItem | GradeResult] = []
        for query, prompt, label in zip(body.query, prompts, labels, strict=True):
            try:
                task = find_task(label)
            except ValueError as exc:
                raise HTTPException(422, str(exc)) from exc
            text = response_text(query, prompt, eos)
            prepared.append(prepare(task, text, submission, salt, {"trainer": "openrlhf"}))
        items = [p for p in prepared if isinstance(p, GradeItem)]
        results = merge(prepared, await grade_fn(items, wait_s) if items else [])
        return shape(results, unscorable_value)

    return router


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


def proxy_app(client: AsyncServiceClient, token: str, **options: Any) -> FastAPI:
    """A standalone app: OpenRLHF's endpoint in front of a running service."""

    async def grade(items: list[GradeItem], wait_s: float) -> list[GradeResult]:
        try:
            return await grade_async(client, list[GradeItem | GradeResult](items), wait_s)
        except ServiceError as exc:  # a 4xx: unknown task, hash mismatch
            raise HTTPException(exc.status or 400, str(exc)) from exc

    app = FastAPI(title="crucible remote reward model for OpenRLHF")
    app.include_router(openrlhf_router(grade, [Depends(token_check(token))], **options))
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
    p.add_argument("--insecure", action="store_true", help="allow a non-loopback bind")
    a = p.parse_args(argv)
    if a.host not in ("127.0.0.1", "localhost", "::1") and not a.insecure:
        p.error("binding beyond loopback serves the token in clear: pass --insecure to do it")
    token = read_token_file(a.token_file) if a.token_file else check_token(new_token())
    client = AsyncServiceClient(a.service_url)
    app = proxy_app(client, token, unscorable_value=a.unscorable_value,
                    submission=a.submission, wait_s=a.wait_s)  # fmt: skip
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
