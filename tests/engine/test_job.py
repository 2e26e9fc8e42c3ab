"""The job engine on the SIMULATED provider: faults, hangs, cancel, kill -9 and resume."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crucible.agents.oracle import OracleAgent
from crucible.engine.job import JobOptions, JobRunner, make_job_config
from crucible.sandboxes.simulated import SimulatedProvider
from crucible.tasks.dataset import discover_tasks
from crucible.tasks.models import Task
from crucible.tasks.scaffold import scaffold_task


@pytest.fixture(scope="module")
def task_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tasks")
    for i in range(4):
        scaffold_task(f"t{i}", root)
    return root


def _tasks(root: Path) -> list[Task]:
    tasks, invalid = discover_tasks([root])
    assert not invalid
    return tasks


async def _run(root: Path, jobs: Path, provider: SimulatedProvider, attempts: int = 5,
               **opts: object) -> JobRunner:  # fmt: skip
    tasks = _tasks(root)
    cfg = make_job_config(job_id="j", tasks=tasks, agent="oracle", env="simulated",
                          attempts=attempts, concurrency=4, dataset=[str(root)])  # fmt: skip
    runner = JobRunner(cfg, tasks, provider, OracleAgent(), jobs, JobOptions(**opts))  # type: ignore[arg-type]
    await runner.run()
    return runner


def _rewards(jobs: Path, job: str = "j") -> dict[str, float | None]:
    conn = sqlite3.connect(jobs / "index.sqlite")
    rows = conn.execute("SELECT trial_name, reward FROM trials WHERE job_id=?", (job,)).fetchall()
    conn.close()
    assert len(rows) == len({r[0] for r in rows})  # exactly once each
    return dict(rows)


async def test_injected_faults_retry_and_never_become_zero(task_root: Path, tmp_path: Path) -> None:
    ref = await _run(task_root, tmp_path / "ref", SimulatedProvider(pass_rate=0.5))
    flaky = SimulatedProvider(pass_rate=0.5, fail_rate=0.3, seed=7)
    runner = await _run(task_root, tmp_path / "flaky", flaky, max_retries=50,
                        retry_base_sec=0.001, retry_cap_sec=0.01)  # fmt: skip
    assert flaky.failed > 0 and runner.n_retries == flaky.failed
    assert all(r.graded for r in runner.results.values())
    assert _rewards(tmp_path / "flaky") == _rewards(tmp_path / "ref")
    summary = json.loads((tmp_path / "flaky" / "j" / "result.json").read_text())
    assert summary["n_retries"] == flaky.failed and summary["status"] == "completed"
    assert ref.results  # the reference ran too


async def test_faults_exhausting_retries_are_sandbox_failed_not_zero(
    task_root: Path, tmp_path: Path
) -> None:
    runner = await _run(task_root, tmp_path, SimulatedProvider(fail_rate=1.0), attempts=2,
                        max_retries=2, retry_base_sec=0.001, retry_cap_sec=0.001)  # fmt: skip
    results = list(runner.results.values())
    assert len(results) == 8
    assert {r.outcome for r in results} == {"sandbox_failed"}
    assert all(r.reward is None and r.retries == 2 for r in results)
    assert set(_rewards(tmp_path).values()) == {None}
    summary = json.loads((tmp_path / "j" / "result.json").read_text())
    assert summary["mean_reward"] is None and summary["outcomes"] == {"sandbox_failed": 8}


async def test_a_hang_hits_the_trial_time_limit(task_root: Path, tmp_path: Path) -> None:
    runner = await _run(task_root, tmp_path, SimulatedProvider(hang_rate=1.0), attempts=1,
                        max_retries=1, retry_base_sec=0.001, trial_timeout_sec=0.2)  # fmt: skip
    for r in runner.results.values():
        assert r.outcome == "sandbox_failed" and r.error is not None
        assert "time limit" in r.error.message and r.retries == 1


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "crucible.cli.main", "run", *args]


def _count_results(job_dir: Path) -> int:
    return sum(1 for _ in job_dir.glob("*/result.json")) if job_dir.exists() else 0


def test_kill_9_at_random_points_then_resume(task_root: Path, tmp_path: Path) -> None:
    common = ["--env", "simulated", "--env-param", "start_latency=0.02",
              "--env-param", "pass_rate=0.5", "-k", "10", "-c", "4", "--json"]  # fmt: skip
    ref = subprocess.run(_cli(str(task_root), "--jobs-dir", str(tmp_path / "ref"),
                              "--job-name", "j", *common), capture_output=True, text=True)  # fmt: skip
    assert ref.returncode == 0, ref.stderr
    expected = _rewards(tmp_path / "ref")
    assert len(expected) == 40
    rng = random.Random(1234)
    for round_ in range(3):
        jobs = tmp_path / f"run{round_}"
        proc = subprocess.Popen(_cli(str(task_root), "--jobs-dir", str(jobs), "--job-name", "j", *common),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        stop_at = rng.randint(1, 35)
        deadline = time.monotonic() + 30
        while (
            _count_results(jobs / "j") < stop_at
            and proc.poll() is None
            and time.monotonic() < deadline
        ):
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        done_before = _count_results(jobs / "j")
        resumed = subprocess.run(_cli("--resume", "j", "--jobs-dir", str(jobs), "--json"),
                                 capture_output=True, text=True)  # fmt: skip
        assert resumed.returncode == 0, resumed.stderr
        summary = json.loads(resumed.stdout)
        assert summary["status"] == "completed" and summary["n_done"] == 40, (stop_at, done_before)
        assert _rewards(jobs) == expected


def test_ctrl_c_cancels_then_resume_completes(task_root: Path, tmp_path: Path) -> None:
    args = [str(task_root), "--jobs-dir", str(tmp_path), "--job-name", "j", "--env", "simulated",
            "--env-param", "start_latency=0.3", "-k", "5", "-c", "2", "--json"]  # fmt: skip
    proc = subprocess.Popen(_cli(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while _count_results(tmp_path / "j") < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    summary = json.loads(out)
    assert summary["status"] == "cancelled"
    assert summary["outcomes"].get("cancelled", 0) > 0
    conn = sqlite3.connect(tmp_path / "index.sqlite")
    assert conn.execute("SELECT status FROM jobs WHERE job_id='j'").fetchone()[0] == "cancelled"
    conn.close()
    resumed = subprocess.run(_cli("--resume", "j", "--jobs-dir", str(tmp_path), "--json"),
                             capture_output=True, text=True)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    final = json.loads(resumed.stdout)
    assert final["status"] == "completed" and final["outcomes"] == {"graded": 20}


def test_resume_refuses_changed_task(tmp_path: Path) -> None:
    root = tmp_path / "tasks"
    root.mkdir()
    task = scaffold_task("only", root)
    args = ["--jobs-dir", str(tmp_path / "jobs"), "--env", "simulated", "--json"]
    first = subprocess.run(
        _cli(str(root), "--job-name", "j", *args), capture_output=True, text=True
    )
    assert first.returncode == 0, first.stderr
    (task / "instruction.md").write_text("something else entirely\n")
    again = subprocess.run(_cli("--resume", "j", *args), capture_output=True, text=True)
    assert again.returncode == 1
    err = json.loads(again.stderr.strip().splitlines()[-1])
    assert err["error"] == "task_changed" and "only" in err["message"]


async def test_job_create_rate_limit_holds(task_root: Path, tmp_path: Path) -> None:
    import time as _time

    created: list[float] = []

    class Timed(SimulatedProvider):
        async def create(self, spec):  # type: ignore[no-untyped-def]
            created.append(_time.monotonic())
            return await super().create(spec)

    t0 = _time.monotonic()
    await _run(task_root, tmp_path, Timed(), attempts=10, create_rate=20.0, max_starting=2)
    assert len(created) == 40
    # never more than 20 creations in any 1 s window; the times are recorded after the
    # grant, so scheduling jitter under load is allowed for (unpaced, 40 would take ms)
    for i in range(len(created) - 20):
        assert created[i + 20] - created[i] >= 0.9
    assert _time.monotonic() - t0 >= 39 / 20 * 0.95
