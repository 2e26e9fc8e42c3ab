"""The example translation tasks (examples/translation) end to end: `crucible run` on local
sandboxes over all of them in one job, graded by their contracts and io gates through the
offline Modal runtime, with no Modal account.

- the oracle (each task's own Modal port) scores 1.0 on every task, every stage passed;
- nop (nothing submitted) scores 0 on every task;
- decorator-only ports (the Modal decorators present and statically reached, the work done
  in the entrypoint's process with `.local()`) score 0: their outputs match the original,
  and only the runtime's trace (require_evidence, per-case `inputs` counts) tells.

The web task (polars-lookup-web) needs the io stage's web mode; where the installed io
stage lacks it, that one task is left out of the jobs and its job-level test is skipped
with the reason (tests/examples/test_translation_web.py checks its pieces regardless).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest
from tests.verifiers.test_stages_job import runs_get_verbose
from typer.testing import CliRunner

import crucible.sandboxes.local.oneshot.run as oneshot
from crucible.cli.main import app
from crucible.contracts.reach import detect_reached_source
from crucible.sandboxes.local.cgroups import CgroupSupport
from crucible.store.layout import iter_trial_results
from crucible.tasks.loader import load_task
from crucible.verifiers.pipeline import declared
from crucible.verifiers.stages.base import StageContext
from crucible.verifiers.stages.io import IoSpec, IoStage
from crucible.verifiers.submission import Submission

ROOT = Path(__file__).resolve().parents[2] / "examples" / "translation"
WEB_TASK = "polars-lookup-web"
WEB_MODE = "mode" in IoSpec.model_fields
NO_WEB_MODE = "the io stage has no web mode yet (mode = 'web'): polars-lookup-web cannot load"
TASKS = sorted(p.name for p in ROOT.iterdir() if (p / "task.toml").is_file())
RUNNABLE = [t for t in TASKS if WEB_MODE or t != WEB_TASK]
runner = CliRunner()


def run_job(tasks: Path, jobs: Path, name: str, agent: str) -> dict[str, Any]:
    """One job over every task folder under `tasks`, two trials at a time."""
    result = runner.invoke(app, ["run", str(tasks), "--agent", agent, "--env", "local",
                                 "--jobs-dir", str(jobs), "--job-name", name, "--max-retries", "0",
                                 "--concurrency", "2", "--json", "--quiet"])  # fmt: skip
    assert result.exit_code == 0, result.output
    summary: dict[str, Any] = json.loads((jobs / name / "result.json").read_text())
    return summary


def copy_tasks(dst: Path, names: list[str]) -> Path:
    for name in names:
        shutil.copytree(ROOT / name, dst / name)
    return dst


def by_task(jobs: Path, name: str) -> dict[str, dict[str, Any]]:
    return {r.task_name: r.model_dump(mode="json") for r in iter_trial_results(jobs / name)}


@pytest.fixture(scope="module")
def oracle_job(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("oracle")
    # each task's test asserts its own trial, so that one failing task names itself
    with pytest.MonkeyPatch.context() as env:
        env.delenv("CRUCIBLE_JUDGE_BASE_URL", raising=False)  # the judge is skipped here
        run_job(copy_tasks(tmp / "tasks", RUNNABLE), tmp / "jobs", "oracle", "oracle")
    results = by_task(tmp / "jobs", "oracle")
    assert sorted(results) == RUNNABLE
    return results


def test_the_examples_check_clean() -> None:
    result = runner.invoke(app, ["tasks", "check", "--json", str(ROOT)])
    data = json.loads(result.output)
    invalid = {t["name"]: t["problems"] for t in data["tasks"] if not t["valid"]}
    assert data["summary"]["warnings"] == 0
    assert {t["name"] for t in data["tasks"]} == set(TASKS) and len(TASKS) >= 7
    if WEB_MODE:
        assert invalid == {} and result.exit_code == 0, result.output
    else:  # only the web task, and only for the keys the web mode brings
        (problem,) = invalid.pop(WEB_TASK)
        assert "mode: Extra inputs" in problem["message"] and invalid == {}


@pytest.mark.parametrize("task", TASKS)
def test_each_solution_uses_what_its_task_requires(task: str) -> None:
    # statically, with the reach rule, as the contracts gate reads it (the web task too)
    stages = tomllib.loads((ROOT / task / "task.toml").read_text())["metadata"]["crucible"]
    (gate,) = [s for s in stages["stages"] if s["kind"] == "contracts"]
    main = ROOT / task / "solution" / "main.py"
    found = detect_reached_source(main.read_text(), str(main), gate["launch"],
                                  gate.get("entrypoint"))  # fmt: skip
    assert set(gate["require"]) <= set(found.contracts) and found.legacy == [], found


@pytest.mark.parametrize("task", [t for t in TASKS if t != WEB_TASK])
def test_oracle_scores_one_on_every_stage(oracle_job: dict[str, dict[str, Any]], task: str) -> None:
    v = oracle_job[task]["verifier_result"]
    why = [s["reason"] for s in v["stages"]]
    assert v["rewards"] == {"reward": 1.0, "contracts.present": 1.0, "io.pass_rate": 1.0,
                            "io.all_pass": 1.0}, why  # fmt: skip
    assert [(s["kind"], s["status"]) for s in v["stages"]] == [
        ("script", "passed"),
        ("contracts", "passed"),
        ("io", "passed"),
        ("judge", "skipped"),  # no judge endpoint here (tests/examples/test_translation_judge.py)
    ]
    assert v["stages"][-1]["reason"] == "judge not configured: $CRUCIBLE_JUDGE_BASE_URL is unset"
    cases = json.loads((ROOT / task / "tests" / "cases.json").read_text())
    io = v["stages"][2]["details"]["cases"]
    # each fan-out got every input of its case, in containers
    assert [c["remote_inputs"] for c in io] == [
        {fn: n for fn, n in case["inputs"].items()} for case in cases
    ]


@pytest.mark.skipif(not WEB_MODE, reason=NO_WEB_MODE)
def test_oracle_scores_one_on_the_web_task(oracle_job: dict[str, dict[str, Any]]) -> None:
    v = oracle_job[WEB_TASK]["verifier_result"]
    why = [s["reason"] for s in v["stages"]]
    assert v["rewards"]["reward"] == 1.0 and v["rewards"]["io.all_pass"] == 1.0, why
    assert [s["status"] for s in v["stages"]] == ["passed", "passed", "passed", "skipped"]


def test_nop_scores_zero_everywhere(tmp_path: Path) -> None:
    summary = run_job(copy_tasks(tmp_path / "tasks", RUNNABLE), tmp_path / "jobs", "nop", "nop")
    assert summary["mean_reward"] == 0.0, summary
    results = by_task(tmp_path / "jobs", "nop")
    assert sorted(results) == RUNNABLE
    for task, r in results.items():
        v = r["verifier_result"]
        assert v["rewards"]["reward"] == 0.0, task
        assert v["script_rewards"] == {"reward": 0.0}, task  # nothing at /app/main.py


# Decorator-only ports: the same program with the remote work swapped for in-process calls.
# An empty fan-out stays so that the contracts gate (static, with the reach rule) sees the
# fan-out it requires: only the runtime's trace can tell these from the oracle.
DECORATOR_ONLY: dict[str, list[tuple[str, str]]] = {
    "svd-lowrank-gpu": [
        (
            'list(low_rank.map(matrices, kwargs={"rank": rank}))',
            'list(low_rank.map([], kwargs={"rank": rank}))'
            " + [low_rank.local(a, rank) for a in matrices]",
        )
    ],
    "wl-dedup-starmap": [
        (
            "wl_hash.starmap([(e, k, iterations) for e, k in graphs])",
            "[*wl_hash.starmap([]), *(wl_hash.local(e, k, iterations) for e, k in graphs)]",
        )
    ],
    # a partial fan-out: the first fold in a container, the rest in-process
    "sklearn-cv-map": [
        (
            "list(fold_score.map(range(folds), kwargs=params))",
            "list(fold_score.map(range(1), kwargs=params))"
            " + [fold_score.local(f, **params) for f in range(1, folds)]",
        )
    ],
    # the secret is attached, but the function runs in-process, its configuration inlined
    "secret-merge": [
        ("merge.remote(people, sales)", "merge.local(people, sales)"),
        (
            'key, salt = os.environ["JOIN_KEY"], os.environ["MERGE_SALT"]',
            'key, salt = "customer_id", "crucible-merge-2026"',
        ),
    ],
    # the training runs in-process: the checkpoints land in a plain folder, not the Volume
    "volume-checkpoint": [
        (
            "train.remote(run, stop_at, every, seed, fresh=True)",
            "train.local(run, stop_at, every, seed, fresh=True)",
        ),
        ("train.remote(run, steps, every, seed)", "train.local(run, steps, every, seed)"),
    ],
}
WHY = {
    "svd-lowrank-gpu": "did not exercise gpu, fan_out, image_build (runtime trace)",
    "wl-dedup-starmap": "did not exercise fan_out, image_build (runtime trace)",
    "sklearn-cv-map": "fold_score received 1 inputs in a container, expected 4",
    "secret-merge": "did not exercise function, secret (runtime trace)",
    # volume too: its commits ran in the entrypoint's process, never in a container with the
    # Volume (the trace is the dispatching side's: the program's own volume events count no more)
    "volume-checkpoint": "did not exercise function, volume, image_build (runtime trace)",
}
# what ran in containers, in every case
REMOTE = {
    "svd-lowrank-gpu": {"low_rank": 0},
    "wl-dedup-starmap": {"wl_hash": 0},
    "sklearn-cv-map": {"fold_score": 1},
    "secret-merge": {"merge": 0},
    "volume-checkpoint": {"train": 0},
}


def test_decorator_only_ports_are_zeroed_by_the_trace(tmp_path: Path) -> None:
    tasks = copy_tasks(tmp_path / "tasks", sorted(DECORATOR_ONLY))
    for name, edits in DECORATOR_ONLY.items():
        main = tasks / name / "solution" / "main.py"
        source = main.read_text()
        for old, new in edits:
            assert source.count(old) == 1, (name, old)
            source = source.replace(old, new)
        main.write_text(source)
    summary = run_job(tasks, tmp_path / "jobs", "deco", "oracle")
    assert summary["mean_reward"] == 0.0, summary
    results = by_task(tmp_path / "jobs", "deco")
    for name, why in WHY.items():
        v = results[name]["verifier_result"]
        script, contracts, io, judge = v["stages"]
        # statically it looks right: the test script and the contracts gate pass
        assert (script["status"], contracts["status"]) == ("passed", "passed"), name
        assert io["status"] == "failed" and v["rewards"]["reward"] == 0.0, name
        assert judge["status"] == "skipped" and judge["reason"].startswith("not run: "), name
        assert v["rewards"]["io.pass_rate"] == 0.0, name
        assert why in io["reason"], (name, io["reason"])
        # and the outputs did match: no case failed on a mismatch (a "$.path: ..." reason)
        assert not any(c["reason"].startswith("$") for c in io["details"]["cases"]), name
        assert all(c["remote_inputs"] == REMOTE[name] for c in io["details"]["cases"]), name
    assert WHY["svd-lowrank-gpu"] in runs_get_verbose(tmp_path / "jobs", "deco")


def test_the_volume_task_grades_without_cgroups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the io sandbox gets no cgroups (crucible not run as root), the submission's
    root is still writable for the Volume's link: a correct port passes, never a 0 that
    would be crucible's gap blamed on the attempt."""
    monkeypatch.setattr(oneshot, "detect", lambda: CgroupSupport("none", reason="test"))
    task = load_task(copy_tasks(tmp_path, ["volume-checkpoint"]) / "volume-checkpoint")
    io = next(s for s in declared(task)[1] if isinstance(s, IoStage))
    sub = Submission(files={"/app/main.py": task.path / "solution" / "main.py"})
    res = asyncio.run(io.run(StageContext(task, sub, {"reward": 1.0})))
    assert res.components == {"pass_rate": 1.0, "all_pass": 1.0}, res.reason
    assert all(c["evidence"]["volume"] for c in res.details["cases"])
