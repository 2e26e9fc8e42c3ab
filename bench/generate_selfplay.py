"""The scripted self-play run: about 30 proposals over five categories, then the oracle on
the accepted tasks, then the report priced at a hosted model's list price.

    PYTHONPATH=src python bench/generate_selfplay.py [--out DIR] [--price-model gpt-4.1-mini]

A scripted setter (tests/generate/scripted.py: Curriculum) and a scripted solver (the
terminal agent against the scripted OpenAI server) play a run on local sandboxes; the
token counts are those the scripted server reports (its prompt and completion sizes).
Prints the report, the oracle's mean reward on DIR/tasks, and the seconds it took.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    from tests.generate.scripted import CATEGORIES, Curriculum
    from tests.helpers.fake_openai import FakeOpenAI

    from crucible.engine.request import RunRequest
    from crucible.generate.loop import GenConfig, Generator
    from crucible.generate.report import build, render_text
    from crucible.generate.setter import SetterSpec
    from crucible.generate.solver import SolverSpec

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--proposals", type=int, default=30)
    ap.add_argument("--price-model", default="gpt-4.1-mini")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="crucible-gen-")) / "gen"
    cur = Curriculum()
    with FakeOpenAI([cur] * 200) as setter, FakeOpenAI([cur.solver] * 2000) as solver:
        cfg = GenConfig(
            out=out,
            setter=SetterSpec("gpt-4.1-mini", setter.url, None),
            solver=SolverSpec("terminal", {"model": "gpt-4.1-mini",
                                           "model_base_url": solver.url, "max_retries": 0}),
            categories=list(CATEGORIES), max_tasks=args.proposals,
            max_proposals=args.proposals, k=2, jobs_dir=out.parent / "jobs",
        )  # fmt: skip
        t0 = time.monotonic()
        state = asyncio.run(Generator(cfg).run())
        took = time.monotonic() - t0
    report = build(state, price_model=args.price_model)
    sys.stdout.write(render_text(report))
    oracle = asyncio.run(_oracle(out / "tasks", out.parent / "oracle-jobs", RunRequest))
    print(f"oracle on {out / 'tasks'}: mean reward {oracle:g}")
    print(f"run took {took:.0f}s on this (loaded) machine; output in {out}")
    print(json.dumps({k: report[k] for k in ("proposed", "valid", "accepted", "in_band",
                                             "rejected", "coverage", "cost_usd", "priced")}))  # fmt: skip


async def _oracle(tasks: Path, jobs: Path, request: type) -> float:
    from crucible.engine.launch import prepare_launch

    plan = await prepare_launch(request(paths=[tasks], agent="oracle", env="local",
                                        jobs_dir=jobs, tampered="zero", task_env=[]))  # fmt: skip
    try:
        summary = await plan.runner().run()
    finally:
        await plan.provider.aclose()
    return float(summary.mean_reward or 0.0)


if __name__ == "__main__":
    main()
