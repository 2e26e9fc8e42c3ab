"""The runnable example of each trainer (examples/trainers/) run as a user runs it, against
a real `crucible serve` named by CRUCIBLE_SERVE_URL/TOKEN."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.trainers.conftest import ROOT, Service

EXAMPLES = ROOT / "examples" / "trainers"


def _run(args: list[str], cwd: Path, service: Service, extra_path: str = "") -> str:
    env = {**os.environ, "CRUCIBLE_SERVE_URL": service.url, "CRUCIBLE_SERVE_TOKEN": service.token,
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), extra_path) if p)}  # fmt: skip
    done = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_verl_example(service: Service, tmp_path: Path) -> None:
    out = _run([str(EXAMPLES / "verl_reward.py"), str(service.tasks["hello-file"])], tmp_path,
               service)  # fmt: skip
    assert "'score': 1.0, 'crucible_ok': 1.0" in out
    assert "'crucible_invalid': 1.0" in out
    assert (tmp_path / "verl_prompts.parquet").is_file()


def test_slime_example(service: Service, tmp_path: Path) -> None:
    out = _run([str(EXAMPLES / "slime_rm.py")], tmp_path, service)
    assert "rm: 1.0 remove_sample: False" in out
    assert "group_rm: [1.0, 0.0] [False, False]" in out


def test_verifiers_example(service: Service) -> None:
    out = _run([str(EXAMPLES / "verifiers" / "score_env.py")], ROOT, service,
               str(EXAMPLES / "verifiers"))  # fmt: skip
    assert "reward: 1.0" in out and "reward: 0.0" in out


def test_openrlhf_example(service: Service, tmp_path: Path) -> None:
    env = {**os.environ, "CRUCIBLE_SERVE_URL": service.url, "CRUCIBLE_SERVE_TOKEN": service.token,
           "PYTHONPATH": str(ROOT / "src")}  # fmt: skip
    cmd = [sys.executable, "-m", "crucible.trainers.openrlhf", "--port", "0", "--submission",
           "files"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env)  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("remote_rm_url: "):
            pytest.fail(f"the proxy did not start: {line!r}")
        url = line.removeprefix("remote_rm_url: ").strip()
        out = _run([str(EXAMPLES / "openrlhf_remote_rm.py"), url], tmp_path, service)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert "rewards: [1.0, 0.0]" in out
