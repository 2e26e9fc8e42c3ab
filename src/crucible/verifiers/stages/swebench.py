"""The swebench stage: grades a SWE-bench instance (a task `crucible adapt swebench`
wrote) from the tests' log, on the host, with the official harness's parser and
resolution rule (the `swebench` package, 4.x: `get_eval_report`), so grading needs no
network and no `swebench` inside the image.

The log is test.sh's stdout as the host captured it from the grading exec, never a
file the sandbox wrote. The code under test is the agent's and prints into the same
stream, so the part of it that is parsed is framed by a nonce test.sh draws from the
kernel when it starts (before any of the agent's code runs) and keeps in an unexported
shell variable: the first line is `@@crucible-swebench <nonce>`, the official
`>>>>> Start Test Output` / `>>>>> End Test Output` markers of the eval script are
written with the nonce after them, and only what lies between those two lines goes to
the official parser. Lines planted in the repository (a commit message, a file that
`git diff` prints, output of the agent's code with the bare markers) never widen or move
that frame.

Blame, as DESIGN's rule has it. Everything the log can show happened in the agent's
live sandbox after its phase, so it is the attempt's: a frame that is missing or cut
(the tests were killed, the output was flooded past the exec's cap), a test patch that
did not apply (the tests then fail), and the harness's own markers (APPLY_PATCH_FAIL,
RESET_FAILED, TESTS_ERROR, TESTS_TIMEOUT), which no harness writes here, so inside the
frame only the agent's code can have printed them: the official rule then finds no
results, a 0. The harness's infrastructure failures have crucible's own counterparts,
raised before this stage runs (an exec that fails is sandbox_failed, a timeout
verifier_failed). What the agent cannot cause is what the host lacks: no `swebench`
package, or one without the instance's repository and version (spec or parser) is
TaskInvalid, a trial left out of the mean, never a 0.

Gate by default: the rollout's reward (test.sh writes 1 once the eval ran) counts only
when the instance is resolved (every FAIL_TO_PASS test passes, no PASS_TO_PASS test
breaks). Components: `resolved`, `fail_to_pass` and `pass_to_pass` (the shares passing).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, ClassVar

from crucible.errors import TaskInvalid, VerifierFailed
from crucible.records.verifier import StageResult, StageRole
from crucible.tasks.models import Task
from crucible.verifiers.stages.base import Stage, StageContext, StageSpec

INSTANCE_FILE = "swebench-instance.json"  # under the task's tests/, written by the adapter
BEGIN_TAG = "@@crucible-swebench"
START = ">>>>> Start Test Output"  # swebench.harness.constants.START_TEST_OUTPUT
END = ">>>>> End Test Output"  # swebench.harness.constants.END_TEST_OUTPUT
NONCE = re.compile(r"[0-9a-f]{32}")
MAX_INSTANCE_BYTES = 16 << 20


class SwebenchSpec(StageSpec):
    kind: str = "swebench"
    role: StageRole = "gate"


def harness() -> Any:
    """The official harness's grading module; TaskInvalid when it is not installed."""
    try:
        from swebench.harness import grading
    except ImportError as exc:
        raise TaskInvalid(
            "the swebench stage needs the official swebench package (4.x) on the host",
            hint="pip install 'crucible[adapt]'",
        ) from exc
    return grading


