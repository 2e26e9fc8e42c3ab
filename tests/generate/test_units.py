"""The generator's parts without sandboxes: hostile paths, the protocol, dedup, lineage keys,
the report's figures."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest

from crucible.generate.archive import entry_of, find_duplicate, structure
from crucible.generate.checks import check_dockerfile, check_leak
from crucible.generate.files import HostilePath, check_paths, write_files
from crucible.generate.hardening import set_metadata
from crucible.generate.protocol import ProtocolError, parse_proposal
from crucible.generate.report import build, collapse
from crucible.generate.state import GenState, ProposalState
from tests.generate.scripted import task_files


@pytest.mark.parametrize(
    "rel",
    ["../x.sh", "/etc/passwd", "tests/../../x", "tests//x", "./task.toml", "tests\\x.sh",
     "environment/.", "C:/x", "~/x", "secrets/x", "notes.txt", "tests/a\nb", "a/b/c/d/e/f/g"],
)  # fmt: skip
def test_hostile_paths_are_refused_and_nothing_is_written(tmp_path: Path, rel: str) -> None:
    # Before files.py, a proposal's paths were joined onto the task folder as given:
    # "../x.sh" landed beside it and "/etc/passwd" replaced the root's.
    files = task_files("p")["files"] | {rel: "echo pwned\n"}
    assert check_paths(files)
    with pytest.raises(HostilePath):
        write_files(tmp_path / "task", files)
    assert list(tmp_path.iterdir()) == []


def test_caps_on_entries_and_bytes(tmp_path: Path) -> None:
    many = {f"tests/f{i}.txt": "x" for i in range(100)}
    assert any("more than" in p for p in check_paths(many))
    big = {"tests/big.txt": "x" * (300 * 1024)}
    assert any("bytes" in p for p in check_paths(big))


def test_writes_are_not_followed_through_a_planted_link(tmp_path: Path) -> None:
    # the folder is made fresh: an existing one (which could hold a link) is refused
    (tmp_path / "task").mkdir()
    os.symlink("/etc", tmp_path / "task" / "tests")
    with pytest.raises(FileExistsError):
        write_files(tmp_path / "task", {"tests/test.sh": "x"})
    written = tmp_path / "t2"
    write_files(written, task_files("ok")["files"])
    assert os.access(written / "solution" / "solve.sh", os.X_OK)


def test_protocol_tool_call_and_fenced_block() -> None:
    good = {"category": "files", "files": {"task.toml": "x"}}
    assert parse_proposal(None, [good]).category == "files"
    assert parse_proposal('text\n```json\n{"category": "c", "files": {"a": "b"}}\n```', []).files
    for content, args in (("no block", []), ("```json\n[1]\n```", []), (None, [None]),
                          (None, [{"category": "c", "files": {"a": 1}}])):  # fmt: skip
        with pytest.raises(ProtocolError):
            parse_proposal(content, args)


def test_dedup_by_near_text_and_by_structure(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write_files(a, task_files("alpha")["files"])
    files = task_files("alpha")["files"]
    files["instruction.md"] = files["instruction.md"] + "Thanks.\n"
    write_files(b, files)
    rej = find_duplicate(entry_of("b", b), [entry_of("a", a)])
    assert rej is not None and "Jaccard" in rej.message
    # the normalised structure ignores names and constants, not the shape
    assert structure("def f(x):\n    return x + 1\n") == structure("def g(y):\n    return y + 2\n")
    assert structure("def f(x):\n    return x + 1\n") != structure("def f(x):\n    return [x]\n")


def test_static_checks(tmp_path: Path) -> None:
    t = tmp_path / "t"
    write_files(t, task_files("z", leak=True, dockerfile="FROM debian:bookworm-slim\nRUN --mount=type=secret,id=x cat /run/secrets/x\n")["files"])  # fmt: skip
    assert check_leak(t) is not None
    rej = check_dockerfile(t)
    assert rej is not None and "--mount" in rej.message


def test_lineage_keys_replace_the_models_own(tmp_path: Path) -> None:
    toml = tmp_path / "task.toml"
    toml.write_text('[metadata]\nroot = "forged"\ngeneration = 9\n[agent]\ntimeout_sec = 5.0\n')
    set_metadata(toml, {"root": "r", "generation": 1, "parent": "p"})
    meta = tomllib.loads(toml.read_text())["metadata"]
    assert meta == {"root": "r", "generation": 1, "parent": "p"}


def test_report_keys_and_collapse_alarm() -> None:
    ps = [ProposalState(name=f"t{i}", category="c", root=f"t{i}", source=f"t{i}", phase="done",
                        outcome="accepted", solution_lines=20 - 8 * i, solution_depth=6 - 2 * i,
                        n_attempts=4, n_solved=2, pass_at_1=0.5)
          for i in range(2)]  # fmt: skip
    state = GenState(run_id="g", mode="selfplay", categories=["c", "d"], band=(0.2, 0.7), k=4,
                     setter_model="gpt-4.1-mini", proposals=ps)  # fmt: skip
    r = build(state)
    assert {"proposed", "valid", "accepted", "rejected", "coverage", "in_band", "cost_usd"} <= set(
        r
    )
    assert r["coverage"] == {"c": 2, "d": 0} and r["in_band"] == 2
    assert collapse(ps, 1)["alarm"] is True
    assert collapse(list(reversed(ps)), 1)["alarm"] is False
