"""Bytes the terminal agent's record writes for 25, 50 and 100 turns: O(turns), not O(turns²).

    PYTHONPATH=src python bench/agent_trajectory.py            # 25 50 100
    PYTHONPATH=src python bench/agent_trajectory.py 100 200

Each rollout runs the terminal agent in a real local (bubblewrap) sandbox against the
repo's scripted OpenAI-compatible server (tests/helpers/fake_openai.py): every turn runs
one command printing 1000 characters, the last one submits. Printed per rollout: the
bytes written to agent/trajectory.jsonl (the append-only log is all the agent writes),
bytes per turn, and what rewriting the whole record after every turn (the old
trajectory.json) would have written: the sum of the record's size after each turn.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.helpers

from tests.helpers.fake_openai import FakeOpenAI, bash, submit  # noqa: E402

from crucible.agents.base import AgentContext  # noqa: E402
from crucible.agents.terminal.agent import TerminalAgent  # noqa: E402
from crucible.records.trajectory import TRAJECTORY_LOG, load_trajectory  # noqa: E402
from crucible.sandboxes.base import SandboxSpec  # noqa: E402
from crucible.sandboxes.local.provider import LocalProvider  # noqa: E402
from crucible.tasks.loader import load_task  # noqa: E402


async def rollout(turns: int, logs: Path) -> tuple[int, int]:
    task = load_task(ROOT / "examples" / "tasks" / "hello-file")
    provider = LocalProvider()
    sandbox = await provider.create(
        SandboxSpec(task_name=task.name, workdir=task.workdir, network="none")
    )
    try:
        with FakeOpenAI() as server:
            server.push(
                *[bash(f"head -c 1000 /dev/zero | tr '\\0' x; echo {i}") for i in range(turns - 1)],
                submit(),
            )
            agent = TerminalAgent(
                model="gpt-4o",
                model_base_url=server.url,
                model_api_key_env="CRUCIBLE_BENCH_NO_KEY",
                max_turns=turns,
            )
            ctx = AgentContext(task=task, sandbox=sandbox, logs_dir=logs, timeout_sec=3600)
            result = await agent.run(ctx)
            assert result.error is None and result.n_turns == turns, result.error
    finally:
        await sandbox.close()
        await provider.aclose()
    written = (logs / TRAJECTORY_LOG).stat().st_size
    # What the old per-turn rewrite cost: the whole record's size after each turn.
    traj = load_trajectory(logs)
    rewrite = 0
    for k in range(1, turns + 1):
        part = traj.model_copy(
            update={"turns": traj.turns[:k], "messages": traj.messages[: 2 + 2 * k]}
        )
        rewrite += len(part.model_dump_json(indent=1))
    return written, rewrite


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("turns", nargs="*", type=int, default=[25, 50, 100])
    args = ap.parse_args()
    print(f"{'turns':>6} {'log bytes':>11} {'bytes/turn':>11} {'rewrite-per-turn bytes':>23}")
    for n in args.turns:
        with tempfile.TemporaryDirectory() as tmp:
            written, rewrite = asyncio.run(rollout(n, Path(tmp) / "agent"))
        print(f"{n:>6} {written:>11} {written // n:>11} {rewrite:>23}")


if __name__ == "__main__":
    main()
