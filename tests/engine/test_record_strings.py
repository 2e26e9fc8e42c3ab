"""Attack: one string no record can hold must not stop the job (issue 23, class 8).

Each carrier puts a lone surrogate ("\\udcff": a byte 0xff that is not UTF-8, as
Python decodes file names, or a JSON "\\udcff" escape) where a trial's record picks
it up, beside an honest trial, in one real `crucible run` (the CLI, real sandboxes):

- reward-detail: an honest test writes reward.json with a detail "caf\\udcff";
- tampered-name: the attempt creates /usr/bin/$'\\xff' (image mode / docker: recorded);
- submitted-name: the submission folder holds a file named $'\\xff'.py;
- trace-name: the submitted Modal program names its function "square\\udcff", which
  the io stage's runtime trace carries.

Before the fix the first record write raised (UnicodeEncodeError), `crucible run`
died with a traceback and exit 1, and nothing was counted; a resume died the same
way. After it every trial is counted, each surrogate is stored as a visible escape
("\\xff"), and a resume of the job finishes.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
IMAGE = "debian:bookworm-slim"

TOML = """schema_version = "1.1"
{metadata}
[agent]
timeout_sec = 60
[verifier]
timeout_sec = 60
[environment]
docker_image = "{image}"
network_mode = "no-network"
"""
REWARD_1 = "echo 1 > /logs/verifier/reward.txt"
PROGRAM = """import modal

app = modal.App("squares")


@app.function(name="square\\udcff")
def square(x: int) -> int:
    return x * x


@app.local_entrypoint()
def main() -> None:
    print(sum(square.map(range(4))))
"""
REFERENCE = "print(sum(x * x for x in range(4)))\n"
IO_STAGE = """[metadata.crucible]
submission = ["/app/main.py"]
[[metadata.crucible.stages]]
kind = "io"
reference = "tests/reference.py"
entrypoint = "main"
cases = [{args = []}]
"""
CONTRACTS_STAGE = """[metadata.crucible]
submission = ["/app/"]
[[metadata.crucible.stages]]
kind = "contracts"
require = ["app"]
"""
# name -> (task.toml metadata, solve.sh, test.sh, extra files)
CARRIERS: dict[str, tuple[str, str, str, dict[str, str]]] = {
    "honest": ("", "touch /app/ok", REWARD_1, {}),
    "reward-detail": (
        "",
        "true",
        """printf '{"reward": 1, "note": "caf\\\\udcff"}' > /logs/verifier/reward.json""",
        {},
    ),
    "tampered-name": ("", ": > /usr/bin/$'\\xff'", REWARD_1, {}),
    "submitted-name": (
        CONTRACTS_STAGE,
        "printf 'import modal\\napp = modal.App(\"a\")\\n' > /app/main.py; : > /app/$'\\xff'.py",
        REWARD_1,
        {},
    ),
    "trace-name": (
        IO_STAGE,
        "cp /solution/main.py /app/main.py",
        REWARD_1,
        {"solution/main.py": PROGRAM, "tests/reference.py": REFERENCE},
    ),
}


def dataset(root: Path, names: list[str]) -> Path:
    for name in names:
        metadata, solve, test, files = CARRIERS[name]
        task = root / name
        (task / "tests").mkdir(parents=True)
        (task / "solution").mkdir()
        (task / "task.toml").write_text(TOML.format(metadata=metadata, image=IMAGE))
        (task / "instruction.md").write_text("Do the task.\n")
        (task / "solution" / "solve.sh").write_text(f"#!/bin/bash\nmkdir -p /app\n{solve}\n")
        (task / "tests" / "test.sh").write_text(f"#!/bin/bash\n{test}\n")
        for rel, text in files.items():
            (task / rel).write_text(text)
    return root


def crucible(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crucible.cli.main", *args],
                          capture_output=True, text=True, timeout=600, cwd=REPO)  # fmt: skip


def record(jobs: Path, job: str, task: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((jobs / job / f"{task}__0" / "result.json").read_text())
    return data


def check_carrier(jobs: Path, job: str, name: str, env: str) -> None:
    """The carrier's record holds its string escaped ("\\xff"), where it belongs."""
    r = record(jobs, job, name)
    assert r["outcome"] == "graded", r["error"]
    v = r["verifier_result"]
    if name == "reward-detail":
        assert v["rewards"] == {"reward": 1.0} and v["details"] == {"note": "caf\\xff"}
    elif name == "tampered-name":
        # docker's engine sends names as valid UTF-8 (an undecodable byte becomes U+FFFD)
        shown = "/usr/bin/\\xff" if env == "local" else "/usr/bin/\ufffd"
        assert any(shown in p for p in r["tampered_paths"]), r["tampered_paths"]
    elif name == "submitted-name":
        assert "/app/\\xff.py" in v["submission"]["files"], v["submission"]
    elif name == "trace-name":
        (case,) = v["stages"][-1]["details"]["cases"]
        assert case["passed"] and case["remote_inputs"] == {"square\\xff": 4}, case


