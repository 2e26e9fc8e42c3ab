"""`crucible runs cancel`: the request file, SIGINT to a live crucible process only,
and what happens on a job that is not running."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers.jobs import JobsFactory
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.errors import ExitCode
from crucible.store.layout import CANCEL_FILE

# A stand-in job process: its argv says "crucible" (as a real job's does); on SIGINT it
# records the signal and exits, as the runner winds down on Ctrl-C.
HANDLER = """
import signal, sys, time, pathlib
def on_int(*_):
    pathlib.Path(sys.argv[1]).write_text("SIGINT")
    sys.exit(0)
signal.signal(signal.SIGINT, on_int)
print("ready", flush=True)
time.sleep(60)
"""


def invoke(*args: object) -> object:
    return CliRunner().invoke(app, [str(a) for a in args])


def spawn(argv: list[str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_cancel_writes_request_and_interrupts_the_job_process(
    jobs: JobsFactory, tmp_path: Path
) -> None:
    marker = tmp_path / "got-signal"
    proc = spawn([sys.executable, "-c", HANDLER, str(marker), "crucible-run"])
    try:
        job = jobs.job("live", tasks=["a"], pid=proc.pid)
        res = invoke("runs", "cancel", "live", "--jobs-dir", jobs.jobs_dir, "--json")
        assert res.exit_code == 0, res.stderr
        rep = json.loads(res.stdout)
        assert rep["signalled"] is True and rep["pid"] == proc.pid
        assert rep["request_written"] is True
        req = json.loads((job.path / CANCEL_FILE).read_text())
        assert "requested_at" in req
        assert proc.wait(timeout=10) == 0
        assert marker.read_text() == "SIGINT"
    finally:
        proc.kill()


# A process that is not crucible's: it records SIGINT and SIGUSR1 in the order it gets them.
BYSTANDER = """
import signal, sys, time
def on(sig, _):
    print(signal.Signals(sig).name, flush=True)
    if sig == signal.SIGUSR1:
        sys.exit(0)
signal.signal(signal.SIGINT, on)
signal.signal(signal.SIGUSR1, on)
print("ready", flush=True)
time.sleep(60)
"""


def test_an_unrelated_process_with_the_pid_is_never_signalled(jobs: JobsFactory) -> None:
    # The index's pid may have been reused by something else: only the file is written.
    proc = spawn([sys.executable, "-c", BYSTANDER])
    try:
        job = jobs.job("reused", tasks=["a"], pid=proc.pid)
        res = invoke("runs", "cancel", "reused", "--jobs-dir", jobs.jobs_dir, "--json")
        assert res.exit_code == 0
        rep = json.loads(res.stdout)
        assert rep["signalled"] is False and "not crucible" in rep["signal_note"]
        assert (job.path / CANCEL_FILE).exists()
        # Pending signals are delivered lowest number first: a SIGINT sent by the cancel
        # would show before our SIGUSR1, however late it was handled.
        proc.send_signal(signal.SIGUSR1)
        out, _ = proc.communicate(timeout=30)
        assert out.split() == ["SIGUSR1"]
    finally:
        proc.kill()
        proc.wait()


def test_cancel_wait_reports_the_final_status(jobs: JobsFactory, tmp_path: Path) -> None:
    marker = tmp_path / "sig"
    # this stand-in marks the job cancelled when interrupted, as the runner does
    code = HANDLER.replace(
        'pathlib.Path(sys.argv[1]).write_text("SIGINT")',
        'pathlib.Path(sys.argv[1]).write_text("SIGINT")\n'
        "    from crucible.store.index import Index\n"
        "    i = Index(pathlib.Path(sys.argv[2])); i.set_job_status('w', 'cancelled'); i.close()",
    )
    proc = spawn([sys.executable, "-c", code, str(marker), str(jobs.jobs_dir), "crucible"])
    try:
        jobs.job("w", tasks=["a"], pid=proc.pid)
        res = invoke("runs", "cancel", "w", "--jobs-dir", jobs.jobs_dir, "--wait", "10", "--json")
        assert res.exit_code == 0, res.stderr
        rep = json.loads(res.stdout)
        assert rep["stopped"] is True and rep["status"] == "cancelled"
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("status", ["completed", "cancelled", "failed"])
def test_cancelling_a_finished_job_is_an_error(jobs: JobsFactory, status: str) -> None:
    job = jobs.job("done", tasks=["a"])
    job.finish(status)
    res = invoke("runs", "cancel", "done", "--jobs-dir", jobs.jobs_dir, "--json")
    assert res.exit_code == ExitCode.ERROR
    err = json.loads(res.stderr)
    assert err["error"] == "not_running" and status in err["message"]
    assert not (job.path / CANCEL_FILE).exists()


def test_cancelling_an_interrupted_job_says_its_process_is_gone(jobs: JobsFactory) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    jobs.job("dead", tasks=["a"], pid=proc.pid)
    res = invoke("runs", "cancel", "dead", "--jobs-dir", jobs.jobs_dir)
    assert res.exit_code == ExitCode.ERROR
    assert "process is gone" in " ".join(res.stderr.split())


# Inside its own pid namespace (pid 1 there), this script makes the pid of a job's
# process be reused: the job's stand-in process A is recorded by the index as the runner
# records itself, A exits, and a bystander B whose argv also says "crucible" is given
# A's pid (ns_last_pid). `runs cancel` must not signal B: B is not the job's process.
REUSE = """
import json, signal, subprocess, sys
from pathlib import Path
from typer.testing import CliRunner
from tests.helpers.jobs import JobsFactory
from crucible.cli.main import app

