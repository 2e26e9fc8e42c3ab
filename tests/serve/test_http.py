"""The service's HTTP edges: the token, caps on what a request may hold, malformed
bodies, the bind rules, TLS and the docs. Each refusal starts nothing."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
from pathlib import Path

import httpx
import pytest
from tests.helpers.serving import Serving, hello_item, write_task
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.records.serve import MAX_ITEMS
from crucible.serve.store import GRADES_DIR


async def test_the_token_is_required_everywhere_but_health(tmp_path: Path, serving: Serving):
    async with serving([write_task(tmp_path / "tasks", "hello")]) as s:
        async with httpx.AsyncClient(base_url=s.url) as bare:
            body = {"items": [hello_item("t1")]}
            assert (await bare.post("/v1/grade", json=body)).status_code == 401
            wrong = {"Authorization": "Bearer " + "x" * 43}
            assert (await bare.post("/v1/grade", json=body, headers=wrong)).status_code == 401
            basic = {"Authorization": "Basic " + s.token}
            assert (await bare.post("/v1/grade", json=body, headers=basic)).status_code == 401
            # Never from the URL: a trainer's logs keep URLs.
            got = await bare.post("/v1/grade", json=body, params={"token": s.token})
            assert got.status_code == 401
            assert (await bare.get("/v1/grade/t1")).status_code == 401
            assert (await bare.get("/metrics")).status_code == 401
            health = await bare.get("/health")
            assert health.status_code == 200 and health.json()["status"] == "ok"
            assert (await bare.get("/docs")).status_code == 200
            spec = (await bare.get("/openapi.json")).json()
            body = spec["paths"]["/v1/grade"]["post"]["requestBody"]["content"]
            assert body["application/json"]["schema"]["$ref"].endswith("/GradeRequest")
            assert {"GradeRequest", "GradeItem", "TaskRef"} <= set(spec["components"]["schemas"])
        assert s.creates == []
        assert (await s.http.get("/metrics")).status_code == 200


async def test_bodies_and_batches_are_capped(tmp_path: Path, serving: Serving):
    async with serving([write_task(tmp_path / "tasks", "hello")], max_body_mb=0.05,
                       max_pending=2) as s:  # fmt: skip
        big = hello_item("big", "x" * 60_000)
        resp = await s.grade(big)
        assert resp.status_code == 413 and "over 52428 bytes" in resp.json()["detail"]

        # Streamed without a Content-Length: counted as it comes.
        async def chunks():  # type: ignore[no-untyped-def]
            data = json.dumps({"items": [big]}).encode()
            for i in range(0, len(data), 4096):
                yield data[i : i + 4096]

        resp = await s.http.post("/v1/grade", content=chunks(),
                                 headers={"content-type": "application/json"})  # fmt: skip
        assert resp.status_code == 413
        # Malformed JSON, a body that is not a request, too many items, none: 422.
        resp = await s.http.post("/v1/grade", content=b'{"items": [',
                                 headers={"content-type": "application/json"})  # fmt: skip
        assert resp.status_code == 422 and "json" in resp.text.lower()
        assert (await s.http.post("/v1/grade", json={"nope": 1})).status_code == 422
        assert (await s.http.post("/v1/grade", json={"items": []})).status_code == 422
        many = {"items": [{"id": str(i)} for i in range(MAX_ITEMS + 1)]}
        assert (await s.http.post("/v1/grade", json=many)).status_code == 422
        bad_id = {"id": "", "task": {"id": "hello"}, "submission": {"type": "text", "text": ""}}
        assert (await s.grade(bad_id)).status_code == 422
        # More new grades than the queue takes: 429, none of them started.
        resp = await s.grade(hello_item("q1"), hello_item("q2"), hello_item("q3"))
        assert resp.status_code == 429 and "cap of 2" in resp.json()["detail"]
        assert s.creates == []
        assert not list((s.service.job_dir / GRADES_DIR).iterdir())
        assert (await s.grade(hello_item("q1"), hello_item("q2"))).status_code == 200


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.1", "::"])
def test_a_bind_beyond_loopback_needs_tls_or_insecure(tmp_path: Path, host: str):
    task = write_task(tmp_path / "tasks", "hello")
    res = CliRunner().invoke(
        app, ["serve", str(task), "--host", host, "--jobs-dir", str(tmp_path / "jobs"), "--json"]
    )
    assert res.exit_code == 2
    err = json.loads(res.stderr.strip().splitlines()[-1])
    assert err["error"] == "usage" and "beyond loopback" in err["message"]
    assert "--insecure" in err["hint"]
    assert not (tmp_path / "jobs").exists()  # refused before anything was made


def test_a_token_file_others_can_read_is_refused(tmp_path: Path):
    task = write_task(tmp_path / "tasks", "hello")
    token = tmp_path / "token"
    token.write_text("a" * 32)
    token.chmod(0o644)
    res = CliRunner().invoke(app, ["serve", str(task), "--token-file", str(token), "--json"])
    assert res.exit_code == 2 and "chmod 600" in res.stderr


@pytest.fixture
def tls_pair(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
         "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_tls_and_a_token_file(tmp_path: Path, serving: Serving, tls_pair: tuple[Path, Path]):
    cert, key = tls_pair
    token_file = tmp_path / "token"
    token_file.write_text("my-token-of-thirty-two-chars-0123\n")
    token_file.chmod(0o600)
    task = write_task(tmp_path / "tasks", "hello")
    async with serving([task], tls_cert=cert, tls_key=key, token_file=token_file) as s:
        assert s.url.startswith("https://127.0.0.1:")
        assert s.token == "my-token-of-thirty-two-chars-0123"
        ctx = ssl.create_default_context(cafile=str(cert))
        async with httpx.AsyncClient(base_url=s.url, verify=ctx,
                                     headers={"Authorization": f"Bearer {s.token}"}) as c:  # fmt: skip
            got = await c.post("/v1/grade", json={"items": [hello_item("tls1")]})
            assert got.status_code == 200 and got.json()["results"][0]["reward"] == 1.0


def test_a_port_in_use_is_a_clear_error(tmp_path: Path):
    task = write_task(tmp_path / "tasks", "hello")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = CliRunner().invoke(app, ["serve", str(task), "--port", str(port), "--jobs-dir",
                                       str(tmp_path / "jobs"), "--json"])  # fmt: skip
    assert res.exit_code == 1
    assert "could not bind" in json.loads(res.stderr.strip().splitlines()[-1])["message"]


async def test_text_utf8_cannot_hold_is_refused_not_a_crash(tmp_path: Path, serving: Serving):
    async with serving([write_task(tmp_path / "tasks", "hello")]) as s:

        async def post(*items: dict) -> httpx.Response:
            body = json.dumps({"items": list(items)})  # JSON escapes it: \\ud800
            return await s.http.post("/v1/grade", content=body,
                                     headers={"content-type": "application/json"})  # fmt: skip

        resp = await post(hello_item("lone-\ud800"))  # an id: the client's bug
        assert resp.status_code == 422
        assert resp.json()["detail"][0]["loc"] == ["items", 0, "id"]
        # In a submission: the policy's output, so that item is invalid.
        resp = await post(hello_item("sub", "content \udcff\n"), hello_item("fine"))
        assert resp.status_code == 200
        r = resp.json()["results"]
        assert (r[0]["status"], r[0]["reward"]) == ("invalid", 0.0)
        assert (r[1]["status"], r[1]["reward"]) == ("ok", 1.0)
        assert len(s.creates) == 1


def test_two_tasks_of_one_name_are_refused_at_start(tmp_path: Path):
    a = write_task(tmp_path / "a", "hello")
    b = write_task(tmp_path / "b", "hello", test="echo 0 > /logs/verifier/reward.txt\n")
    res = CliRunner().invoke(app, ["serve", str(a), str(b), "--port", "0", "--jobs-dir",
                                   str(tmp_path / "jobs")])  # fmt: skip
    assert res.exit_code == 1
    assert "duplicate task name 'hello'" in res.stderr
    assert not (tmp_path / "jobs").exists()