def check_job(jobs: Path, job: str, carrier: str, env: str) -> None:
    summary = json.loads((jobs / job / "result.json").read_text())
    assert summary["n_done"] == 2 and summary["outcomes"] == {"graded": 2}, summary
    assert record(jobs, job, "honest")["verifier_result"]["rewards"] == {"reward": 1.0}
    check_carrier(jobs, job, carrier, env)
    conn = sqlite3.connect(jobs / "index.sqlite")
    rows = conn.execute("SELECT COUNT(*) FROM trials WHERE job_id=?", (job,)).fetchone()[0]
    conn.close()
    assert rows == 2


def run_and_resume(tmp_path: Path, carrier: str, env: str) -> None:
    """The carrier beside an honest trial in one job; then the carrier's record is removed
    (a run killed before writing it) and the job resumed: it runs again, and finishes."""
    jobs = tmp_path / "jobs"
    data = dataset(tmp_path / "tasks", ["honest", carrier])
    first = crucible("run", str(data), "--env", env, "--jobs-dir", str(jobs), "--job-name", "j",
                     "--max-retries", "0", "--json")  # fmt: skip
    assert first.returncode == 0, first.stderr[-3000:]
    assert "Traceback" not in first.stderr
    check_job(jobs, "j", carrier, env)
    (jobs / "j" / f"{carrier}__0" / "result.json").unlink()
    again = crucible("run", "--resume", "j", "--jobs-dir", str(jobs), "--json")
    assert again.returncode == 0, again.stderr[-3000:]
    check_job(jobs, "j", carrier, env)


CARRIER_NAMES = [n for n in CARRIERS if n != "honest"]


@pytest.mark.parametrize("carrier", CARRIER_NAMES)
def test_carrier_beside_an_honest_trial_on_local(
    tmp_path: Path, buildah: None, carrier: str
) -> None:
    run_and_resume(tmp_path, carrier, "local")


@pytest.mark.docker
@pytest.mark.parametrize("carrier", CARRIER_NAMES)
def test_carrier_beside_an_honest_trial_on_docker(
    tmp_path: Path, docker_engine: None, carrier: str
) -> None:
    run_and_resume(tmp_path, carrier, "docker")


def test_a_trial_whose_folder_cannot_be_made_never_stops_the_job(
    tmp_path: Path, buildah: None
) -> None:
    """A task folder named 254 bytes long: its trial folder ("<name>__0") is past
    NAME_MAX, so the trial can neither run nor write a record. Before the fix the
    OSError left run_trial, the job died with a traceback and the honest trial next to
    it was not counted; now it is crucible's failure (sandbox_failed, left out of the
    mean), the honest trial is counted, and a resume runs the lost one again."""
    data = dataset(tmp_path / "tasks", ["honest"])
    long = data / ("n" * 254)
    (data / "honest").rename(long)
    dataset(data, ["honest"])
    jobs = tmp_path / "jobs"
    for args in (("run", str(data), "--job-name", "j"), ("run", "--resume", "j")):
        res = crucible(*args, "--env", "local", "--jobs-dir", str(jobs), "--max-retries", "0",
                       "--json")  # fmt: skip
        assert res.returncode == 0, res.stderr[-3000:]
        summary = json.loads(res.stdout)
        assert summary["outcomes"] == {"graded": 1, "sandbox_failed": 1}, summary
        assert summary["mean_reward"] == 1.0 and summary["n_excluded"] == 1
    assert "File name too long" in (jobs / "j" / "job.log").read_text()
