"""The verifier object: `Pipeline.for_task` checks [metadata.crucible] once, at launch;
stage traits live on the stage classes; kinds come from lazy built-in paths and from
the `crucible.stages` entry-point group of an installed package (a real .dist-info on
sys.path here, and a real `crucible run` on local sandboxes)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.verifiers.test_stages import make_task as stages_task
from typer.testing import CliRunner

import crucible.verifiers.pipeline as pipeline_mod
from crucible.cli.main import app
from crucible.engine.launch import LaunchRefused, prepare_launch
from crucible.engine.request import RunRequest
from crucible.errors import ModelFailed, TaskInvalid, VerifierFailed
from crucible.records.verifier import VerifierResult
from crucible.store.layout import iter_trial_results
from crucible.store.logs import FileLog
from crucible.tasks.loader import load_task
from crucible.tasks.problems import Problem
from crucible.verifiers.pipeline import Pipeline
from crucible.verifiers.registry import stage_class, stage_kinds
from crucible.verifiers.stages.base import Stage
from crucible.verifiers.submission import Submission

EXAMPLE = Path(__file__).resolve().parent / "tasks" / "modal-squares"
SRC = Path(__file__).resolve().parents[2] / "src"
runner = CliRunner()

CONTRACTS = '[[metadata.crucible.stages]]\nkind = "contracts"\nrequire = ["function", "gpu"]\n'
JUDGE = '[[metadata.crucible.stages]]\nkind = "judge"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n'
MARKER = '[[metadata.crucible.stages]]\nkind = "marker"\nneedle = "square.map"\n'


def make_task(root: Path, stages: str) -> Path:
    """The example task with these stages, its submission main.py under the workdir."""
    return stages_task(root, stages, submission='["main.py"]').path


# -- the object ----------------------------------------------------------------------


def test_for_task_gives_what_grading_needs(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path / "t", "reward_range = [0, 10]\n" + JUDGE + CONTRACTS))
    p = Pipeline.for_task(task)
    assert p.has_stages and p.reward_range == (0.0, 10.0)
    assert p.submission_paths == ["/app/main.py"]  # relative to the workdir
    # veto stages run last, whatever the order they were declared in
    assert [(s.kind, s.role) for s in p.stages] == [("contracts", "gate"), ("judge", "veto")]
    assert p.required_contracts == ["function", "gpu"]
    bare = load_task(make_task(tmp_path / "bare", ""))
    assert not Pipeline.for_task(bare).has_stages
    assert Pipeline.for_task(bare).reward_range == (0.0, 1.0)


def test_traits_are_attributes_of_the_stage_classes() -> None:
    judge, contracts, io = stage_class("judge"), stage_class("contracts"), stage_class("io")
    assert (judge.costly, judge.crash_kind, judge.default_role) == (True, ModelFailed, "veto")
    assert (contracts.costly, contracts.crash_kind, contracts.default_role) == (
        False,
        VerifierFailed,
        "gate",
    )
    assert (io.costly, io.crash_kind, io.default_role) == (False, VerifierFailed, "score")
    assert {"contracts", "io", "judge"} <= set(stage_kinds())


async def test_the_table_is_checked_once_not_at_each_grading_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = load_task(make_task(tmp_path / "t", CONTRACTS))
    looked_up: list[str] = []
    real = pipeline_mod.stage_class

    def spy(kind: str) -> type[Stage]:
        looked_up.append(kind)
        return real(kind)

    monkeypatch.setattr(pipeline_mod, "stage_class", spy)
    p = Pipeline.for_task(task)
    assert looked_up == ["contracts"]
    sub_file = tmp_path / "main.py"
    sub_file.write_text((EXAMPLE / "solution" / "main.py").read_text())

    async def fetch(paths: list[str]) -> Submission:
        assert paths == p.submission_paths
        return Submission(files={"/app/main.py": sub_file})

    v = VerifierResult(rewards={"reward": 1.0}, exit_code=0)
    log = FileLog(tmp_path / "trial.log")
    try:
        assert p.has_stages and p.submission_paths and p.reward_range
        await p.run(v, fetch, log)
    finally:
        log.close()
    assert v.rewards == {"reward": 1.0, "contracts.present": 1.0}
    assert looked_up == ["contracts"]  # grading read nothing of the table again


def test_no_stage_module_is_imported_until_a_task_names_its_kind(tmp_path: Path) -> None:
    task = make_task(tmp_path / "t", CONTRACTS)
    probe = textwrap.dedent(f"""
        import sys
        from crucible.tasks.loader import load_task
        from crucible.verifiers.pipeline import Pipeline
        def stages():
            return sorted(m.rsplit(".", 1)[1] for m in sys.modules
                          if m.startswith("crucible.verifiers.stages."))
        before = stages()
        Pipeline.for_task(load_task({str(task)!r}))
        print(before, stages())
    """)
    out = subprocess.run(
        [sys.executable, "-c", probe], env={"PYTHONPATH": str(SRC)}, capture_output=True,
        text=True, check=True,
    ).stdout.split("] [")  # fmt: skip
    assert out[0] == "['base', 'script'"
    assert "'contracts'" in out[1] and "judge" not in out[1] and "'io'" not in out[1]


# -- invalid tables fail at launch ------------------------------------------------------


@pytest.mark.parametrize(
    ("stages", "says"),
    [
        ('[[metadata.crucible.stages]]\nkind = "lint"\n', "unknown kind 'lint'"),
        ('[[metadata.crucible.stages]]\nkind = "script"\n', "kind 'script'"),
        ('[[metadata.crucible.stages]]\nkind = "judge"\n', "model"),
    ],
)
def test_a_bad_table_is_task_invalid(tmp_path: Path, stages: str, says: str) -> None:
    with pytest.raises(TaskInvalid, match=says) as bad:
        Pipeline.for_task(load_task(make_task(tmp_path / "t", stages)))
    if "lint" in says:  # the known kinds are named
        assert bad.value.hint is not None and "contracts, io, judge" in bad.value.hint


async def test_a_bad_table_refuses_the_launch_before_a_sandbox(tmp_path: Path) -> None:
    task = make_task(tmp_path / "tasks" / "t", '[[metadata.crucible.stages]]\nkind = "lint"\n')
    seen: list[tuple[Path, list[Problem]]] = []
    req = RunRequest(paths=[task], env="local", agent="oracle", jobs_dir=tmp_path / "jobs")
    with pytest.raises(LaunchRefused) as refused:
        await prepare_launch(req, on_invalid=lambda path, p: seen.append((path, p)))
    assert refused.value.error == "task_invalid"
    ((path, (problem,)),) = seen
    assert path == task and "unknown kind 'lint'" in problem.message
    assert "kinds: answer, contracts, io, judge, swebench" in problem.message
    assert not (tmp_path / "jobs").exists()  # nothing created: no job, no trial, no sandbox
    checked = runner.invoke(app, ["tasks", "check", str(task), "--json"])
    assert checked.exit_code == 1, checked.output
    (entry,) = json.loads(checked.stdout)["tasks"]
    assert any("unknown kind 'lint'" in p["message"] for p in entry["problems"]), entry


# -- a stage kind from a lab's own package (entry point) -----------------------------------

LAB_STAGE = '''
from typing import ClassVar

from crucible.records.verifier import StageResult, StageRole
from crucible.verifiers.stages.base import Stage, StageContext, StageSpec


class MarkerSpec(StageSpec):
    kind: str = "marker"
    needle: str


class MarkerStage(Stage):
    """A gate: the submission must contain `needle`."""

    kind: ClassVar[str] = "marker"
    spec_type: ClassVar[type[StageSpec]] = MarkerSpec
    default_role: ClassVar[StageRole] = "gate"
    roles: ClassVar[tuple[StageRole, ...]] = ("gate", "score")

    async def run(self, ctx: StageContext) -> StageResult:
        found = any(self.spec.needle in t for t in ctx.submission.texts().values())
        return self.result(status=self.status(found), components={"found": float(found)},
                           reason=f"{self.spec.needle!r} {'found' if found else 'absent'}")
'''


@pytest.fixture
def lab_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An installed package `lab_stages` whose dist-info registers kind "marker"."""
    site = tmp_path / "site"
    (site / "lab_stages").mkdir(parents=True)
    (site / "lab_stages" / "__init__.py").write_text(LAB_STAGE)
    info = site / "lab_stages-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lab-stages\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[crucible.stages]\nmarker = lab_stages:MarkerStage\nbroken = lab_stages:Nothing\n"
    )
    monkeypatch.syspath_prepend(str(site))
    yield site
    sys.modules.pop("lab_stages", None)