jobs = JobsFactory(Path(sys.argv[1]))
ready = "print('ready', flush=True); import time; time.sleep(60)"
a = subprocess.Popen([sys.executable, "-c", ready, "crucible-run"], stdout=subprocess.PIPE, text=True)
assert a.stdout.readline().strip() == "ready"
jobs.job("reused", tasks=["a"], pid=a.pid)  # Index.upsert_job, as the runner calls it
a.kill(); a.wait()
Path("/proc/sys/kernel/ns_last_pid").write_text(str(a.pid - 1))
b = subprocess.Popen([sys.executable, "-c", sys.argv[2], "crucible-run"], stdout=subprocess.PIPE, text=True)
assert b.stdout.readline().strip() == "ready"
if b.pid != a.pid:
    print(json.dumps({"reused": False})); b.kill(); sys.exit(0)
res = CliRunner().invoke(app, ["runs", "cancel", "reused", "--jobs-dir", sys.argv[1], "--json"])
# ...and the cancel itself, asked directly (were the job read as running meanwhile)
from crucible.engine.cancel import request_cancel
from crucible.store.queries import JobsDir
with JobsDir.open(Path(sys.argv[1])) as jd:
    report = request_cancel(jd.resolve("reused")).model_dump(mode="json")
b.send_signal(signal.SIGUSR1)
out, _ = b.communicate(timeout=30)
print(json.dumps({"reused": True, "code": res.exit_code, "stderr": res.stderr,
                  "report": report, "bystander_got": out.split()}))
"""


def test_a_reused_pid_is_never_signalled_even_when_it_looks_like_crucible(
    tmp_path: Path,
) -> None:
    """The pid alone does not name the job's process: its start time is recorded beside it,
    and a live process with that pid that started at another time is never signalled."""
    import os
    import shutil

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("making a pid be reused needs root and unshare (a pid namespace)")
    import crucible

    # The crucible under test, and the repository (for tests.helpers).
    path = [str(Path(crucible.__file__).parents[1]), str(Path(__file__).resolve().parents[2])]
    run = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", REUSE,
         str(tmp_path / "jobs"), BYSTANDER],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["reused"], "the bystander did not get the job's pid"
    # The job's process is gone: `runs cancel` says so and writes nothing...
    assert got["code"] == ExitCode.ERROR and "process is gone" in got["stderr"], got
    # ...and the cancel, asked anyway, tells the bystander from the job's process.
    assert got["report"]["signalled"] is False, got
    assert "is not the job's process" in got["report"]["signal_note"], got
    assert got["bystander_got"] == ["SIGUSR1"], got  # no SIGINT before it


@pytest.mark.parametrize("recorded", ["another-boot:123", None])
def test_a_live_crucible_process_without_the_recorded_start_time_is_not_signalled(
    jobs: JobsFactory, tmp_path: Path, recorded: str | None
) -> None:
    """Without a pid namespace: the pid's process looks like crucible, but the start time
    beside the pid is another's (or, in an index from before start times, none)."""
    import sqlite3

    from crucible.engine.cancel import request_cancel
    from crucible.store.queries import JobsDir

    marker = tmp_path / "got-signal"
    proc = spawn([sys.executable, "-c", HANDLER, str(marker), "crucible-run"])
    try:
        jobs.job("j", tasks=["a"], pid=proc.pid)
        with sqlite3.connect(jobs.jobs_dir / "index.sqlite") as db:
            db.execute("UPDATE jobs SET pid_start=? WHERE job_id='j'", (recorded,))
        with JobsDir.open(jobs.jobs_dir) as jd:
            rec = jd.resolve("j")
        # A start time that is not the process's: the job's process is gone.
        assert rec.interrupted is (recorded is not None)
        report = request_cancel(rec)
        assert report.signalled is False and report.request_written
        why = "is not the job's process" if recorded else "no start time recorded"
        assert why in (report.signal_note or ""), report
        assert proc.poll() is None and not marker.exists()
    finally:
        proc.kill()
        proc.wait()


def test_an_index_from_before_start_times_gains_the_column(tmp_path: Path) -> None:
    import sqlite3

    from crucible.store.index import Index

    with sqlite3.connect(tmp_path / "index.sqlite") as db:
        db.execute("CREATE TABLE jobs (job_id TEXT PRIMARY KEY, pid INTEGER)")
    Index(tmp_path).close()
    with sqlite3.connect(tmp_path / "index.sqlite") as db:
        cols = {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
    assert "pid_start" in cols
