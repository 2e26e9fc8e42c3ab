"""Shared by the task tests (a plain module: conftest modules are not for importing)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

GOOD_TOML = """\
schema_version = "1.1"

[metadata]
difficulty = "easy"

[agent]
timeout_sec = 60.0

[verifier]
timeout_sec = 30.0

[environment]
cpus = 2
memory_mb = 1024
network_mode = "no-network"
"""

MakeTask = Callable[..., Path]