def run_job(task: Path, jobs: Path, name: str) -> dict[str, Any]:
    result = runner.invoke(app, ["run", str(task), "--agent", "oracle", "--env", "local",
                                 "--jobs-dir", str(jobs), "--job-name", name, "--max-retries", "0",
                                 "--json", "--quiet"])  # fmt: skip
    assert result.exit_code == 0, result.output
    (only,) = iter_trial_results(jobs / name)
    assert only.verifier_result is not None
    return only.verifier_result.model_dump(mode="json")


def test_a_stage_kind_from_an_entry_point_grades_a_real_trial(
    lab_package: Path, tmp_path: Path
) -> None:
    assert "marker" in stage_kinds() and "lab_stages" not in sys.modules  # not imported yet
    task = make_task(tmp_path / "tasks" / "modal-squares", MARKER)
    v = run_job(task, tmp_path / "jobs", "found")
    assert v["rewards"] == {"reward": 1.0, "marker.found": 1.0}
    assert [(s["kind"], s["status"]) for s in v["stages"]] == [
        ("script", "passed"),
        ("marker", "passed"),
    ]
    # The same gate on a program without the needle zeroes the test script's 1.
    solution = task / "solution" / "main.py"
    solution.write_text(solution.read_text().replace("square.map(range(10))", "[0]"))
    v = run_job(task, tmp_path / "jobs", "absent")
    assert v["rewards"] == {"reward": 0.0, "marker.found": 0.0}
    assert v["script_rewards"] == {"reward": 1.0}


def test_entry_point_kinds_are_named_and_a_broken_one_says_why(
    lab_package: Path, tmp_path: Path
) -> None:
    with pytest.raises(TaskInvalid) as unknown:
        Pipeline.for_task(load_task(make_task(tmp_path / "a", MARKER.replace("marker", "mark"))))
    assert unknown.value.hint == "kinds: answer, broken, contracts, io, judge, marker, swebench"
    broken = make_task(tmp_path / "b", '[[metadata.crucible.stages]]\nkind = "broken"\n')
    with pytest.raises(TaskInvalid, match=r"lab_stages:Nothing.*could not be loaded"):
        Pipeline.for_task(load_task(broken))


def test_an_entry_point_cannot_take_over_a_built_in_kind(lab_package: Path, tmp_path: Path) -> None:
    info = lab_package / "lab_stages-0.1.dist-info" / "entry_points.txt"
    info.write_text("[crucible.stages]\njudge = lab_stages:MarkerStage\n")
    assert stage_class("judge").__module__ == "crucible.verifiers.stages.judge"
