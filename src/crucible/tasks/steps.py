"""The files of a multi-step task: steps/NAME/ holds each step's instruction.md, tests/,
solution/ and workdir/ (setup.sh and the files staged before the step), as Harbor lays
them out. A step is graded with the task's tests/ and then its own copied over them
(Task.tests_dirs, as Harbor uploads both): a step without tests/test.sh runs the task's;
one whose verifier image carries its tests (a docker_image, or a Dockerfile beside them)
needs none."""

from __future__ import annotations

import os
from pathlib import Path

from crucible.tasks.models import StepSection, TaskConfig
from crucible.tasks.problems import Problem, TaskCheck
from crucible.tasks.sections import VerifierMode
from crucible.tasks.taskfs import read_task_text, task_entry

STEPS_DIR = "steps"
# What of a step is uploaded to the sandbox as a folder: never a link to one.
STEP_DIRS = ("tests", "solution", "workdir")


def refuse_links(task_dir: Path, rels: list[str], check: TaskCheck) -> bool:
    """A problem for each of `rels` (folders the host copies into a sandbox) that is a link,
    or has one on its way: a linked folder would be copied from wherever it points."""
    found: set[Path] = set()
    for rel in rels:
        if task_entry(task_dir, rel) == "link":
            path = task_dir / rel
            while not path.is_symlink():  # the link on the way (steps/a, not steps/a/tests)
                path = path.parent
            if path in found:
                continue
            found.add(path)
            check.problems.append(
                Problem(
                    path=path,
                    message=f"is a symbolic link (to {os.readlink(path)!r}): task folders "
                    "are copied and read without following links",
                )
            )
    return bool(found)


def check_steps(task_dir: Path, config: TaskConfig, check: TaskCheck) -> dict[str, str]:
    """Each step's instruction (name -> text); every missing file becomes a problem."""
    instructions: dict[str, str] = {}
    shared_test = task_dir / "tests" / "test.sh"
    for step in config.steps or []:
        step_dir = task_dir / STEPS_DIR / step.name
        rel = f"{STEPS_DIR}/{step.name}"
        if refuse_links(task_dir, [rel, *(f"{rel}/{d}" for d in STEP_DIRS)], check):
            continue
        if not step_dir.is_dir():
            check.problems.append(
                Problem(path=step_dir, message=f"step {step.name!r}: its directory is missing")
            )
            continue
        text = read_instruction(task_dir, f"{rel}/instruction.md", check, f"step {step.name!r}: ")
        if text is not None:
            instructions[step.name] = text
        tests = step_dir / "tests"
        if not (
            (tests / "test.sh").is_file()
            or shared_test.is_file()
            or _bundled_tests(config, step, tests)
        ):
            check.problems.append(
                Problem(
                    path=tests / "test.sh",
                    message=(
                        f"step {step.name!r}: neither steps/{step.name}/tests/test.sh "
                        "nor tests/test.sh: the verifier has nothing to run"
                    ),
                )
            )
        if not (step_dir / "solution" / "solve.sh").is_file():
            check.problems.append(
                Problem(
                    path=step_dir / "solution" / "solve.sh",
                    message=f"step {step.name!r}: solution/solve.sh is missing: "
                    "the oracle agent cannot run this step",
                    severity="warning",
                )
            )
    if (task_dir / "instruction.md").is_file():
        check.problems.append(
            Problem(
                path=task_dir / "instruction.md",
                message="a multi-step task uses steps/NAME/instruction.md; this one is unused",
                severity="warning",
            )
        )
    return instructions


def read_instruction(task_dir: Path, rel: str, check: TaskCheck, prefix: str = "") -> str | None:
    """The instruction's text, or None with the problem recorded (`prefix` names the step).
    Read without following a link (tasks/taskfs.py): it goes into the model's prompt."""
    text = read_task_text(task_dir, rel, check, missing="instruction.md is missing", prefix=prefix)
    if text is not None and not text.strip():
        check.problems.append(
            Problem(path=task_dir / rel, message=prefix + "instruction.md is empty")
        )
        return None
    return text


def _bundled_tests(config: TaskConfig, step: StepSection, tests: Path) -> bool:
    """A separate verifier built from its own image or Dockerfile brings its tests."""
    if config.step_verifier_mode(step) != VerifierMode.separate:
        return False
    for env, directory in (
        (step.verifier.environment, tests),
        (config.verifier.environment, tests.parents[2] / "tests"),
    ):
        if env is not None and env.docker_image:
            return True
        if (directory / "Dockerfile").is_file():
            return True
    return False
