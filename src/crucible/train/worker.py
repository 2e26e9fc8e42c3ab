"""The detached training worker: `python -m crucible.train.worker RUN_DIR` loads the run's
config module again and runs its recipe, recording into RUN_DIR (config.run_recipe)."""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from crucible.train.config import load_config, run_recipe, smoke_config
    from crucible.train.run import RunHandle

    if len(argv) != 1:
        print("usage: python -m crucible.train.worker RUN_DIR", file=sys.stderr)
        return 2
    handle = RunHandle.open(Path(argv[0]))
    try:
        if handle.record.source is None:
            raise ValueError("the run has no config source to load")
        config = load_config(Path(handle.record.source))
        if handle.record.smoke:
            config = smoke_config(config)
    except Exception as exc:
        handle.finish("failed", f"loading the config: {exc}")
        return 1
    rec = run_recipe(config, handle)
    return 0 if rec.state in ("completed", "cancelled") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
