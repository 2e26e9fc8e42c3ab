"""`crucible adapt swebench`: what an instance becomes (from its metadata alone), and the
command's errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crucible.adapt.base import AdaptError
from crucible.adapt.sources import load_rows
from crucible.adapt.swebench import SwebenchAdapter, SwebenchOptions, image_name, instance
from crucible.cli.main import app
from crucible.tasks.loader import load_task

DJANGO = {
    "repo": "django/django",
    "instance_id": "django__django-11099",
    "base_commit": "d26b2424437dabeeca94d7900b37d2df4410da0c",
    "version": "3.0",
    "problem_statement": "UsernameValidator allows trailing newline in usernames",
    "FAIL_TO_PASS": json.dumps(
        ["test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)"]
    ),
    "PASS_TO_PASS": "[]",
    "patch": "diff --git a/django/contrib/auth/validators.py b/django/contrib/auth/validators.py\n",
    "test_patch": "diff --git a/tests/auth_tests/test_validators.py b/tests/auth_tests/test_validators.py\n",
}


def _jsonl(path: Path, *rows: dict[str, object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_official_image_name_from_the_package() -> None:
    inst = instance(DJANGO)
    assert image_name(inst) == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    assert image_name(inst, "reg.example/{id}:v1") == "reg.example/django_1776_django-11099:v1"
    with pytest.raises(AdaptError, match="image-template"):
        image_name(inst, "{nope}")


def test_an_instance_becomes_a_valid_task(tmp_path: Path) -> None:
    src = _jsonl(tmp_path / "i.jsonl", DJANGO)
    runner = CliRunner()
    res = runner.invoke(app, ["adapt", "swebench", str(src), "-o", str(tmp_path / "out"), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert [t["valid"] for t in report["tasks"]] == [True]
    task = load_task(tmp_path / "out" / "django__django-11099")
    assert task.workdir == "/testbed"
    env = task.config.environment
    assert env.docker_image == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    assert {k: task.metadata[k] for k in ("instance_id", "repo", "version")} == {
        "instance_id": "django__django-11099",
        "repo": "django/django",
        "version": "3.0",
    }
    assert task.metadata["crucible"]["stages"] == [{"kind": "swebench", "role": "gate"}]
    eval_sh = (task.tests_dir / "eval.sh").read_text()
    # The official test command of django 3.0 and its test directive, from the package.
    assert (
        "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 auth_tests.test_validators"
        in eval_sh
    )
    assert (
        "git checkout d26b2424437dabeeca94d7900b37d2df4410da0c tests/auth_tests/test_validators.py"
        in eval_sh
    )
    assert eval_sh.count('"$crucible_nonce"') == 2 and ": '>>>>> Start" not in eval_sh
    assert (task.solution_dir / "gold.patch").read_text() == DJANGO["patch"]
    assert task.instruction.startswith("UsernameValidator allows trailing newline")


def test_ids_select_and_missing_ids_fail(tmp_path: Path) -> None:
    other = {**DJANGO, "instance_id": "django__django-11133"}
    src = _jsonl(tmp_path / "i.jsonl", DJANGO, other)
    ad = SwebenchAdapter(SwebenchOptions(ids=["django__django-11133"]))
    assert [r["instance_id"] for r in ad.rows(str(src))] == ["django__django-11133"]
    with pytest.raises(AdaptError, match="no instance nope"):
        SwebenchAdapter(SwebenchOptions(ids=["nope"])).rows(str(src))


def test_bad_rows_and_sources_say_why(tmp_path: Path) -> None:
    with pytest.raises(AdaptError, match="missing test_patch"):
        instance({**DJANGO, "test_patch": ""})
    with pytest.raises(AdaptError, match="FAIL_TO_PASS is not a JSON list"):
        instance({**DJANGO, "FAIL_TO_PASS": "[oops"})
    (tmp_path / "bad.jsonl").write_text("{}\nnot json\n")
    with pytest.raises(AdaptError, match=r"bad\.jsonl:2"):
        load_rows(str(tmp_path / "bad.jsonl"))
    with pytest.raises(AdaptError, match="no such file"):
        load_rows(str(tmp_path / "absent.jsonl"))


def test_parquet_source(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([DJANGO]), tmp_path / "i.parquet")
    assert load_rows(str(tmp_path / "i.parquet"))[0]["instance_id"] == "django__django-11099"


@pytest.mark.slow  # importing datasets takes ~20 s on a loaded machine
def test_a_dataset_name_without_a_hub_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no cached copy to fall back on
    res = CliRunner().invoke(
        app, ["adapt", "swebench", "nobody/no-such-set", "-o", str(tmp_path / "o"), "--json"]
    )
    assert res.exit_code == 1
    err = json.loads(res.stderr.strip().splitlines()[-1])
    assert "could not be loaded" in err["message"] and "JSONL or Parquet" in err["hint"]
