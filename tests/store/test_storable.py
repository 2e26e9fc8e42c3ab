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
from crucible.records.text import MAX_DEPTH, TOO_DEEP, storable, storable_text, terminal_safe
from crucible.records.trial import AgentInfo, AgentResult, ErrorInfo, TrialResult
from crucible.records.verifier import VerifierResult
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
    for _ in range(MAX_DEPTH - 1):  # and cut where no record could hold it
        out = out[0]
    assert out == [TOO_DEEP]
    shallow: object = ["\udcff"]
    for _ in range(MAX_DEPTH - 1):
        shallow = [shallow]
    assert json.dumps(storable(shallow)).count("\\\\xff") == 1  # kept whole up to the limit


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
    # A graded record keeps what it counts as: a graded 0 with no rewards read back
    # as "no reward" and was left out of the mean.
    graded = hostile_record().model_copy(update={"outcome": "graded", "error": None,
        "verifier_result": VerifierResult(rewards={"reward": 0.0}, exit_code=1,
                                          details={"x": object()})})  # fmt: skip
    written, text, _ = storable_dump(graded)
    back = TrialResult.model_validate_json(text)
    assert back.verifier_result is not None and back.verifier_result.details == {}
    assert back.reward == 0.0 and back.counted_reward == 0.0 and written.reward == 0.0


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


def test_a_deeply_nested_answer_kept_as_a_detail_still_counts_its_zero(tmp_path: Path) -> None:
    """Attack (a policy that wants its 0 left out): an honest test keeps the agent's JSON
    answer in reward.json as a detail; the agent answers with a list nested 600 deep.
    json.loads takes it, pydantic cannot write it (its limit is 255), and the record
    fell back to a bare form without its rewards: the graded 0 was read back as no
    reward, left out of the mean ("1 left out: infrastructure"), and the job's mean
    became the honest trial's 1.0 instead of 0.5."""
    from typer.testing import CliRunner

    from crucible.cli.main import app
    from crucible.store.layout import iter_trial_results

    tasks = tmp_path / "tasks"
    answer = "[" * 600 + "]" * 600
    tests = {
        "deep": 'printf \'{"reward": 0, "answer": %s}\' "$(cat /tmp/answer.json)" '
        "> /logs/verifier/reward.json",
        "honest": "echo 1 > /logs/verifier/reward.txt",
    }
    for name, test in tests.items():
        root = tasks / name
        (root / "tests").mkdir(parents=True)
        (root / "solution").mkdir()
        (root / "task.toml").write_text("[verifier]\ntimeout_sec = 30\n[agent]\ntimeout_sec = 30\n")
        (root / "instruction.md").write_text("Write your answer as JSON to /tmp/answer.json.\n")
        (root / "tests" / "test.sh").write_text(f"#!/bin/bash\n{test}\n")
        solve = f"echo '{answer}' > /tmp/answer.json" if name == "deep" else "true"
        (root / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{solve}\n")
    jobs = tmp_path / "jobs"
    res = CliRunner().invoke(app, ["run", str(tasks), "--agent", "oracle", "--env", "local",
                                   "--jobs-dir", str(jobs), "--job-name", "j",
                                   "--max-retries", "0", "--json", "--quiet"])  # fmt: skip
    assert res.exit_code == 0, res.output
    by_task = {r.task_name: r for r in iter_trial_results(jobs / "j")}
    deep = by_task["deep"]
    assert deep.outcome == "graded" and deep.reward == 0.0 and deep.counted_reward == 0.0
    assert json.loads((jobs / "j" / "result.json").read_text())["mean_reward"] == 0.5
