"""The head of a ray job killed with SIGKILL mid-job: its node agents die with it (they
are its actors), and `crucible run --resume` on the same cluster runs only the trials
without a final record, as with the local executor."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.wait import wait_until

SRC = Path(__file__).resolve().parents[2] / "src"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"


def _crucible(*args: str) -> list[str]:
    return [sys.executable, "-m", "crucible.cli.main", *args]


@pytest.mark.slow
def test_a_killed_head_resumes(ray_cluster: Any, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    ray_opts = ["--executor", "ray", "--ray-address", ray_cluster.address]
    first = subprocess.Popen(
        _crucible(
            "run",
            str(EXAMPLES / "hello-file"),
            "--agent",
            "oracle",
            "-k",
            "6",
            "-c",
            "1",
            "--jobs-dir",
            str(jobs),
            "--job-name",
            "killed",
            "--json",
            *ray_opts,
        ),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    job = jobs / "killed"
    try:
        wait_until(lambda: any(job.glob("*/result.json")), "a first trial's record")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    before = {p.parent.name: json.loads(p.read_text())["id"] for p in job.glob("*/result.json")}
    assert 0 < len(before) < 6
    again = subprocess.run(
        _crucible("run", "--resume", "killed", "--jobs-dir", str(jobs), "--json", *ray_opts),
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    after = {p.parent.name: json.loads(p.read_text()) for p in job.glob("*/result.json")}
    assert sorted(after) == [f"hello-file__{a}" for a in range(6)]
    assert all(r["outcome"] == "graded" and r["node"] for r in after.values())
    for name, rid in before.items():  # what was final stays as it was: not run again
        assert after[name]["id"] == rid
    summary = json.loads((job / "result.json").read_text())
    assert summary["n_done"] == 6 and summary["status"] == "completed"


@pytest.mark.slow  # Ray's client tries for some seconds before it gives up
def test_a_driver_without_the_cluster_token_is_refused(ray_cluster: Any) -> None:
    """Only a head holding the token can reach the agents: a driver without it (or with
    another) cannot even join the cluster."""
    probe = (
        "import ray, sys\n"
        "try:\n    ray.init(address=sys.argv[1], include_dashboard=False)\n"
        "except Exception as exc:\n    print('refused', type(exc).__name__); sys.exit(3)\n"
        "print('joined')\n"
    )
    env = {**os.environ, "RAY_AUTH_TOKEN": "0" * 64}
    wrong = subprocess.run([sys.executable, "-c", probe, ray_cluster.address], env=env,
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    assert wrong.returncode == 3 and "refused" in wrong.stdout, (wrong.stdout, wrong.stderr[-2000:])
