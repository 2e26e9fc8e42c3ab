"""What a separate verifier per step costs a multi-step trial, against grading in place.

    python bench/steps_verifier.py                 # local provider, 5 trials each
    python bench/steps_verifier.py --env docker -k 5

The two-step example (tests/tasks/harbor/tasks/two-step) with `artifacts = ["/app/log.txt"]`,
once with `environment_mode = "shared"` and once with "separate" (each step then graded
in a verifier sandbox of its own), run by `crucible run` with the oracle one trial at a
time. Printed per mode: trials graded, their rewards and the median trial duration.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

TWO_STEP = Path(__file__).resolve().parents[1] / "tests" / "tasks" / "harbor" / "tasks" / "two-step"


def task(root: Path, mode: str) -> Path:
    shutil.copytree(TWO_STEP, root)
    toml = root / "task.toml"
    head, rest = toml.read_text().split("[environment]")
    toml.write_text(
        f'{head}artifacts = ["/app/log.txt"]\n[verifier]\nenvironment_mode = "{mode}"\n'
        f'[environment]\ndocker_image = "debian:bookworm-slim"{rest}'
    )
    return root


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--env", default="local")
    ap.add_argument("-k", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        jobs = Path(tmp) / "jobs"
        for mode in ("shared", "separate"):
            cmd = [sys.executable, "-m", "crucible.cli.main", "run", str(task(Path(tmp) / mode, mode)),
                   "-a", "oracle", "-k", str(args.k), "-c", "1", "--env", args.env,
                   "--jobs-dir", str(jobs), "--job-name", mode, "--json"]  # fmt: skip
            subprocess.run(cmd, check=True, capture_output=True)
            results = [json.loads(p.read_text()) for p in (jobs / mode).glob("*/result.json")]
            secs = [
                (
                    datetime.fromisoformat(r["finished_at"])
                    - datetime.fromisoformat(r["started_at"])
                ).total_seconds()
                for r in results
            ]
            rewards = sorted(
                {(r["verifier_result"] or {}).get("rewards", {}).get("reward") for r in results}
            )
            graded = sum(r["outcome"] == "graded" for r in results)
            print(
                f"{args.env} {mode}: {graded}/{len(results)} graded, rewards {rewards}, "
                f"median {statistics.median(secs):.3f} s a trial"
            )


if __name__ == "__main__":
    main()
