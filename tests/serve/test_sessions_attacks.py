"""Attacks through a session: a session is an agent (issue 26, item 7). Whatever it does
before its grade, it gains nothing: a planted reward, replaced tests, processes left
running (or a command still in flight at grade time), links out of the workdir, huge
files; a download reads nothing the agent could not; the service is out of reach."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest
from tests.helpers.session_server import session_server
from tests.helpers.wait import wait_until
from tests.serve.test_sessions import session_task

from crucible.records.serve import GradeStatus
from crucible.trainers.client import ServiceClient, ServiceError

SOLVE = "printf 'Hello, crucible!\\n' > /app/hello.txt"
# Silent when it fails: a planted reward would be the only one.
SILENT_TEST = (
    "if printf 'Hello, crucible!\\n' | cmp -s - /app/hello.txt; "
    "then echo 1 > /logs/verifier/reward.txt; fi; exit 0"
)


def grade_after(
    tmp_path: Path, *commands: str, test: str | None = None, toml: str = ""
) -> float | None:
    task = session_task(tmp_path, toml=toml, **({"test": test} if test else {}))
    with session_server(tmp_path, [task]) as srv, ServiceClient(srv.url, srv.token) as c:
        s = c.open_session("hello")
        for cmd in commands:
            c.exec(s.id, cmd, timeout_s=60)
        r = c.grade_session(s.id)
        assert r.status == GradeStatus.ok, r
        return r.reward


def test_planted_reward_gains_nothing(tmp_path: Path) -> None:
    plant = ("mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt "
             "&& echo '{\"reward\": 1}' > /logs/verifier/reward.json")  # fmt: skip
    assert grade_after(tmp_path, plant, test=SILENT_TEST) == 0.0  # verifier_failed: counted 0


def test_replaced_tests_gain_nothing(tmp_path: Path) -> None:
    fake = ("rm -rf /tests; mkdir -p /tests && printf '#!/bin/sh\\necho 1 > "
            "/logs/verifier/reward.txt\\n' > /tests/test.sh && chmod +x /tests/test.sh")  # fmt: skip
    assert grade_after(tmp_path, fake) == 0.0


def test_background_process_does_not_survive_into_grading(tmp_path: Path) -> None:
    # It waits for the tests to appear, then would undo the right answer: killed first.
    saboteur = ("while [ ! -e /tests/test.sh ]; do sleep 0.01; done; "  # timing-ok: polls a condition
                "rm -f /app/hello.txt; echo 0 > /logs/verifier/reward.txt")  # fmt: skip
    plant = f"setsid nohup sh -c '{saboteur}' >/dev/null 2>&1 &"
    assert grade_after(tmp_path, SOLVE, plant) == 1.0


def test_commands_racing_the_grade_gain_nothing(tmp_path: Path) -> None:
    # One command is in flight when the grade is asked for, waiting for the tests to undo
    # the answer; another client thread keeps sending commands that would do the same the
    # moment the tests are there. None may run once the agent phase ended.
    task = session_task(tmp_path)
    with session_server(tmp_path, [task]) as srv, ServiceClient(srv.url, srv.token) as c:
        s = c.open_session("hello")
        c.exec(s.id, SOLVE)
        waiter = ("while [ ! -e /tests/test.sh ]; do sleep 0.01; done; "  # timing-ok: polls a condition
                  "rm -f /app/hello.txt")  # fmt: skip
        undo = "if [ -e /tests/test.sh ]; then rm -f /app/hello.txt; echo HIT; fi"
        got: list[object] = []
        refused: list[int | None] = []

        def hammer() -> None:
            with ServiceClient(srv.url, srv.token) as c2:
                while True:
                    try:
                        got.append(c2.exec(s.id, undo).stdout)
                    except ServiceError as exc:
                        refused.append(exc.status)
                        return

        in_flight = threading.Thread(target=lambda: got.append(c.exec(s.id, waiter, timeout_s=600)))
        in_flight.start()
        wait_until(lambda: srv.manager.live[s.id].busy == 1, "the command to be in flight")
        racer = threading.Thread(target=hammer)
        racer.start()
        wait_until(lambda: got, "the racing commands to run")
        r = c.grade_session(s.id)
        in_flight.join()
        racer.join()
        assert r.reward == 1.0
        assert "HIT\n" not in got and refused == [409]


def test_links_out_of_the_workdir_gain_nothing(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("Hello, crucible!\n")  # the right answer, on the host
    links = (f"ln -s {secret} /app/hello.txt; ln -s /etc /app/etc; ln -s / /app/root; "
             f"ln -s {tmp_path} /app/host")  # fmt: skip
    assert grade_after(tmp_path, links) == 0.0
    job = next((tmp_path / "jobs").iterdir())
    for f in job.rglob("*"):  # nothing of the host's was collected into the trial
        assert not f.is_file() or b"Hello, crucible!" not in f.read_bytes(), f


def test_huge_files_and_names_gain_nothing(tmp_path: Path) -> None:
    huge = ("head -c 64000000 /dev/zero > /app/huge; touch /app/$(printf 'x%.0s' $(seq 250)); "
            "mkdir -p /logs/agent && head -c 32000000 /dev/zero > /logs/agent/huge.log")  # fmt: skip
    assert grade_after(tmp_path, huge) == 0.0
    assert grade_after(tmp_path / "solved", huge, SOLVE) == 1.0


def test_download_reads_nothing_the_agent_could_not(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host secret\n")
    task = session_task(tmp_path)
    with session_server(tmp_path, [task]) as srv, ServiceClient(srv.url, srv.token) as c:
        s = c.open_session("hello")
        c.exec(s.id, f"ln -s {secret} /app/link; ln -s /etc/shadow /app/shadow; "
                     "mkfifo /app/fifo; ln -s /app/fifo /app/fifolink")  # fmt: skip
        for path in ("/app/link", "/app/shadow", "/app/fifo", "/app/fifolink", str(secret),
                     str(srv.job_dir / "x"), "/proc/1/root" + str(secret)):  # fmt: skip
            with pytest.raises(ServiceError) as refused:
                c.download(s.id, path)
            assert refused.value.status in (403, 404, 422), path
        # A file the agent user may not read (the local sandbox's init, mode 0111, owned
        # by a uid not mapped inside): refused, as the agent's own read is.
        assert c.exec(s.id, "cat /.crucible/init > /dev/null").exit_code != 0
        with pytest.raises(ServiceError) as unreadable:
            c.download(s.id, "/.crucible/init")
        assert unreadable.value.status == 403
        # the agent itself sees no host path: the same read from inside fails
        assert c.exec(s.id, f"cat {secret}").exit_code != 0


@pytest.mark.parametrize("network", ["no-network", "public"])
def test_sandbox_cannot_reach_the_service(tmp_path: Path, network: str) -> None:
    task = session_task(tmp_path, network=network)
    with session_server(tmp_path / "srv", [task]) as srv, ServiceClient(srv.url, srv.token) as c:
        port = srv.url.rsplit(":", 1)[1]
        assert httpx.get(f"{srv.url}/v1/sessions/x").status_code == 401  # it listens, here
        s = c.open_session("hello")
        probe = (f"for a in 127.0.0.1 localhost 10.0.2.2; do timeout 5 bash -c "
                 f"\"exec 3<>/dev/tcp/$a/{port} && printf 'GET /v1/sessions/{s.id} HTTP/1.0\\r\\n"
                 f"Authorization: Bearer {srv.token}\\r\\n\\r\\n' >&3 && cat <&3\" "
                 f"2>/dev/null && echo REACHED $a; done; true")  # fmt: skip
        r = c.exec(s.id, probe)
        assert "REACHED" not in r.stdout and "HTTP/" not in r.stdout, r.stdout
        seen = c.exec(s.id, f"ls {srv.job_dir} {tmp_path} 2>&1; cat /proc/*/environ 2>/dev/null "
                            "| tr '\\0' '\\n' | grep -c CRUCIBLE_SERVE || true")  # fmt: skip
        assert "No such file" in seen.stdout and srv.token not in seen.stdout
        c.close_session(s.id)
    assert json.loads(next(srv.job_dir.glob("*/result.json")).read_text())["outcome"] == "cancelled"


def test_a_session_that_ends_its_own_sandbox_counts_zero(tmp_path: Path) -> None:
    # Killing the sandbox from inside must not trade a 0 for a masked `unscorable`.
    task = session_task(tmp_path)
    with session_server(tmp_path, [task]) as srv, ServiceClient(srv.url, srv.token) as c:
        s = c.open_session("hello")
        try:
            c.exec(s.id, "kill -9 1; kill -9 -1")
        except ServiceError as exc:  # the sandbox went while the command ran
            assert exc.status == 502
        r = c.grade_session(s.id)
        assert r.status == GradeStatus.ok and r.reward == 0.0, r
