"""The two text rules (records/text.py) and the record writers' fallback (store/).

A string that gets past every parse point (a caller's, a new carrier's) must still
never make a record write raise: the record is written with it escaped and says so,
its index row is written, its log line too. And text for a terminal keeps nothing a
terminal would act on.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from crucible.errors import ErrorKind
from crucible.records.text import storable, storable_text, terminal_safe
from crucible.records.trial import AgentInfo, AgentResult, ErrorInfo, TrialResult
from crucible.store.index import Index
from crucible.store.layout import dump, storable_dump
from crucible.store.logs import FileLog, read_lines


def hostile_record(**extra: object) -> TrialResult:
    """A record built in memory with lone surrogates where no parse point looked."""
    return TrialResult(
        id="i", task_name="t\udcff", trial_name="t\udcff__0", job_id="j", attempt=0,
        task_checksum="c", agent_info=AgentInfo(name="oracle"), outcome="verifier_failed",
        error=ErrorInfo(kind=ErrorKind.verifier_failed, type="X", message="bad \ud800 name"),
        agent_result=AgentResult(metadata={"k\udcfe": ["v\udcff", {"deep": b"\xff"}], **extra}),
    )  # fmt: skip


def test_storable_escapes_surrogates_and_keeps_everything_else() -> None:
    assert storable_text("caf\udcff") == "caf\\xff"  # an undecodable byte: as `ls -b`
    assert storable_text("x\ud800y") == "x\\ud800y"  # any other lone surrogate
    assert storable_text("na\u00efve \x00\x1b tab\t") == "na\u00efve \x00\x1b tab\t"
    value = {"k\udcff": [1, 2.5, None, True, "v\udc80", {"n": "ok"}]}
    assert storable(value) == {"k\\xff": [1, 2.5, None, True, "v\\x80", {"n": "ok"}]}
    deep: list[object] = ["\udcff"]
    for _ in range(50_000):  # hostile JSON nests deep: walked without recursion
        deep = [deep]
    out = storable(deep)
    for _ in range(50_000):
        out = out[0]
    assert out == ["\\xff"]


def test_terminal_safe_removes_every_control_sequence_whole() -> None:
    cases = {
        "a\x1b]52;c;Y3VybA==\x07b": "ab",  # OSC 52, BEL-terminated
        "a\x1b]0;title\x1b\\b": "ab",  # OSC 0, ST-terminated
        "a\x1b[2J\x1b[31mb\x1b[0m": "ab",  # CSI
        "a\x9b2Jb\x9d0;t\x9cc": "abc",  # C1 CSI, C1 OSC and ST
        "a\x07\x08\x7f\x00\rb\x1bc": "ab",  # BEL, BS, DEL, NUL, CR; a lone ESC with its final
        "a\u202egnp.exe\u2066b": "agnp.exeb",  # bidi override and isolate
        "keep\nlines\tand tabs": "keep\nlines\tand tabs",
        "f\udcff": "f\\xff",  # a surrogate would not print at all
    }
    for raw, shown in cases.items():
        assert terminal_safe(raw) == shown, raw
        assert terminal_safe(shown) == shown


def test_a_record_with_strings_past_the_parse_points_is_written_escaped(tmp_path: Path) -> None:
    r = hostile_record()
    written, text, warnings = storable_dump(r)
    data = json.loads(text.encode("utf-8"))  # valid UTF-8, valid JSON
    assert data["task_name"] == "t\\xff" and data["error"]["message"] == "bad \\ud800 name"
    assert data["agent_result"]["metadata"] == {"k\\xfe": ["v\\xff", {"deep": "\\xff"}]}
    (warning,) = data["record_warnings"]
    assert "task_name" in warning and "error.message" in warning, warning
    assert warnings == data["record_warnings"] and written.record_warnings == warnings
    assert TrialResult.model_validate_json(text).task_name == "t\\xff"  # it reads back
    assert json.loads(dump(r))["task_name"] == "t\\xff"  # every writer goes through it


def test_a_record_that_cannot_be_written_even_escaped_keeps_its_outcome() -> None:
    _, text, warnings = storable_dump(hostile_record(thing=object()))
    data = json.loads(text)
    assert data["outcome"] == "verifier_failed" and data["trial_name"] == "t\\xff__0"
    assert data["agent_result"] is None  # what could not be written is gone, and said so
    assert any("only its outcome" in w for w in warnings), warnings


def test_index_rows_and_log_lines_never_raise_over_a_string(tmp_path: Path) -> None:
    index = Index(tmp_path)
    good = hostile_record().model_copy(update={"task_name": "fine", "trial_name": "fine__0"})
    assert index.write_trials([hostile_record(), good]) == 2
    rows = sqlite3.connect(tmp_path / "index.sqlite").execute(
        "SELECT trial_name FROM trials ORDER BY trial_name"
    )
    assert [row[0] for row in rows] == ["fine__0", "t\\xff__0"]
    index.close()
    log = FileLog(tmp_path / "trial.log")
    log.warning("a name \udcff from a sandbox")
    log.close()
    assert read_lines(tmp_path / "trial.log")[0].message == "a name \\xff from a sandbox"
