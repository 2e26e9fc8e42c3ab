"""`crucible dataset split` and `dataset mix` (tasks/splits.py, tasks/mix.py, tasks/curate.py):
split hygiene under lineage, the refusals, mix weights, safe copies, and the manifest read
back by `dataset export` and by the task loader every command shares."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.records.dataset_manifest import MANIFEST_NAME, DatasetManifest
from crucible.tasks.curate import CurateError, copy_task
from crucible.tasks.dataset import check_tasks
from crucible.tasks.mix import counts, mix_datasets, parse_source
from crucible.tasks.splits import split_dataset

runner = CliRunner()
WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho "
         "sigma tau upsilon phi chi psi omega").split()  # fmt: skip


def write_task(where: Path, name: str, seed: int, **meta: str | int) -> Path:
    """A task whose instruction and solution are its own (different seeds share few shingles)."""
    words = [
        WORDS[(seed * 7 + i * (seed % 5 + 1)) % len(WORDS)] + str(seed * 31 + i) for i in range(40)
    ]
    root = where / name
    (root / "environment").mkdir(parents=True)
    (root / "solution").mkdir()
    (root / "tests").mkdir()
    meta_lines = "".join(f"{k} = {json.dumps(v)}\n" for k, v in meta.items())
    (root / "task.toml").write_text(f'schema_version = "1.1"\n\n[metadata]\n{meta_lines}\n'
                                    "[verifier]\ntimeout_sec = 30.0\n")  # fmt: skip
    (root / "instruction.md").write_text("Do " + " ".join(words) + ".\n")
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "solution" / "solve.sh").write_text(
        "#!/bin/bash\necho " + " ".join(reversed(words)) + "\n"
    )
    (root / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    return root


@pytest.fixture
def generated(tmp_path: Path) -> Path:
    """Twelve tasks as the generate loop writes them: four lineages (a root and its hardened
    children), two tasks mined from one source workflow, and two loners."""
    d = tmp_path / "gen"
    n = 0
    for r in range(4):
        write_task(d, f"t{r}-g0", n := n + 1, root=f"t{r}-g0", generation=0, category="fan_out")
        write_task(d, f"t{r}-g1", n := n + 1, root=f"t{r}-g0", parent=f"t{r}-g0",
                   operator="add_contract", generation=1)  # fmt: skip
    write_task(d, "mined-a", n := n + 1, source="mine/spectral_peaks.py", mode="mine")
    write_task(d, "mined-b", n := n + 1, source="mine/spectral_peaks.py", mode="mine")
    write_task(d, "solo-1", n := n + 1)
    write_task(d, "solo-2", n := n + 1)
    return d


def groups_together(m: DatasetManifest) -> None:
    part = {t.name: t.part for t in m.tasks}
    for r in range(4):
        assert part[f"t{r}-g0"] == part[f"t{r}-g1"]
    assert part["mined-a"] == part["mined-b"]


def test_split_keeps_lineages_and_workflows_whole_and_is_deterministic(
    tmp_path: Path, generated: Path
) -> None:
    seen = set()
    for seed in range(6):
        m = split_dataset(generated, 0.2, tmp_path / f"out{seed}", seed=seed)
        groups_together(m)
        val = sorted(t.name for t in m.part("val"))
        assert len(val) == 2 and len(m.tasks) == 12
        seen.add(tuple(val))
        assert m.near_duplicates is not None and m.near_duplicates.pairs_checked == 2 * 10
        # the folders are plain tasks, copied whole (same digests)
        back = {c.name: c.task.digest for c in check_tasks([tmp_path / f"out{seed}"]) if c.task}
        assert back == {t.name: t.digest for t in m.tasks}
        assert {p.name for p in (tmp_path / f"out{seed}").iterdir()} == {
            "train",
            "val",
            MANIFEST_NAME,
        }
    assert len(seen) > 1  # the seed matters
    again = split_dataset(generated, 0.2, tmp_path / "again", seed=3)
    first = DatasetManifest.model_validate_json((tmp_path / "out3" / MANIFEST_NAME).read_text())
    assert again == first


def test_a_near_duplicate_pair_is_kept_on_one_side(tmp_path: Path, generated: Path) -> None:
    write_task(generated, "copy-of-solo-1", 11)  # same text as solo-1, another lineage
    for seed in range(4):
        m = split_dataset(generated, 0.25, tmp_path / f"o{seed}", seed=seed)
        part = {t.name: t.part for t in m.tasks}
        assert part["copy-of-solo-1"] == part["solo-1"]


def test_a_split_that_would_separate_a_lineage_is_refused(tmp_path: Path, generated: Path) -> None:
    out = tmp_path / "out"
    res = runner.invoke(app, ["dataset", "split", str(generated), "--val", "0.2", "-o", str(out),
                              "--val-include", "t1-g1", "--json"])  # fmt: skip
    assert res.exit_code == 1
    err = json.loads(res.stderr.strip().splitlines()[-1])
    assert err["error"] == "split_refused"
    assert "lineage (root) 't1-g0' would straddle" in err["message"]
    assert "hardened version of train task 't1-g0'" in err["message"]
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["gen"]  # nothing written


def test_a_forced_near_duplicate_across_the_split_is_refused(
    tmp_path: Path, generated: Path
) -> None:
    write_task(generated, "copy-of-solo-1", 11)
    with pytest.raises(CurateError, match="'copy-of-solo-1' and train task 'solo-1' are near-dup"):
        split_dataset(generated, 0.1, tmp_path / "o", val_include=["copy-of-solo-1"])


def test_a_group_larger_than_the_budget_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "one-lineage"
    for i in range(6):
        write_task(d, f"c{i}", i + 1, root="c0", **({"parent": f"c{i - 1}"} if i else {}))
    with pytest.raises(CurateError, match=r"smallest group .* holds 6") as info:
        split_dataset(d, 0.1, tmp_path / "o")
    assert info.value.error == "split_refused" and not (tmp_path / "o").exists()


def test_mix_counts_follow_the_weights() -> None:
    assert counts([45, 45, 10], [100, 100, 100], 20) == [9, 9, 2]
    assert counts([0.45, 0.45, 0.1], [100, 100, 100], 20) == [9, 9, 2]
    assert counts([45, 45, 10], [90, 200, 50], None) == [90, 90, 20]  # the largest without repeats
    assert counts([1, 1, 1], [10, 10, 10], 10) == [4, 3, 3]  # remainder to the earliest
    with pytest.raises(CurateError, match="issues holds 5"):
        counts([45, 45, 10], [100, 100, 5], 100, ["a", "b", "issues"])


def test_mix_builds_a_weighted_curriculum_read_back_by_export(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    a, b = tmp_path / "a", tmp_path / "b"
    for i in range(8):
        write_task(a, f"a{i}", 100 + i)
    for i in range(4):
        write_task(b, f"b{i}", 200 + i)
    out = tmp_path / "mix"
    res = runner.invoke(app, ["dataset", "mix", f"didactic={a}:3", f"issues={b}:1", "-o", str(out),
                              "--seed", "5", "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert [(s["name"], s["count"]) for s in report["sources"]] == [("didactic", 8), ("issues", 2)]
    m = DatasetManifest.model_validate_json((out / MANIFEST_NAME).read_text())
    assert Counter(t.part for t in m.tasks) == {"didactic": 8, "issues": 2}
    again = mix_datasets([parse_source(f"didactic={a}:3"), parse_source(f"issues={b}:1")],
                         tmp_path / "mix2", seed=5)  # fmt: skip
    assert [t.name for t in again.tasks] == [t.name for t in m.tasks]
    # dataset export reads the manifest: one row per task listed, ids and hashes as recorded
    rows = tmp_path / "rows.jsonl"
    res = runner.invoke(
        app, ["dataset", "export", str(out / MANIFEST_NAME), "-o", str(rows), "--json"]
    )
    assert res.exit_code == 0, res.output
    exported = {(t["task_id"], t["task_hash"]) for t in json.loads(res.stdout)["tasks"]}
    assert exported == {(t.name, t.digest) for t in m.tasks}


@pytest.mark.parametrize("spec", ["noweight=/x", "Bad=/x:1", "a=/x:0", "a=/x:nan", "=/x:1"])
def test_a_bad_source_is_a_usage_error(spec: str) -> None:
    with pytest.raises(CurateError) as info:
        parse_source(spec)
    assert info.value.code == 2


# -- attacks ---------------------------------------------------------------------------


def test_a_task_holding_a_link_is_not_copied(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("token\n")
    task = write_task(tmp_path / "src", "t", 1)
    os.symlink(secret, task / "tests" / "data.txt")
    with pytest.raises(CurateError, match=r"tests/data\.txt is a symbolic link"):
        copy_task(task, tmp_path / "dst")
    assert not (tmp_path / "dst" / "tests" / "data.txt").exists()


def test_a_manifest_cannot_point_outside_its_folder_or_at_a_changed_task(
    tmp_path: Path, generated: Path
) -> None:
    out = tmp_path / "out"
    m = split_dataset(generated, 0.2, out)
    outside = write_task(tmp_path / "elsewhere", "planted", 77)
    hostile = m.model_copy(update={"tasks": [*m.tasks[:1], m.tasks[1].model_copy(
        update={"path": "../elsewhere/planted"})]})  # fmt: skip
    (out / MANIFEST_NAME).write_text(hostile.model_dump_json())
    checks = check_tasks([out / MANIFEST_NAME])
    assert [c.valid for c in checks] == [False]
    assert "leaves the dataset folder" in str(checks[0].problems[0]) and outside.exists()
    # a task edited after the split is refused where its digest was recorded
    (out / MANIFEST_NAME).write_text(m.model_dump_json())
    first = out / m.tasks[0].path
    (first / "instruction.md").write_text("Something else entirely.\n")
    bad = [c for c in check_tasks([out / MANIFEST_NAME]) if not c.valid]
    assert [c.name for c in bad] == [m.tasks[0].name]
    assert "changed since crucible-dataset.json recorded it" in str(bad[0].problems[-1])


def test_force_replaces_only_a_dataset_folder(tmp_path: Path, generated: Path) -> None:
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("x")
    with pytest.raises(CurateError, match="exists"):
        split_dataset(generated, 0.2, precious)
    with pytest.raises(CurateError, match="not a dataset folder"):
        split_dataset(generated, 0.2, precious, force=True)
    assert (precious / "keep.txt").read_text() == "x"
    split_dataset(generated, 0.2, tmp_path / "o")
    split_dataset(generated, 0.2, tmp_path / "o", seed=1, force=True)
    assert json.loads((tmp_path / "o" / MANIFEST_NAME).read_text())["seed"] == 1
