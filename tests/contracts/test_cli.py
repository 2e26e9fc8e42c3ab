"""`crucible contracts detect` end to end through the typer app."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.contracts import detect_paths
from tests.contracts.scoring import CORPUS

GPU_UNUSED = "import modal\napp = modal.App()\n@app.function(gpu='T4')\ndef f(): pass\n"


def test_json_matches_the_api_over_a_folder() -> None:
    res = CliRunner().invoke(app, ["contracts", "detect", str(CORPUS / "heldout"), "--json"])
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    assert data == [r.model_dump() for r in detect_paths([CORPUS / "heldout"])]
    assert len(data) >= 20 and all(set(d) == {"file", "contracts", "legacy"} for d in data)


def test_human_table(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("import modal\nstub = modal.Stub()\n")
    res = CliRunner().invoke(app, ["contracts", "detect", str(tmp_path)])
    assert res.exit_code == 0
    assert "a.py" in res.stdout and "legacy_stub" in res.stdout


def test_reached_flag(tmp_path: Path) -> None:
    f = tmp_path / "g.py"
    f.write_text(GPU_UNUSED)

    def contracts(*flags: str) -> list[str]:
        res = CliRunner().invoke(app, ["contracts", "detect", str(f), "--json", *flags])
        assert res.exit_code == 0, res.stderr
        return json.loads(res.stdout)[0]["contracts"]

    assert contracts() == ["app", "function", "gpu"]
    # Nothing starts f when the file is run with python; modal run can start it.
    assert contracts("--reached", "--launch", "python") == ["app"]
    assert contracts("--reached", "--launch", "modal-run") == ["app", "function", "gpu"]
    assert contracts("--reached", "--launch", "modal-run", "--entrypoint", "other") == ["app"]
    assert contracts("--reached", "--launch", "deploy") == ["app", "function", "gpu"]
    bad = CliRunner().invoke(app, ["contracts", "detect", str(f), "--json", "--launch", "nope"])
    assert bad.exit_code == 2 and json.loads(bad.stderr)["error"] == "usage"


def test_errors_are_json_with_exit_codes(tmp_path: Path) -> None:
    missing = CliRunner().invoke(app, ["contracts", "detect", str(tmp_path / "no.py"), "--json"])
    assert missing.exit_code == 3
    assert json.loads(missing.stderr)["error"] == "not_found"
    bad = tmp_path / "bad.py"
    bad.write_text("def f(:\n")
    parse = CliRunner().invoke(app, ["contracts", "detect", str(bad), "--json"])
    assert parse.exit_code == 1
    err = json.loads(parse.stderr)
    assert err["error"] == "parse" and "bad.py:1" in err["message"]
    usage = CliRunner().invoke(app, ["contracts", "detect", "--json"])
    assert usage.exit_code == 2 and json.loads(usage.stderr)["error"] == "usage"


def test_cli_import_does_not_load_the_detector() -> None:
    code = "import sys, crucible.cli.main; print('crucible.contracts' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
