"""kill -9 of `crucible run` on REAL local sandboxes, then resume: nothing of the job is left.

The killed run leaves its slots behind (bwrap's --die-with-parent takes the
sandbox processes, but nobody removes the cgroups or the control folders); the
resume must remove them itself, before its fan-out, with no manual
`sandboxes cleanup`, and leave nothing of its own either.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers.wait import wait_until

from crucible.sandboxes import proc
from crucible.sandboxes.local.cgroups import CGROUP_ROOT, GROUP_NAME
from crucible.sandboxes.local.pool import MARKER
from crucible.sandboxes.local.provider import LocalProvider
from crucible.tasks.scaffold import scaffold_task

REPO = Path(__file__).resolve().parents[2]
ATTEMPTS = 3


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "crucible.cli.main", "run", *args]


def _cgroups_of(job: str) -> list[Path]:
    bases = [CGROUP_ROOT / GROUP_NAME, *CGROUP_ROOT.glob(f"*/{GROUP_NAME}")]
    return [p for base in bases if base.is_dir() for p in base.glob(f"{job}.*") if p.is_dir()]


def _scratch_of(job: str, provider: LocalProvider) -> list[Path]:
    roots = [provider.runtime_dir, provider.fast_dir]
    return [p for root in roots if root.is_dir() for p in root.rglob(f"*{job}*")]


def _processes_of(job: str) -> list[str]:
    """Processes named after the job's slots, or sitting in its cgroups."""
    found = []
    for pid in proc.all_pids():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            groups = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            continue
        if cmdline.startswith(MARKER + job + ".") or f"/{GROUP_NAME}/{job}." in groups:
            found.append(f"{pid}: {cmdline[:120]}")
    return found


def _agents_sleeping(job: str) -> int:
    n = 0
    for pid in proc.all_pids():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            groups = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            continue
        if cmdline.startswith(b"sleep\x00600") and f"/{GROUP_NAME}/{job}." in groups:
            n += 1
    return n


@pytest.fixture
def job() -> Iterator[str]:
    """A job id of this test's own; whatever a failed run of the test left is removed."""
    job_id = f"kill9-{uuid.uuid4().hex[:8]}"
    yield job_id
    asyncio.run(LocalProvider().cleanup(job_id))


def test_kill_9_mid_run_then_resume_leaves_nothing_of_the_job(tmp_path: Path, job: str) -> None:
    provider = LocalProvider()
    if not provider.cgroups.usable:
        pytest.skip(f"needs cgroups to find the sandboxes' processes: {provider.cgroups.reason}")
    task = scaffold_task("sleepy", tmp_path / "tasks")
    (task / "solution" / "solve.sh").write_text("#!/bin/sh\nsleep 600\n")
    jobs = tmp_path / "jobs"
    run = subprocess.Popen(
        _cli(str(task), "--jobs-dir", str(jobs), "--job-name", job, "-k", str(ATTEMPTS),
             "-c", str(ATTEMPTS), "--json"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO, start_new_session=True,
    )  # fmt: skip
    try:
        # every trial is in its agent phase, inside a live sandbox
        wait_until(lambda: _agents_sleeping(job) == ATTEMPTS or run.poll() is not None,
                   "the agents to be running in their sandboxes")  # fmt: skip
        assert run.poll() is None, "the run ended before it could be killed"
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()

    # what the killed run left: its slots' cgroups and control folders
    assert _cgroups_of(job), "kill -9 left no cgroup: this test would show nothing"
    assert _scratch_of(job, provider), "kill -9 left no scratch folder"
    assert not list(jobs.glob(f"{job}/*/result.json")), "a trial finished before the kill"

    # on resume the agents still sleep: the trial time limit ends them, inside their own
    # budgets, so each counts against its attempt (a stalling agent gets no gap)
    resumed = subprocess.run(
        _cli("--resume", job, "--jobs-dir", str(jobs), "--trial-timeout", "3",
             "--max-retries", "0", "--json"),
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    # every trial ended in an error: the run says so with exit 1 (nothing was graded)
    assert resumed.returncode == 1 and "nothing_graded" in resumed.stderr, resumed.stderr
    summary = json.loads((jobs / job / "result.json").read_text())
    assert summary["status"] == "completed" and summary["n_done"] == ATTEMPTS, summary
    assert summary["outcomes"] == {"verifier_failed": ATTEMPTS}, summary

    assert _processes_of(job) == []
    assert _cgroups_of(job) == []
    assert _scratch_of(job, provider) == []
    log = (jobs / job / "job.log").read_text()
    assert f"removed {ATTEMPTS} sandbox(es) an earlier run of this job left" in log, log
