"""A submitted Python file is read as Python decodes it, or refused: UTF-8 only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tests.verifiers.test_stages import CONTRACTS, judge_toml, make_task, submitted

from crucible.errors import ErrorKind
from crucible.verifiers.pipeline import declared
from crucible.verifiers.source import UndecodableSource, python_text
from crucible.verifiers.stages.base import StageContext
from crucible.verifiers.submission import Submission

# In UTF-7 "+AAo-" is a newline: a UTF-8 reader sees one comment, Python two lines of code.
HIDDEN = b"# -*- coding: utf-7 -*-\nprint('shown')\n# note +AAo-print('hidden')\n"


def test_utf7_hides_code_from_a_utf8_reader(tmp_path: Path) -> None:
    # The premise of the attack, checked on the interpreter itself.
    (tmp_path / "m.py").write_bytes(HIDDEN)
    out = subprocess.run([sys.executable, str(tmp_path / "m.py")], capture_output=True, text=True)
    assert out.stdout.split() == ["shown", "hidden"]
    assert "print('hidden')" not in HIDDEN.decode("utf-8").splitlines()[2].split("#", 1)[0]


@pytest.mark.parametrize(
    "data",
    [
        b"print('hi')\n",
        b"\xef\xbb\xbfprint('hi')\n",
        b"# -*- coding: utf-8 -*-\nprint('hi')\n",
        b"#!/usr/bin/env python\n# vim: set fileencoding=UTF8 :\nprint('hi')\n",
        b"# coding=ascii\nprint('hi')\n",
        b"# coding: utf_8\nprint('hi')\n",
        b"x = 1\ny = 2\n# coding: utf-7  (line 3 is no cookie, for Python either)\n",
    ],
)
def test_utf8_files_are_read_as_python_reads_them(data: bytes) -> None:
    text = python_text(data, "/app/main.py")
    assert text == data.decode("utf-8-sig")


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (HIDDEN, "declares coding 'utf-7'"),
        (b"#!/usr/bin/python\n# coding: latin-1\nx = '\xe9'\n", "declares coding 'iso-8859-1'"),
        (b"# coding: cp1252\nx = 1\n", "declares coding 'cp1252'"),
        (b"# coding: no-such-codec\nx = 1\n", "Python refuses"),
        (b"\xef\xbb\xbf# coding: latin-1\nx = 1\n", "Python refuses"),
        (b"x = '\xff'\n", "Python refuses"),
        (b"x = 1\ny = '\xc3'\n", "not valid UTF-8 at byte"),
        (b"# coding: ascii\nx = '\xc3\xa9'\n", "not valid ASCII"),
        # after a lone CR: line 2 for a reader that splits lines there, refused all the same
        (b"x = 1\r# coding: utf-7\nprint(1)\n", "utf-7"),
    ],
)
def test_files_python_decodes_otherwise_are_refused(data: bytes, why: str) -> None:
    with pytest.raises(UndecodableSource) as info:
        python_text(data, "/app/main.py")
    assert why in info.value.message and "/app/main.py" in info.value.message
    assert info.value.kind is ErrorKind.verifier_failed  # the attempt's: counted 0


def test_submission_reads_every_stage_the_same_text(tmp_path: Path) -> None:
    main, data, bad = tmp_path / "main.py", tmp_path / "data.txt", tmp_path / "bad.py"
    main.write_bytes(b"\xef\xbb\xbfprint('hi')\n")
    data.write_bytes(b"caf\xe9")
    sub = Submission(files={"/app/main.py": main, "/app/data.txt": data})
    assert sub.sources() == {"/app/main.py": "print('hi')\n"}
    assert sub.texts() == {"/app/main.py": "print('hi')\n", "/app/data.txt": "caf\ufffd"}
    bad.write_bytes(HIDDEN)
    sub = Submission(files={"/app/main.py": main, "/app/bad.py": bad})
    for read in (sub.sources, sub.texts):
        with pytest.raises(UndecodableSource, match=r"/app/bad\.py declares coding 'utf-7'"):
            read()


@pytest.mark.parametrize("stage", ["contracts", "io", "judge"])
async def test_every_host_stage_refuses_a_utf7_submission(tmp_path: Path, stage: str) -> None:
    """The gate, the io stage and the judge read through Submission.sources(): none of
    them reads (or runs) a program that Python decodes otherwise."""
    toml = {
        "contracts": CONTRACTS,
        "judge": judge_toml("http://127.0.0.1:9/v1"),
        "io": '[[metadata.crucible.stages]]\nkind = "io"\nreference = "solution/main.py"\n'
        "cases = [{args = []}]\n",
    }[stage]
    task = make_task(tmp_path / "t", toml)
    (only,) = declared(task)[1]
    sub = submitted(tmp_path, "print(1)\n")
    sub.files["/app/main.py"].write_bytes(HIDDEN)
    with pytest.raises(UndecodableSource, match=r"/app/main\.py declares coding 'utf-7'"):
        await only.run(StageContext(task, sub, {"reward": 1.0}))
