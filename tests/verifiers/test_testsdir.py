"""Merging a multi-step task's tests/ and a step's own into the one folder uploaded to /tests
(verifiers/testsdir.py): in order, a name in both the step's, and a link in a task folder
copied as a link, never followed to what it names (the task folder is untrusted input)."""

from __future__ import annotations

import os
from pathlib import Path

from crucible.verifiers.testsdir import one_tests_dir


async def test_the_step_wins_and_links_stay_links(tmp_path: Path) -> None:
    shared, own = tmp_path / "tests", tmp_path / "steps" / "a" / "tests"
    for d in (shared / "lib", own):
        d.mkdir(parents=True)
    (shared / "test.sh").write_text("shared")
    (shared / "lib" / "helper.sh").write_text("helper")
    (shared / "want.txt").write_text("shared-want")
    (shared / "data").write_text("a file in the task's")
    (own / "test.sh").write_text("own")
    (own / "data").mkdir()  # a folder where the task's has a file: the step's stands
    (own / "data" / "x").write_text("x")
    secret = tmp_path / "host-secret"
    secret.write_text("never copied")
    (own / "want.txt").symlink_to(secret)
    async with one_tests_dir([shared, own]) as got:
        assert (got / "test.sh").read_text() == "own"
        assert (got / "lib" / "helper.sh").read_text() == "helper"
        assert (got / "data" / "x").read_text() == "x"
        assert os.readlink(got / "want.txt") == str(secret)  # a link, as upload_dir sends it
        merged = got
    assert not merged.exists()  # the temporary folder is gone
    async with one_tests_dir([shared]) as only:
        assert only == shared  # one folder: uploaded as it is
