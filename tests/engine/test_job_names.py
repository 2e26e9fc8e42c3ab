"""A job name (`--job-name`, `--resume`) names a folder under the jobs dir, never a path out
of it: `../x`, `/abs`, `.hidden` and empty names are refused before anything is written."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from crucible.engine.request import RunRequest


@pytest.mark.parametrize("name", ["../escape", "/tmp/abs", "a/b", ".hidden", "", "  ", "a\\b"])
@pytest.mark.parametrize("field", ["job_name", "resume"])
def test_a_name_that_is_a_path_is_refused(field: str, name: str) -> None:
    with pytest.raises(ValidationError, match="plain folder name"):
        RunRequest(**{field: name})


def test_plain_names_pass() -> None:
    for name in ("2026-12-02__05-48-00", "sweep.terminal-m1", "my_job-1"):
        assert RunRequest(job_name=name, resume=name).job_name == name
