"""Pages and seconds of `crucible docs index --package NAME` (default: modal).

    python bench/docs_package.py                 # modal, 3 rounds
    python bench/docs_package.py --package httpx --rounds 5

Each round is a fresh `crucible docs index --package` process (interpreter start,
the package's import, the walk, the SQLite write), as an operator runs it; the
in-process split (walk vs write, package already imported) is printed beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from crucible.docs.index import write_index
from crucible.docs.package import package_pages


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--package", default="modal")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        walls = []
        for i in range(args.rounds):
            start = time.perf_counter()
            out = subprocess.run(
                [sys.executable, "-m", "crucible.cli.main", "docs", "index", "--package",
                 args.package, "--out", f"{tmp}/cli{i}", "--json"],
                check=True, capture_output=True, text=True, env=os.environ,
            )  # fmt: skip
            walls.append(time.perf_counter() - start)
            stats = json.loads(out.stdout)
        walls.sort()
        print(f"{stats['source']}: {stats['n_pages']} pages, {stats['n_chars']:,} chars, "
              f"{len(stats['problems'])} problems")  # fmt: skip
        print(f"CLI (fresh process), median of {args.rounds}: {walls[len(walls) // 2]:.2f} s")
        package_pages(args.package)  # imported once, so the split below is the walk alone
        t0 = time.perf_counter()
        pages, _, label = package_pages(args.package)
        t1 = time.perf_counter()
        write_index(pages, Path(tmp) / "inproc", label)
        t2 = time.perf_counter()
        print(f"in process: walk {t1 - t0:.2f} s ({len(pages) / (t1 - t0):,.0f} pages/s), "
              f"SQLite FTS5 write {t2 - t1:.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
