"""Seconds per io-stage case, each run in its own bubblewrap sandbox: the reference
computed (cold) versus taken from the per-process cache, and the parts of a case.

    python bench/io_stage.py                 # examples/translation/power-iteration-gpu
    python bench/io_stage.py --rounds 5 --task PATH

The task's io stage runs on its oracle solution (solution/main.py as the submitted
program) `--rounds` times in one process: the first round computes the reference's
outputs, the later ones find them cached. Printed per round: the stage's wall time,
seconds per case, and the mean reference / submission seconds per case (the stage's
own per-case figures), plus one bare sandbox run (`python -c pass`) for scale.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

from crucible.verifiers.stages.ioenv import pyenv

from crucible.sandboxes.local.oneshot import OneShotSpec, run_oneshot
from crucible.tasks.loader import load_task
from crucible.verifiers.pipeline import declared
from crucible.verifiers.stages.base import StageContext
from crucible.verifiers.stages.io import IoStage
from crucible.verifiers.submission import Submission

TASK = Path(__file__).resolve().parents[1] / "examples" / "translation" / "power-iteration-gpu"


async def bare_run() -> float:
    py = pyenv()
    spec = OneShotSpec(command=[py.python, "-c", "pass"], env=py.env, ro_binds=py.binds)
    t0 = time.perf_counter()
    ran = await run_oneshot(spec)
    assert ran.code == 0, ran.stderr
    return time.perf_counter() - t0


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", type=Path, default=TASK)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    task = load_task(args.task)
    stage = next(s for s in declared(task)[1] if isinstance(s, IoStage))
    program = stage.spec.program or "/app/main.py"
    sub = Submission(files={program: args.task / "solution" / "main.py"})
    bare = [await bare_run() for _ in range(3)]
    print(f"bare sandbox (python -c pass): {statistics.median(bare):.3f} s (median of 3)")
    for r in range(args.rounds):
        ctx = StageContext(task, sub, {"reward": 1.0})
        t0 = time.perf_counter()
        res = await stage.run(ctx)
        wall = time.perf_counter() - t0
        cases = res.details["cases"]
        assert res.components["all_pass"] == 1.0, res.reason
        cached = all(c["reference_cached"] for c in cases)
        ref = statistics.mean(c["reference_sec"] for c in cases)
        subm = statistics.mean(c["submission_sec"] for c in cases)
        print(
            f"round {r + 1} (reference {'cached' if cached else 'computed'}): "
            f"{len(cases)} cases in {wall:.2f} s = {wall / len(cases):.2f} s/case "
            f"(reference {ref:.3f} s, submission {subm:.3f} s per case)"
        )


if __name__ == "__main__":
    asyncio.run(main())
