"""One-shot sandboxes: the local provider's public API for running one hostile command (run.py)."""

from crucible.sandboxes.local.gpus import gpu_count
from crucible.sandboxes.local.oneshot.run import (
    IO_UID_BASE,
    OneShotResult,
    OneShotSpec,
    run_oneshot,
    runtime_dir,
)

__all__ = ["IO_UID_BASE", "OneShotResult", "OneShotSpec", "gpu_count", "run_oneshot", "runtime_dir"]
