"""The service's bearer token, as a FastAPI dependency every route but /health carries.

The token is webauth/token.py's (generated at start unless --token-file gives one),
compared in constant time. A request without it, or with a wrong one, is 401 (RFC 6750), and the
token is never accepted from the URL (a trainer's logs keep URLs). Routers of other
parts (sessions) are included by the app factory behind the same dependency.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import HTTPException, Request

from crucible.webauth.token import TokenGate

Auth = Callable[[Request], Awaitable[None]]


def bearer_auth(token: str) -> Auth:
    """A dependency that lets a request through only with `Authorization: Bearer TOKEN`."""
    gate = TokenGate(token, port=0)

    async def require_token(request: Request) -> None:  # async: no thread hop per request
        auth = request.headers.get("authorization") or ""
        if auth[:7].lower() != "bearer ":
            raise HTTPException(
                401,
                "a bearer token is required: Authorization: Bearer TOKEN "
                "(crucible serve printed it at start)",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if not gate.matches(auth[7:].strip()):
            raise HTTPException(401, "wrong token", headers={"WWW-Authenticate": "Bearer"})

    return require_token
