"""End to end: a tiny SWE-bench-format instance (a real git repository with a bug, its
gold and test patches, FAIL_TO_PASS and PASS_TO_PASS), a locally built image standing in
for its evaluation image, adapted by `crucible adapt swebench` and run on local
(image-backed) and docker: the oracle gets 1, nop 0, and a patch that fixes the bug but
breaks a PASS_TO_PASS test 0, all graded on the host by the official rule."""

from __future__ import annotations

import asyncio
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers.rootfs import private_rootfs_dir
from tests.helpers.swebench_instance import (
    INSTANCE_ID,
    build_buildah,
    build_docker,
    image_context,
    make_instance,
)

from crucible.adapt.base import write_tasks
from crucible.adapt.swebench import SwebenchAdapter, SwebenchOptions
from crucible.agents.nop import NopAgent
from crucible.agents.oracle import OracleAgent
from crucible.agents.submission import SubmissionAgent
from crucible.engine.spec import TrialPlan
from crucible.engine.trial import run_trial
from crucible.records.submission import PatchSubmission
from crucible.records.trial import TrialResult
from crucible.tasks.loader import load_task
from crucible.tasks.models import Task

pytestmark = pytest.mark.slow


async def _trial(env: str, task: Task, tmp_path: Path, agent: object) -> TrialResult:
    """One trial on the provider `env` with its default userland: the task's image."""
    if env == "docker":
        from crucible.sandboxes.docker.provider import DockerProvider

        provider: object = DockerProvider()
    else:
        from crucible.sandboxes.local.provider import LocalProvider

        provider = LocalProvider()
    job_id = f"sweb-{secrets.token_hex(4)}"
    await provider.preflight()  # type: ignore[attr-defined]
    try:
        return await run_trial(
            TrialPlan(task=task, attempt=0, job_id=job_id),
            provider=provider,  # type: ignore[arg-type]
            agent=agent,  # type: ignore[arg-type]
            job_dir=tmp_path / "job",
        )
    finally:
        await provider.cleanup(job_id)  # type: ignore[attr-defined]
        await provider.aclose()  # type: ignore[attr-defined]


@pytest.fixture
def adapted(
    request: pytest.FixtureRequest, provider_env: str, tmp_path: Path
) -> Iterator[tuple[str, Path, str]]:
    """(env, the adapted task, the break patch): the stand-in image built for `env`
    under a tag of this test's own, removed afterwards."""
    if provider_env == "local":
        request.getfixturevalue("buildah")
    inst = make_instance(tmp_path / "src")
    tag = f"localhost/crucible-test-sweb:{secrets.token_hex(6)}"
    ctx = image_context(inst, tmp_path / "ctx")
    build = build_buildah if provider_env == "local" else build_docker
    build(ctx, tag)
    adapter = SwebenchAdapter(SwebenchOptions(image_template=tag, verifier_timeout_sec=120.0))
    src = inst.jsonl(tmp_path / "instances.jsonl")
    report = write_tasks(
        adapter, str(src), tmp_path / "tasks", [adapter.task(r) for r in adapter.rows(str(src))]
    )
    assert [t.valid for t in report.tasks] == [True], report.tasks
    try:
        if provider_env == "local":
            with private_rootfs_dir("crucible-sweb"):
                yield provider_env, tmp_path / "tasks" / INSTANCE_ID, inst.break_patch
        else:
            yield provider_env, tmp_path / "tasks" / INSTANCE_ID, inst.break_patch
    finally:
        tool = (
            ["buildah", "rmi", "-f", tag]
            if provider_env == "local"
            else ["docker", "rmi", "-f", tag]
        )
        subprocess.run(tool, capture_output=True)


def test_oracle_nop_and_a_patch_breaking_pass_to_pass(
    adapted: tuple[str, Path, str], tmp_path: Path
) -> None:
    env, folder, broken = adapted
    task = load_task(folder)

    def trial(agent, name: str):  # type: ignore[no-untyped-def]
        (tmp_path / name).mkdir()
        return asyncio.run(_trial(env, task, tmp_path / name, agent))

    oracle = trial(OracleAgent(), "oracle")
    assert oracle.error is None, oracle.error
    assert oracle.verifier_result.rewards == {
        "reward": 1.0,
        "swebench.resolved": 1.0,
        "swebench.fail_to_pass": 1.0,
        "swebench.pass_to_pass": 1.0,
    }
    nop = trial(NopAgent(), "nop")
    assert nop.error is None and nop.verifier_result.rewards["reward"] == 0.0
    assert nop.verifier_result.rewards["swebench.fail_to_pass"] == 0.0
    bad = trial(SubmissionAgent(PatchSubmission(patch=broken)), "break")
    assert bad.error is None and bad.agent_result.error is None, bad.agent_result
    rewards = bad.verifier_result.rewards
    assert rewards["reward"] == 0.0 and rewards["swebench.fail_to_pass"] == 1.0
    assert rewards["swebench.pass_to_pass"] == 0.5
    stage = next(s for s in bad.verifier_result.stages if s.kind == "swebench")
    assert "tests/test_calc.py::test_neg" in stage.reason
