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


def test_an_older_index_gains_the_kind_column_and_runs_keep_their_kind(tmp_path: Path) -> None:
    import sqlite3

    from crucible.records.job import JobConfig
    from crucible.store.index import SCHEMA, Index
    from crucible.store.queries import JobsDir

    old = sqlite3.connect(tmp_path / "index.sqlite")
    old.executescript(SCHEMA.replace(",\n    kind        TEXT NOT NULL DEFAULT 'job'\n", "\n"))
    old.execute(
        "INSERT INTO jobs VALUES ('old','old','completed','oracle',NULL,'local','',1,'/x',"
        "NULL,NULL,'2026-01-01T00:00:00+00:00','2026-01-01T00:00:00+00:00')"
    )
    old.commit()
    old.close()
    idx = Index(tmp_path)
    cfg = JobConfig(job_id="g", name="g", kind="generate", agent="terminal")
    idx.upsert_job(cfg, status="running", path=tmp_path / "g", pid=None, n_trials=3)
    idx.close()
    with JobsDir.open(tmp_path) as jd:
        assert {k: r.kind for k, r in jd.records().items()} == {"old": "job", "g": "generate"}


TRANSLATION = Path(__file__).resolve().parents[2] / "examples" / "translation"


@pytest.mark.parametrize("name", sorted(p.name for p in TRANSLATION.iterdir() if p.is_dir()))
def test_the_translation_examples_pass_the_static_checks(name: str) -> None:
    from crucible.generate.checks import check_contracts, check_schema, declared_contracts

    task = TRANSLATION / name
    for check in (check_dockerfile, check_schema, check_leak, check_contracts):
        assert check(task) is None, (name, check(task))
    assert declared_contracts(task)  # its contracts stage's `require`


def test_a_declared_contract_the_reference_never_reaches_is_refused(tmp_path: Path) -> None:
    import shutil

    from crucible.generate.checks import check_contracts

    task = tmp_path / "t"
    shutil.copytree(TRANSLATION / "secret-merge", task)
    toml = task / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            '"local_entrypoint", "secret"]', '"local_entrypoint", "secret", "volume"]'
        )
    )
    rej = check_contracts(task)
    assert rej is not None and rej.reason == "contracts_unreached" and "volume" in rej.message


def test_the_checks_run_where_the_run_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`crucible generate --executor ray --ray-address A --shared-store S`: every proof and
    rating job is launched on that executor, under the untrusted-task rules still."""
    import asyncio

    from crucible.generate import proofs
    from crucible.generate.loop import GenConfig
    from crucible.generate.setter import SetterSpec
    from crucible.generate.solver import SolverSpec

    seen = []

    async def spy(req, **_kw):  # the launch path's entry: record the request, launch nothing
        seen.append(req)
        raise RuntimeError("stop here")

    monkeypatch.setattr(proofs, "prepare_launch", spy)
    cfg = GenConfig(out=tmp_path, setter=SetterSpec("m", "http://127.0.0.1:9/v1"),
                    solver=SolverSpec("nop", {}), executor="ray", ray_address="127.0.0.1:6379",
                    shared_store="/shared")  # fmt: skip
    with pytest.raises(RuntimeError, match="stop here"):
        asyncio.run(proofs.run_job([tmp_path], tmp_path / "jobs", "oracle", "oracle", 1,
                                   where=cfg.where()))  # fmt: skip
    (req,) = seen
    assert (req.executor, req.ray_address, req.shared_store) == ("ray", "127.0.0.1:6379", "/shared")
    assert (req.tampered, req.task_env, req.no_network) == ("zero", [], True)
