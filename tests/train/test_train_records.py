"""Training runs as records and as runs: the run folder the handle writes (steps, samples
capped per step, checkpoints, log lines in job.log's format), its index row with kind
"train" beside a job's, the migration of an index made before kinds, and what `runs
list|get|trace` make of them (no trainer here: a RunHandle written directly)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from tests.helpers.train_runs import fill, make_run
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.records.train import SampleRecord, StepMetrics
from crucible.store.index import Index
from crucible.store.queries import JobsDir
from crucible.store.train_runs import read_metrics, read_samples


def cli(*args: object) -> dict:
    res = CliRunner().invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, (args, res.stdout, res.stderr)
    return json.loads(res.stdout)


def test_handle_writes_steps_samples_checkpoints_and_the_index_row(tmp_path: Path) -> None:
    h = make_run(tmp_path)
    fill(h)
    metrics, bad = read_metrics(h.folder)
    assert [m.reward_mean for m in metrics] == [0.25, 0.75] and bad == 0
    samples, _ = read_samples(h.folder)
    assert [(s.step, s.index) for s in samples] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    run = json.loads((h.folder / "run.json").read_text())
    assert run["state"] == "completed" and run["step"] == 2
    assert run["checkpoints"][0]["path"] == "checkpoints/checkpoint-2"
    with JobsDir.open(tmp_path) as jd:
        rec = jd.resolve(h.id)
    assert (rec.kind, rec.status, rec.agent, rec.n_trials) == ("train", "completed", "trl-grpo", 2)
    log = (h.folder / "job.log").read_text().splitlines()
    assert log[0].split(" ", 2)[1] == "INFO" and log[-1].endswith("finished: completed")


def test_a_bad_metrics_line_is_left_out_and_counted(tmp_path: Path) -> None:
    h = make_run(tmp_path)
    fill(h)
    with (h.folder / "metrics.jsonl").open("a") as f:
        f.write('{"step": "half a line\n')
    metrics, bad = read_metrics(h.folder)
    assert len(metrics) == 2 and bad == 1


def test_an_index_made_before_kinds_gains_the_column(tmp_path: Path) -> None:
    old = sqlite3.connect(tmp_path / "index.sqlite")
    old.executescript(
        "CREATE TABLE jobs (job_id TEXT PRIMARY KEY, name TEXT NOT NULL, status TEXT NOT NULL,"
        " agent TEXT NOT NULL, model TEXT, env TEXT NOT NULL, dataset TEXT NOT NULL,"
        " n_trials INTEGER NOT NULL, path TEXT NOT NULL, pid INTEGER, created_at TEXT NOT NULL,"
        " updated_at TEXT NOT NULL);"
        "INSERT INTO jobs VALUES ('old-job', 'old', 'completed', 'oracle', NULL, 'local', 'x', 1,"
        " '/nowhere', NULL, '2026-01-01T00:00:00+00:00', '2026-01-01T00:00:00+00:00');"
    )
    old.commit()
    old.close()
    Index(tmp_path).close()  # a writer opens it: the columns added since are added
    make_run(tmp_path)
    with JobsDir.open(tmp_path) as jd:
        kinds = {r.job_id: r.kind for r in jd.records().values()}
    assert kinds.pop("old-job") == "job" and list(kinds.values()) == ["train"]
    with pytest.raises(ValueError, match="run kind"):
        Index(tmp_path).upsert_run("x", kind="bogus", name="x", status="running", agent="a",
                                   model=None, env="local", dataset="d", n_trials=0,
                                   path=tmp_path, pid=None, created_at=make_run(tmp_path).record.created_at)  # fmt: skip


def test_runs_list_get_trace_show_a_training_run(tmp_path: Path) -> None:
    h = make_run(tmp_path)
    fill(h)
    listed = cli("runs", "list", "--jobs-dir", tmp_path, "--json")["jobs"]
    assert [(r["job_id"], r["kind"], r["step"], r["mean_reward"]) for r in listed] == [
        (h.id, "train", 2, 0.75)
    ]
    assert cli("runs", "list", "--jobs-dir", tmp_path, "--kind", "job", "--json")["jobs"] == []
    got = cli("runs", "get", h.id, "--jobs-dir", tmp_path, "--verbose", "--json")
    assert [(p["step"], p["reward_mean"], p["components"]) for p in got["reward_per_step"]] == [
        (1, 0.25, {"rhyme": 0.25}), (2, 0.75, {"rhyme": 0.75})
    ]  # fmt: skip
    assert got["checkpoints"][0]["step"] == 2 and got["n_samples"] == 4
    assert cli("runs", "get", h.id, "--jobs-dir", tmp_path, "--json")["reward_per_step"] is None
    out = tmp_path / "trace"
    dry = cli("runs", "trace", h.id, "--out", out, "--dry-run", "--jobs-dir", tmp_path, "--json")
    assert dry["n_samples"] == 4 and dry["n_steps"] == 2 and not out.exists()
    wrote = cli("runs", "trace", h.id, "--out", out, "--yes", "--jobs-dir", tmp_path, "--json")
    lines = (out / wrote["files"][0]["path"]).read_text().splitlines()
    assert [json.loads(x)["response"] for x in lines] == ["r0", "r1"]


def test_trace_replaces_a_link_planted_in_out_instead_of_writing_through_it(
    tmp_path: Path,
) -> None:
    # Attack: OUT/steps is a link to a folder elsewhere; `--yes` must not write there.
    h = make_run(tmp_path)
    fill(h)
    out, victim = tmp_path / "trace", tmp_path / "victim"
    out.mkdir()
    victim.mkdir()
    (out / "steps").symlink_to(victim)
    cli("runs", "trace", h.id, "--out", out, "--yes", "--jobs-dir", tmp_path, "--json")
    assert list(victim.iterdir()) == []
    assert (out / "steps").is_dir() and not (out / "steps").is_symlink()


def test_a_run_whose_process_died_reads_as_failed_with_a_relaunch_hint(tmp_path: Path) -> None:
    h = make_run(tmp_path)
    h.start(2)
    h.record.pid = 2**22 + 12345  # no such process
    h.save()
    got = cli("runs", "get", h.id, "--jobs-dir", tmp_path, "--json")
    assert got["status"] == "failed" and got["interrupted"] and "train launch" in got["hint"]
    res = CliRunner().invoke(app, ["runs", "cancel", h.id, "--jobs-dir", str(tmp_path), "--json"])
    assert res.exit_code == 1


def test_escapes_in_model_output_and_errors_never_reach_the_terminal(tmp_path: Path) -> None:
    # Attack: a sampled response, a component name and the run's error carry terminal
    # controls (clear screen, set the title, BEL, C1 CSI); no command prints them raw.
    evil = "\x1b[2J\x1b]0;owned\x07\x9b2J"
    h = make_run(tmp_path)
    h.start(1)
    h.add_step(StepMetrics(step=1, reward_mean=0.5, components={f"c{evil}": 0.5}, n_samples=1))
    h.add_samples([SampleRecord(step=1, index=0, prompt=f"p{evil}", response=f"r{evil}")])
    h.log(f"line {evil}")
    h.finish("failed", f"boom {evil}")
    for args in (["runs", "get", h.id, "-v"], ["runs", "logs", h.id], ["runs", "list"],
                 ["report", h.id]):  # fmt: skip
        res = CliRunner().invoke(app, [*args, "--jobs-dir", str(tmp_path)])
        assert res.exit_code == 0, (args, res.stdout, res.stderr)
        shown = res.stdout + res.stderr
        assert not any(c in shown for c in "\x1b\x07\x9b"), (args, shown)
