"""Fixtures: a jobs dir and a factory of job folders in it (see jobfactory.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from jobfactory import JobFactory, Spec, write_job


@pytest.fixture
def jobs_dir(tmp_path: Path) -> Path:
    d = tmp_path / "jobs"
    d.mkdir()
    return d


@pytest.fixture
def make_job(jobs_dir: Path) -> JobFactory:
    def factory(job_id: str, trials: Mapping[str, Sequence[Spec]], **kw: Any) -> Path:
        return write_job(jobs_dir, job_id, trials, **kw)

    return factory
