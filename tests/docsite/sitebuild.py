"""Helpers of the docs-site tests: where the site lives, and `mkdocs build --strict`."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes", "on"}


def require_mkdocs() -> None:
    """mkdocs and its theme come with the dev extra: a failure in CI, a skip elsewhere."""
    missing = [m for m in ("mkdocs", "material") if importlib.util.find_spec(m) is None]
    if missing:
        msg = f"{', '.join(missing)} not installed (pip install -e '.[dev]')"
        if in_ci():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` of `config` into `site`: a broken link or anchor fails it."""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )


@dataclass
class BuiltSite:
    path: Path
    result: subprocess.CompletedProcess[str]