def read_instance(tests_dir: Path) -> dict[str, Any]:
    """The instance the adapter wrote beside the tests (a task file: read without
    following a link, within a cap); TaskInvalid when it is absent or unreadable."""
    path = tests_dir / INSTANCE_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            data = f.read(MAX_INSTANCE_BYTES + 1)
        if len(data) > MAX_INSTANCE_BYTES:
            raise ValueError(f"larger than {MAX_INSTANCE_BYTES} bytes")
        instance = json.loads(data)
        if not isinstance(instance, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        raise TaskInvalid(f"tests/{INSTANCE_FILE}: {type(exc).__name__}: {exc}"[:500]) from exc
    return instance


def test_spec(instance: dict[str, Any], namespace: str | None = None) -> Any:
    """The official TestSpec of `instance` as grading needs it: its eval script
    (swebench's make_eval_script_list, as make_test_spec calls it), test lists and image
    key. The environment and repository set-up lists stay empty: make_test_spec fetches
    the requirements of some repositories over the network to write them, and grading
    never runs them. TaskInvalid when the host's swebench does not know the instance's
    repository and version."""
    harness()
    from swebench.harness.constants import MAP_REPO_TO_EXT, MAP_REPO_VERSION_TO_SPECS
    from swebench.harness.log_parsers import MAP_REPO_TO_PARSER
    from swebench.harness.test_spec.create_scripts import make_eval_script_list
    from swebench.harness.test_spec.test_spec import TestSpec

    repo, version = instance.get("repo"), instance.get("version")
    if repo not in MAP_REPO_TO_PARSER or version not in MAP_REPO_VERSION_TO_SPECS.get(repo, {}):
        raise TaskInvalid(
            f"the installed swebench has no spec or log parser for {repo!r} version {version!r}",
            hint="adapt and grade with the same swebench 4.x",
        )
    specs = MAP_REPO_VERSION_TO_SPECS[repo][version]
    try:
        evals = make_eval_script_list(
            instance, specs, "testbed", "/testbed", instance["base_commit"], instance["test_patch"]
        )
        return TestSpec(
            instance_id=instance["instance_id"],
            repo=repo,
            version=version,
            repo_script_list=[],
            eval_script_list=evals,
            env_script_list=[],
            arch="x86_64",
            FAIL_TO_PASS=list(instance.get("FAIL_TO_PASS") or []),
            PASS_TO_PASS=list(instance.get("PASS_TO_PASS") or []),
            language=MAP_REPO_TO_EXT[repo],
            docker_specs=specs.get("docker_specs", {}),
            namespace=namespace,
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise TaskInvalid(f"swebench instance: {type(exc).__name__}: {exc}"[:500]) from exc


def framed(output: str, cut: bool) -> str:
    """What lies between the nonce-stamped start and end markers of `output`;
    VerifierFailed (the attempt's: see the module's note) when there is no such frame."""
    first, _, rest = output.partition("\n")
    tag, _, nonce = first.partition(" ")
    if tag != BEGIN_TAG or not NONCE.fullmatch(nonce):
        raise VerifierFailed("the swebench eval did not start: its log has no nonce line first")
    lines = rest.split("\n")
    start, end = f"{START} {nonce}", f"{END} {nonce}"
    try:
        i = lines.index(start)
    except ValueError:
        raise VerifierFailed("the swebench eval never reached the test command") from None
    try:
        j = lines.index(end, i + 1)
    except ValueError:
        why = " (output cut at the exec's cap)" if cut else ""
        raise VerifierFailed(f"the test command's output did not end{why}") from None
    return "\n".join(lines[i + 1 : j])


def grade(instance: dict[str, Any], section: str) -> tuple[bool, dict[str, Any]]:
    """(resolved, report) by the official rule, on the framed section alone."""
    grading = harness()
    spec = test_spec(instance)
    iid = spec.instance_id
    with tempfile.TemporaryDirectory(prefix="crucible-swebench-") as tmp:
        log = Path(tmp) / "test_output.txt"
        log.write_text(f"{START}\n{section}\n{END}\n")
        prediction = {"instance_id": iid, "model_patch": "(applied in the sandbox)"}
        report = grading.get_eval_report(spec, prediction, str(log), include_tests_status=True)
    entry = report[iid]
    return bool(entry["resolved"]), entry


def shares(entry: dict[str, Any]) -> tuple[float, float]:
    """The FAIL_TO_PASS and PASS_TO_PASS shares passing (0 when nothing was parsed)."""
    status = entry.get("tests_status")
    if not status:
        return 0.0, 0.0
    grading = harness()
    return float(grading.compute_fail_to_pass(status)), float(grading.compute_pass_to_pass(status))


class SwebenchStage(Stage):
    kind: ClassVar[str] = "swebench"
    default_role: ClassVar[StageRole] = "gate"
    roles: ClassVar[tuple[StageRole, ...]] = ("gate", "score")
    spec_type: ClassVar[type[StageSpec]] = SwebenchSpec

    def task_problems(self, task: Task) -> list[str]:
        """The instance file is there and the host's swebench knows its repository and
        version (else every trial of the task would end task_invalid)."""
        try:
            test_spec(read_instance(task.tests_dir))
        except TaskInvalid as exc:
            return [f"{exc.message} ({exc.hint})" if exc.hint else exc.message]
        return []

    async def run(self, ctx: StageContext) -> StageResult:
        instance = read_instance(ctx.task.tests_dir)
        test_spec(instance)  # the host's swebench knows it, before the log is judged
        section = framed(ctx.test_output, ctx.test_output_cut)
        resolved, entry = grade(instance, section)
        f2p, p2p = shares(entry)
        status = entry.get("tests_status") or {}
        failing = {
            k: status.get(k, {}).get("failure", [])[:50] for k in ("FAIL_TO_PASS", "PASS_TO_PASS")
        }
        reason = (
            "resolved: every FAIL_TO_PASS test passes, no PASS_TO_PASS test broke"
            if resolved
            else "not resolved"
            + ("" if entry.get("patch_successfully_applied") else ": no test results in the log")
            + "".join(f"; {k} failing: {', '.join(v[:5])}" for k, v in failing.items() if v)
        )
        return self.result(
            status=self.status(resolved),
            verdict="pass" if resolved else "fail",
            components={"resolved": float(resolved), "fail_to_pass": f2p, "pass_to_pass": p2p},
            reason=reason[:2000],
            details={"instance_id": instance.get("instance_id"), "failing": failing},
        )
