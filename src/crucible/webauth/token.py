"""The access token every crucible HTTP server asks for, even on loopback.

Binding 127.0.0.1 keeps out other machines, not this one: a local sandbox (or anything
else) sharing the host's network namespace reaches every loopback listener, and a
Host-header check is passed by sending `Host: 127.0.0.1`. So a server makes a random
token at start and prints it in the URL it shows, as Jupyter does
(`http://127.0.0.1:PORT/?token=...`). The browser brings it once in the URL; the
server answers with a cookie (HttpOnly: no script reads it; SameSite=Strict: no other
site's page sends it) and a redirect to the same page without it, so the token leaves
the address bar and history. Scripts may send `Authorization: Bearer TOKEN` instead.
Every comparison is constant-time (`secrets.compare_digest`).

The gate is transport-free: a server hands it the request's path and headers and gets
a verdict back, so the viewer's http.server handler and a later aiohttp service share it.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

QUERY_KEY = "token"
COOKIE_PREFIX = "crucible_token"
MIN_LENGTH = 16
# What a token may hold: URL- and cookie-safe as it is, so it is never quoted.
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9._~-]+")


class Headers(Protocol):
    """A request's headers, as http.server's message or any mapping gives them."""

    def get(self, name: str, /) -> str | None: ...


class TokenError(ValueError):
    """A token file that cannot give a usable token."""


def new_token() -> str:
    """256 random bits, URL-safe."""
    return secrets.token_urlsafe(32)


def check_token(token: str) -> str:
    if len(token) < MIN_LENGTH or not _TOKEN_CHARS.fullmatch(token):
        raise TokenError(f"a token needs at least {MIN_LENGTH} characters of A-Z a-z 0-9 . _ ~ -")
    return token


def read_token_file(path: Path) -> str:
    """The token in `path` (surrounding whitespace dropped). Refused when others can
    read the file: the token is the only thing between a sandbox and the logs."""
    try:
        st = path.stat()
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenError(f"cannot read token file {path}: {exc}") from exc
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise TokenError(f"token file {path} is readable by others: chmod 600 {path}")
    return check_token(text.strip())


def write_token_file(path: Path, token: str) -> None:
    """Write `token` to a new file only its owner can read."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")


@dataclass(frozen=True)
class Verdict:
    """What the server does with a request: serve it (ok), or refuse it (status, why);
    `set_cookie` and `redirect` when the token came in the URL."""

    ok: bool
    status: int = 200
    why: str = ""
    set_cookie: str | None = None
    redirect: str | None = None


def _cookies(header: str) -> dict[str, str]:
    """A Cookie header's pairs, leniently: a malformed pair is skipped, never an error."""
    out: dict[str, str] = {}
    for part in header.split(";"):
        name, eq, value = part.strip().partition("=")
        if eq and name:
            out.setdefault(name, value.strip().strip('"'))
    return out


class TokenGate:
    """Checks one server's token on every request."""

    def __init__(self, token: str, *, port: int) -> None:
        self.token = check_token(token)
        self._secret = token.encode()
        # Cookies are shared by every port of a host: one name per server, so two
        # viewers on one machine do not overwrite each other's cookie.
        self.cookie_name = f"{COOKIE_PREFIX}_{port}"

    def matches(self, given: str | None) -> bool:
        if not given:
            return False
        return secrets.compare_digest(given.encode("utf-8", "replace"), self._secret)

    def url(self, base: str) -> str:
        """`base` with the token as its query: the URL to show and open."""
        return f"{base}?{urlencode({QUERY_KEY: self.token})}"

    def check(self, target: str, headers: Headers, *, redirect: bool = True) -> Verdict:
        """The verdict on a request for `target` (path and query) with `headers`. A page
        whose URL brings the token is redirected to itself without it (`redirect`); an
        API call with the token in its URL is simply served."""
        parts = urlsplit(target)
        query = parse_qsl(parts.query, keep_blank_values=True)
        in_url = [v for k, v in query if k == QUERY_KEY]
        if in_url:
            if not any(self.matches(v) for v in in_url):
                return Verdict(False, 403, "wrong token")
            rest = urlencode([(k, v) for k, v in query if k != QUERY_KEY])
            path = parts.path if parts.path.startswith("/") else "/"
            if path[1:2] in ("/", "\\"):  # "//host" and "/\\host" leave the site
                path = "/"
            return Verdict(
                True,
                set_cookie=(f"{self.cookie_name}={self.token}; Path=/; HttpOnly; SameSite=Strict"),
                redirect=urlunsplit(("", "", path, rest, "")) if redirect else None,
            )
        auth = headers.get("Authorization") or ""
        if auth[:7].lower() == "bearer ":
            if self.matches(auth[7:].strip()):
                return Verdict(True)
            return Verdict(False, 403, "wrong token")
        cookie = _cookies(headers.get("Cookie") or "").get(self.cookie_name)
        if cookie is not None:
            if self.matches(cookie):
                return Verdict(True)
            return Verdict(False, 403, "wrong token")
        return Verdict(
            False, 401, "a token is required: open the URL the server printed (?token=...)"
        )
