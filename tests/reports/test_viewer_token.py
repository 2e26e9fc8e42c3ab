"""Attack: the viewer on 127.0.0.1 holds every trial's logs and expected answers; an
agent in a local sandbox (today on the host's network) or any other local process
reaches loopback, and passes the Host check by sending `Host: 127.0.0.1`. Without
the server's token, or with a wrong one (in the URL, a cookie or a bearer header),
it gets a 401/403 and no byte of a job; with the token it gets the page.

Before the token (webauth/token.py) every one of these requests was answered 200.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import httpx
import pytest
from tests.helpers.jobs import JobFactory, T

from crucible.reports.viewer import ViewerServer
from crucible.sandboxes.base import SandboxSpec
from crucible.sandboxes.local.provider import LocalProvider
from crucible.webauth.token import TokenError, read_token_file, write_token_file

SECRET = "expected-answer-42"
PATHS = [
    "/",
    "/index.html",
    "/static/app.js",
    "/api/jobs",
    "/api/jobs/leak",
    "/api/jobs/leak/tasks/alpha",
    "/api/jobs/leak/trials/alpha__0",
    "/api/jobs/leak/trials/alpha__0/files/verifier/test-stdout.txt",
]


@pytest.fixture
def leak_job(make_job: JobFactory, jobs_dir: Path) -> Path:
    jdir = make_job("leak", {"alpha": [T(1.0)]})
    (jdir / "alpha__0" / "verifier" / "test-stdout.txt").write_text(f"expected: {SECRET}\n")
    return jdir


def raw(port: int, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    """One request byte for byte, as a hostile local client sends it."""
    lines = [f"GET {path} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items())]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(("\r\n".join([*lines, "Connection: close", "", ""])).encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def port_of(server: ViewerServer) -> int:
    return int(server.server_address[1])


@pytest.mark.parametrize("path", PATHS)
def test_no_token_gets_nothing_even_with_host_127(
    server: ViewerServer, leak_job: Path, path: str
) -> None:
    for headers in ({"Host": "127.0.0.1"}, {"Host": f"127.0.0.1:{port_of(server)}"}, {}):
        status, body = raw(port_of(server), path, headers)
        assert status in (401, 403), (path, headers, status)
        assert SECRET.encode() not in body and b"leak" not in body and b"<script" not in body


@pytest.mark.parametrize(
    "how",
    ["query", "cookie", "bearer", "empty-query", "cookie-other-port", "prefix", "junk-cookie"],
)
def test_a_wrong_token_is_refused(server: ViewerServer, leak_job: Path, how: str) -> None:
    good = server.gate.token
    wrong = good[:-1] + ("A" if good[-1] != "A" else "B")
    path, headers = "/api/jobs/leak", {"Host": "127.0.0.1"}
    if how == "query":
        path += f"?token={wrong}"
    elif how == "empty-query":
        path += "?token="
    elif how == "prefix":
        path += f"?token={good[:-4]}"
    elif how == "cookie":
        headers["Cookie"] = f"{server.gate.cookie_name}={wrong}"
    elif how == "cookie-other-port":  # another viewer's cookie on this host
        headers["Cookie"] = f"crucible_token_1={good}"
    elif how == "junk-cookie":
        headers["Cookie"] = f'{server.gate.cookie_name}="\\x00é; ;;=; a'
    else:
        headers["Authorization"] = f"Bearer {wrong}"
    status, body = raw(port_of(server), path, headers)
    assert status in (401, 403), (how, status)
    assert b"leak" not in body


def test_the_token_once_in_the_url_then_a_cookie(server: ViewerServer, leak_job: Path) -> None:
    with httpx.Client(timeout=10) as browser:
        first = browser.get(server.url + "#/job/leak")
        assert first.status_code == 302 and first.headers["location"] == "/"
        cookie = first.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
        page = browser.get(server.base_url)
        assert page.status_code == 200 and "<script" in page.text
        job = browser.get(server.base_url + "api/jobs/leak")
        assert job.status_code == 200 and job.json()["job_id"] == "leak"
    # a script: the bearer header, or the token in an API URL (served, not redirected)
    auth = {"Authorization": f"Bearer {server.gate.token}"}
    assert httpx.get(server.base_url + "api/jobs", headers=auth).status_code == 200
    got = httpx.get(f"{server.base_url}api/jobs?token={server.gate.token}")
    assert got.status_code == 200 and got.json()["jobs"]


async def test_a_sandbox_on_loopback_gets_nothing(server: ViewerServer, leak_job: Path) -> None:
    """An agent with network, in a real local sandbox, asks the viewer as a browser
    would, with the Host header that passes the check: refused (or, once sandboxes
    have their own network namespace, not reachable at all)."""
    port = port_of(server)
    probe = (
        "import urllib.request as u, urllib.error as e\n"
        f"r = u.Request('http://127.0.0.1:{port}/api/jobs/leak', headers={{'Host': '127.0.0.1'}})\n"
        "try:\n"
        "    print('BODY', u.urlopen(r, timeout=5).read().decode())\n"
        "except e.HTTPError as x:\n"
        "    print('STATUS', x.code)\n"
        "except OSError as x:\n"
        "    print('UNREACHABLE', x)\n"
    )
    provider = LocalProvider()
    async with await provider.create(SandboxSpec(job_id="viewer-probe", network="public")) as box:
        await box.write_file("/tmp/probe.py", probe.encode())
        r = await box.exec("python3 /tmp/probe.py", timeout=30)
    assert "BODY" not in r.stdout and SECRET not in r.stdout, r.stdout
    assert "STATUS 401" in r.stdout or "UNREACHABLE" in r.stdout, (r.stdout, r.stderr)


def test_token_file(tmp_path: Path, jobs_dir: Path) -> None:
    path = tmp_path / "token"
    write_token_file(path, "t" * 40)
    assert path.stat().st_mode & 0o777 == 0o600
    assert read_token_file(path) == "t" * 40
    path.chmod(0o644)
    with pytest.raises(TokenError, match="readable by others"):
        read_token_file(path)
    short = tmp_path / "short"
    write_token_file(short, "abc")
    with pytest.raises(TokenError, match="at least"):
        read_token_file(short)
    srv = ViewerServer(jobs_dir, "127.0.0.1", 0, token="t" * 40)
    th = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    th.start()
    try:
        assert srv.url.endswith("?token=" + "t" * 40)
        ok = httpx.get(srv.base_url + "api/jobs", headers={"Authorization": "Bearer " + "t" * 40})
        assert ok.status_code == 200
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("path", ["//evil.example/x", "/\\evil.example/x", "/%2F%2Fevil"])
def test_the_token_redirect_stays_on_the_site(server: ViewerServer, path: str) -> None:
    with socket.create_connection(("127.0.0.1", port_of(server)), timeout=10) as sock:
        req = f"GET {path}?token={server.gate.token} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        sock.sendall((req + "Connection: close\r\n\r\n").encode())
        head = sock.recv(65536).split(b"\r\n\r\n")[0].decode().splitlines()
    location = next(
        ln.split(":", 1)[1].strip() for ln in head if ln.lower().startswith("location:")
    )
    assert head[0].split()[1] == "302"
    assert location.startswith("/") and location[1:2] not in ("/", "\\"), location
