"""Sessions over HTTP (serve/sessions.py, session_routes.py): real uvicorn on 127.0.0.1, the
trainers' ServiceClient, real bubblewrap sandboxes (local provider, host userland)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from tests.helpers.session_server import session_server
from tests.helpers.wait import wait_until

from crucible.records.serve import GradeStatus
from crucible.serve.session_ops import SessionLimits
from crucible.tasks.loader import load_task
from crucible.tasks.models import Task
from crucible.trainers.client import ServiceClient, ServiceError

# 1 when /app/hello.txt holds exactly the line, else 0.
HELLO_TEST = (
    "if printf 'Hello, crucible!\\n' | cmp -s - /app/hello.txt; "
    "then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi"
)


def session_task(
    root: Path,
    *,
    test: str = HELLO_TEST,
    toml: str = "",
    name: str = "hello",
    network: str = "no-network",
) -> Task:
    root = root / name
    root.mkdir(parents=True)
    (root / "task.toml").write_text(
        'schema_version = "1.1"\n[agent]\ntimeout_sec = 600\n[verifier]\ntimeout_sec = 60\n'
        '[environment]\nnetwork_mode = "' + network + '"\n' + toml
    )
    (root / "instruction.md").write_text("Write /app/hello.txt.\n")
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text("#!/usr/bin/env bash\n" + test + "\n")
    return load_task(root)


def result_json(job_dir: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted(job_dir.glob("*/result.json"))]


def test_multi_turn_session_graded_like_a_trial(tmp_path: Path) -> None:
    task = session_task(tmp_path)
    with session_server(tmp_path, [task]) as srv, ServiceClient(srv.url, srv.token) as c:
        info = c.open_session("hello", task_hash=task.digest)
        assert info.task_hash == task.digest and info.workdir == "/app"
        # several turns, each seeing the state the last one left
        assert c.exec(info.id, "printf 'Hello, ' > part1").exit_code == 0
        assert c.exec(info.id, ["sh", "-c", "printf 'crucible!' > part2"]).exit_code == 0
        got = c.exec(info.id, "cat part1 part2 && pwd")
        assert got.stdout == "Hello, crucible!/app\n"
        assert c.exec(info.id, "cat", input="from stdin").stdout == "from stdin"
        assert c.exec(info.id, "echo $GREETING", env={"GREETING": "hi"}).stdout == "hi\n"
        assert c.exec(info.id, "exit 3").exit_code == 3
        c.upload(info.id, "/app/up/bin.dat", bytes(range(256)))
        assert c.download(info.id, "up/bin.dat") == bytes(range(256))  # relative: the workdir
        c.exec(info.id, "cat part1 part2 > hello.txt && echo >> hello.txt")
        assert c.download(info.id, "/app/hello.txt") == b"Hello, crucible!\n"
        r = c.grade_session(info.id, grade_id="g-1")
        assert r.status == GradeStatus.ok and r.reward == 1.0 and r.id == "g-1" and not r.cached
        again = c.grade_session(info.id, grade_id="g-1")  # a retried grade: the same answer
        assert again.reward == 1.0 and again.cached
        with pytest.raises(ServiceError) as other:
            c.grade_session(info.id, grade_id="g-2")
        assert other.value.status == 409
        with pytest.raises(ServiceError) as after:  # graded: over
            c.exec(info.id, "true")
        assert after.value.status == 409
        records = result_json(srv.job_dir)
        assert len(records) == 1 and records[0]["outcome"] == "graded"
        assert r.trial == f"{srv.manager.job_id}/{records[0]['trial_name']}"
        assert srv.provider.pool.slots and not srv.provider._live  # the sandbox is closed


def test_wrong_solution_is_zero(tmp_path: Path) -> None:
    task = session_task(tmp_path)
    with session_server(tmp_path, [task]) as srv, ServiceClient(srv.url, srv.token) as c:
        s = c.open_session("hello")
        c.upload(s.id, "/app/hello.txt", "Hello, world!\n")
        r = c.grade_session(s.id)
        assert r.status == GradeStatus.ok and r.reward == 0.0 and r.id == s.id


def test_close_without_grade_cancels_the_trial(tmp_path: Path) -> None:
    task = session_task(tmp_path)
    with session_server(tmp_path, [task]) as srv, ServiceClient(srv.url, srv.token) as c:
        s = c.open_session("hello")
        c.exec(s.id, "touch /app/x")
        c.close_session(s.id)
        assert not srv.manager.live and not srv.provider._live
        (record,) = result_json(srv.job_dir)
        assert record["outcome"] == "cancelled"
        for call in (lambda: c.exec(s.id, "true"), lambda: c.grade_session(s.id),
                     lambda: c.close_session(s.id)):  # fmt: skip
            with pytest.raises(ServiceError) as gone:
                call()
            assert gone.value.status == 404


def test_idle_session_is_torn_down(tmp_path: Path) -> None:
    task = session_task(tmp_path)
    with session_server(tmp_path, [task]) as srv, ServiceClient(srv.url, srv.token) as c:
        s = c.open_session("hello", idle_timeout_s=0.2)
        wait_until(lambda: not srv.manager.live, "the idle session to be torn down")
        wait_until(lambda: not srv.provider._live, "its sandbox to close")
        with pytest.raises(ServiceError) as gone:
            c.exec(s.id, "true")
        assert gone.value.status == 404
        assert result_json(srv.job_dir)[0]["outcome"] == "cancelled"
        assert not srv.manager.slots.locked()  # its slot is back


def test_agent_timeout_grades_the_session_as_it_stands(tmp_path: Path) -> None:
    task = session_task(tmp_path, toml="")
    task.config.agent.timeout_sec = 1.0  # the session outlives its agent timeout
    with session_server(tmp_path, [task]) as srv, ServiceClient(srv.url, srv.token) as c:
        s = c.open_session("hello")
        c.upload(s.id, "hello.txt", "Hello, crucible!\n")
        wait_until(lambda: s.id in srv.manager.finished, "the session to be graded by its timeout")
        r = c.grade_session(s.id)
        assert r.status == GradeStatus.ok and r.reward == 1.0
        (record,) = result_json(srv.job_dir)
        assert record["agent_result"]["error"]["type"] == "timeout"  # type: ignore[index]


def test_exec_timeout_kills_the_command(tmp_path: Path) -> None:
    task = session_task(tmp_path)
    with session_server(tmp_path, [task]) as srv, ServiceClient(srv.url, srv.token) as c:
        s = c.open_session("hello")
        r = c.exec(s.id, "echo started; sleep 1000", timeout_s=0.5)
        assert r.timed_out and r.stdout.startswith("started")
        assert c.exec(s.id, "pgrep -f 'sleep 1000' || echo none").stdout.strip() == "none"


def test_caps_output_upload_download(tmp_path: Path) -> None:
    task = session_task(tmp_path)
    limits = SessionLimits(output_cap=1000, upload_max=1000, download_max=1000)
    with session_server(tmp_path, [task], limits=limits) as srv, \
            ServiceClient(srv.url, srv.token) as c:  # fmt: skip
        s = c.open_session("hello")
        r = c.exec(s.id, "head -c 100000 /dev/zero | tr '\\0' a")
        assert r.truncated and len(r.stdout) <= 1000
        for call in (lambda: c.upload(s.id, "big", "a" * 1001),
                     lambda: c.upload(s.id, "big", b"a" * 1001)):  # fmt: skip
            with pytest.raises(ServiceError) as big:
                call()
            assert big.value.status == 413
        c.exec(s.id, "head -c 1001 /dev/zero > big && head -c 1000 /dev/zero > fits")
        with pytest.raises(ServiceError) as big_dl:
            c.download(s.id, "big")
        assert big_dl.value.status == 413
        assert c.download(s.id, "fits") == b"\0" * 1000
        for bad in ("/app/../etc/passwd", "missing", "/dev/zero", "/app"):
            with pytest.raises(ServiceError) as refused:
                c.download(s.id, bad)
            assert refused.value.status in (404, 422), bad


def test_session_count_is_capped(tmp_path: Path) -> None:
    task = session_task(tmp_path)
    with session_server(tmp_path, [task], max_sessions=2) as srv, \
            ServiceClient(srv.url, srv.token) as c:  # fmt: skip
        a, _ = c.open_session("hello"), c.open_session("hello")
        with pytest.raises(ServiceError) as over:
            c.open_session("hello")
        assert over.value.status == 429
        c.close_session(a.id)
        c.open_session("hello")  # room again


def test_sessions_hold_slots_of_the_concurrency_budget(tmp_path: Path) -> None:
    task = session_task(tmp_path)
    with session_server(tmp_path, [task], slots=1) as srv, ServiceClient(srv.url, srv.token) as c:
        first = c.open_session("hello")
        assert srv.manager.slots.locked()
        second: list[str] = []
        opener = threading.Thread(target=lambda: second.append(c.open_session("hello").id))
        opener.start()
        wait_until(lambda: srv.manager.waiting == 1, "the second session to wait for a slot")
        assert not second and len(srv.provider._live) == 1  # no sandbox made for it yet
        c.close_session(first.id)
        opener.join()
        assert second and c.exec(second[0], "echo ok").stdout == "ok\n"


def test_unknown_and_foreign_ids_are_404(tmp_path: Path) -> None:
    task = session_task(tmp_path)
    with session_server(tmp_path, [task]) as srv, ServiceClient(srv.url, srv.token) as c:
        mine = c.open_session("hello")
        assert len(mine.id) >= 32
        c.exec(mine.id, "touch /app/mine")
        for sid in ("x" * 32, mine.id[:-1] + ("A" if mine.id[-1] != "A" else "B")):
            for call in (lambda s=sid: c.exec(s, "ls"), lambda s=sid: c.download(s, "/app/mine"),
                         lambda s=sid: c.upload(s, "f", "x"), lambda s=sid: c.grade_session(s),
                         lambda s=sid: c.close_session(s)):  # fmt: skip
                with pytest.raises(ServiceError) as nf:
                    call()
                assert nf.value.status == 404
        with pytest.raises(ServiceError) as unknown:
            c.open_session("no-such-task")
        assert unknown.value.status == 404
        with pytest.raises(ServiceError) as hash_mismatch:
            c.open_session("hello", task_hash="0" * 64)
        assert hash_mismatch.value.status == 409
        with pytest.raises(ServiceError) as no_token:
            ServiceClient(srv.url, "wrong").exec(mine.id, "ls")
        assert no_token.value.status == 401
        # a second session never sees the first one's sandbox
        other = c.open_session("hello")
        assert c.exec(other.id, "ls /app").stdout == ""
