"""`crucible docs index|query|show` through the real CLI app."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crucible.cli.main import app

runner = CliRunner()


def test_index_query_show_json(
    docs_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CRUCIBLE_DOCS_INDEX", raising=False)
    r = runner.invoke(app, ["docs", "index", str(docs_dir), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["n_pages"] == 8
    assert (tmp_path / ".crucible" / "docs" / "index.sqlite").is_file()  # the default location

    r = runner.invoke(app, ["docs", "query", "merge", "join", "--limit", "3", "--json"])
    assert r.exit_code == 0, r.output
    hits = json.loads(r.stdout)
    assert hits[0]["path"] == "guide/merging.md"
    assert set(hits[0]) >= {"path", "title", "score", "snippet"}
    assert len(hits) <= 3

    r = runner.invoke(
        app, ["docs", "show", "reference/frame.md", "--offset", "10", "--limit", "5", "--json"]
    )
    assert r.exit_code == 0, r.output
    window = json.loads(r.stdout)
    assert window["offset"] == 10 and window["next_offset"] == 15
    assert len(window["text"].splitlines()) == 5

    r = runner.invoke(app, ["docs", "show", "reference/frame.md", "--limit", "5"])
    assert r.exit_code == 0 and "--offset 5" in r.stdout


def test_env_index_and_errors(
    docs_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    idx = tmp_path / "envidx"
    monkeypatch.setenv("CRUCIBLE_DOCS_INDEX", str(idx))
    r = runner.invoke(app, ["docs", "query", "x", "--json"])
    assert r.exit_code == 3
    assert json.loads(r.stderr)["error"] == "not_found"
    assert runner.invoke(app, ["docs", "index", str(docs_dir)]).exit_code == 0
    r = runner.invoke(app, ["docs", "query", "histogram"])
    assert r.exit_code == 0 and "api/plotting.htm" in r.stdout
    r = runner.invoke(app, ["docs", "show", "no-such-page", "--json"])
    assert r.exit_code == 3
    r = runner.invoke(app, ["docs", "index", str(tmp_path / "absent"), "--json"])
    assert r.exit_code == 3
