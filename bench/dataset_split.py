"""Seconds `dataset split` takes on N generated-looking tasks (lineages of a root and two
hardened children, near-duplicate grouping over every pair, the cross-split check, copies).

    PYTHONPATH=src python bench/dataset_split.py [--tasks 300] [--val 0.1]

Prints one line per size: tasks, seconds, train/val sizes and the cross-split pairs checked.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from crucible.tasks.splits import split_dataset

WORDS = [f"w{i}" for i in range(5000)]


def write(where: Path, name: str, rng: random.Random, **meta: str | int) -> None:
    root = where / name
    (root / "solution").mkdir(parents=True)
    (root / "environment").mkdir()
    (root / "tests").mkdir()
    lines = "".join(
        f'{k} = "{v}"\n' if isinstance(v, str) else f"{k} = {v}\n" for k, v in meta.items()
    )
    (root / "task.toml").write_text(f'schema_version = "1.1"\n[metadata]\n{lines}')
    (root / "instruction.md").write_text(" ".join(rng.choices(WORDS, k=200)) + "\n")
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "solution" / "solve.sh").write_text(
        "echo " + " ".join(rng.choices(WORDS, k=300)) + "\n"
    )
    (root / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, nargs="+", default=[90, 300])
    ap.add_argument("--val", type=float, default=0.1)
    args = ap.parse_args()
    for n in args.tasks:
        rng = random.Random(n)
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "gen"
            for r in range(n // 3):
                root = f"r{r:04d}-0"
                write(src, root, rng, root=root, generation=0)
                write(src, f"r{r:04d}-1", rng, root=root, parent=root, generation=1)
                write(src, f"r{r:04d}-2", rng, root=root, parent=f"r{r:04d}-1", generation=2)
            t0 = time.perf_counter()
            m = split_dataset(src, args.val, Path(tmp) / "out")
            took = time.perf_counter() - t0
            check = m.near_duplicates
            print(f"tasks {len(m.tasks)}: {took:.2f}s, train {len(m.part('train'))} val "
                  f"{len(m.part('val'))}, cross-split pairs {check.pairs_checked if check else 0}")  # fmt: skip


if __name__ == "__main__":
    main()
