"""The host's NVIDIA device nodes, bound into a sandbox that asks for a GPU."""

from __future__ import annotations

import re
from pathlib import Path


def gpu_devices() -> list[str]:
    dev = Path("/dev")
    return sorted(str(p) for p in dev.glob("nvidia*") if not p.is_dir())


def gpu_count() -> int:
    return len([d for d in gpu_devices() if re.fullmatch(r"/dev/nvidia\d+", d)])
