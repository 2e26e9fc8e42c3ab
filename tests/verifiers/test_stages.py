"""The stage interface and pipeline on real files and a real local sandbox: how a task
declares stages, what each role does to the reward, what a stage that cannot run
becomes, and how the submission is collected from a hostile sandbox."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tests.helpers.fake_openai import FakeOpenAI, text

from crucible.agents.base import Agent, AgentContext
from crucible.engine.spec import TrialPlan
from crucible.engine.trial import run_trial
from crucible.errors import ModelFailed, TaskInvalid, VerifierFailed
from crucible.records.trial import AgentResult
from crucible.records.verifier import StageResult, VerifierResult
from crucible.sandboxes.local.provider import LocalProvider
from crucible.store.logs import FileLog
from crucible.tasks.loader import load_task
from crucible.tasks.models import Task
from crucible.verifiers.pipeline import Pipeline, declared, final_rewards
from crucible.verifiers.stages.judge import PROMPT_SHA256, parse_verdict
from crucible.verifiers.submission import Submission, declared_paths

EXAMPLE = Path(__file__).resolve().parent / "tasks" / "modal-squares"
GOOD = (EXAMPLE / "solution" / "main.py").read_text()


def make_task(root: Path, stages: str, *, submission: str = '["/app/main.py"]') -> Task:
    shutil.copytree(EXAMPLE, root)
    toml = (root / "task.toml").read_text()
    head = toml.split("[metadata.crucible]")[0]
    tail = toml[toml.index("[agent]") :]
    (root / "task.toml").write_text(
        f"{head}[metadata.crucible]\nsubmission = {submission}\n\n{stages}\n{tail}"
    )
    return load_task(root)


CONTRACTS = '[[metadata.crucible.stages]]\nkind = "contracts"\nrequire = ["function", "gpu"]\n'


def judge_toml(url: str, role: str = "veto") -> str:
    return (f'[[metadata.crucible.stages]]\nkind = "judge"\nrole = "{role}"\nmodel = "gpt-4o-mini"\n'
            f'base_url = "{url}"\nmax_retries = 0\n')  # fmt: skip


def submitted(tmp: Path, program: str) -> Submission:
    path = tmp / "sub" / "main.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(program)
    return Submission(files={"/app/main.py": path})


async def pipeline(
    task: Task, sub: Submission, tmp: Path, reward: float = 1.0, v: VerifierResult | None = None
) -> VerifierResult:
    """Run the task's stages on `sub`; `v` (given) keeps the record when a stage raises."""

    async def fetch(paths: list[str]) -> Submission:
        assert paths == ["/app/main.py"]
        return sub

    v = v or VerifierResult(rewards={"reward": reward}, exit_code=0)
    log = FileLog(tmp / "trial.log")
    try:
        await Pipeline.for_task(task).run(v, fetch, log)
    finally:
        log.close()
    return v


# -- declaring stages -------------------------------------------------------------------


def test_declared_stages_take_their_default_roles(tmp_path: Path) -> None:
    task = make_task(tmp_path / "t", CONTRACTS + judge_toml("http://127.0.0.1:9/v1"))
    meta, stages = declared(task)
    assert meta.submission == ["/app/main.py"]
    assert [(s.name, s.kind, s.role) for s in stages] == [
        ("contracts", "contracts", "gate"),
        ("judge", "judge", "veto"),
    ]


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ('kind = "lint"\nrole = "gate"', "unknown kind 'lint'"),
        ('kind = "contracts"\nrequire = ["gpu", "warp_drive"]', "unknown contract ids"),
        ('kind = "contracts"\nrequire = ["legacy_stub"]', "legacy ids cannot be required"),
        ('kind = "contracts"\nrole = "judge"\nrequire = []', "role"),
        ('kind = "judge"\nrole = "veto"', "model"),
        ('kind = "contracts"\nrequire = []\nrequried = 1', "requried"),
    ],
)
def test_a_wrong_declaration_is_task_invalid(tmp_path: Path, table: str, says: str) -> None:
    task = make_task(tmp_path / "t", f"[[metadata.crucible.stages]]\n{table}\n")
    with pytest.raises(TaskInvalid, match=says):
        declared(task)


def test_declared_paths_are_absolute_under_the_workdir() -> None:
    assert declared_paths(["main.py", "/src/", "../etc/x", "/app/./a.py"], "/app") == [
        "/app/main.py",
        "/src/",
        "/etc/x",
        "/app/a.py",
    ]


# -- roles and the reward -----------------------------------------------------------------


async def test_gate_passes_and_records_components(tmp_path: Path) -> None:
    task = make_task(tmp_path / "t", CONTRACTS)
    v = await pipeline(task, submitted(tmp_path, GOOD), tmp_path)
    assert v.rewards == {"reward": 1.0, "contracts.present": 1.0}
    script, gate = v.stages
    assert script.kind == "script" and script.components == {"reward": 1.0}
    assert gate.status == "passed" and gate.details["legacy"] == []


async def test_failed_gate_zeroes_the_reward_and_says_what_is_missing(tmp_path: Path) -> None:
    task = make_task(tmp_path / "t", CONTRACTS)
    only_app = "import modal\napp = modal.App()\n\ndef square(x):\n    return x * x\n"
    v = await pipeline(task, submitted(tmp_path, only_app), tmp_path)
    assert v.rewards == {"reward": 0.0, "contracts.present": 0.0}
    assert v.script_rewards == {"reward": 1.0}
    assert (
        v.stage_note()
        == "contracts failed: required contracts absent (or never reached): function, gpu"
    )


async def test_score_role_adds_components_without_zeroing(tmp_path: Path) -> None:
    task = make_task(
        tmp_path / "t",
        CONTRACTS.replace('kind = "contracts"', 'kind = "contracts"\nrole = "score"'),
    )
    half = "import modal\napp = modal.App()\n\n@app.function()\ndef f():\n    pass\n"
    v = await pipeline(task, submitted(tmp_path, half), tmp_path)
    assert v.rewards == {"reward": 1.0, "contracts.present": 0.5}


async def test_legacy_apis_are_reported(tmp_path: Path) -> None:
    task = make_task(tmp_path / "t", CONTRACTS)
    legacy = GOOD.replace(
        'app = modal.App("squares")', 'app = modal.App("squares")\nstub = modal.Stub("old")'
    )
    v = await pipeline(task, submitted(tmp_path, legacy), tmp_path)
    assert v.stages[1].status == "passed" and v.stages[1].details["legacy"] == ["legacy_stub"]


async def test_a_submission_that_is_not_python_fails_the_gate(tmp_path: Path) -> None:
    task = make_task(tmp_path / "t", CONTRACTS)
    v = await pipeline(task, submitted(tmp_path, "def broken(:\n"), tmp_path)
    assert v.rewards is not None and v.rewards["reward"] == 0.0
    assert "not Python: /app/main.py:1" in v.stages[1].reason


async def test_a_submission_that_crashes_the_analyzer_is_verifier_failed(tmp_path: Path) -> None:
    # Built to crash the analyzer: the attempt's fault (verifier_failed, counted 0),
    # recorded as the stage's error, never a pass or a silent 0.
    task = make_task(tmp_path / "t", CONTRACTS)
    deep = "import modal\nx = " + " + ".join(["'a'"] * 5000) + "\n"
    v = VerifierResult(rewards={"reward": 1.0})
    with pytest.raises(VerifierFailed, match="nested too deep"):
        await pipeline(task, submitted(tmp_path, deep), tmp_path, v=v)
    assert [s.status for s in v.stages] == ["passed", "error"]
    assert v.stages[1].reason.startswith("verifier_failed:")


async def test_judge_is_not_called_on_a_failed_rollout(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    task = make_task(tmp_path / "t", CONTRACTS + judge_toml(fake_openai.url))
    v = await pipeline(task, submitted(tmp_path, GOOD), tmp_path, reward=0.0)
    assert [s.status for s in v.stages] == ["passed", "passed", "skipped"]
    assert "reward is 0.0" in v.stages[2].reason and fake_openai.requests == []


async def test_judge_veto_zeroes_and_records_model_usage_and_cost(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.push(text('```json\n{"verdict": "veto", "reason": "only decorated"}\n```',
                          usage={"prompt_tokens": 1_000_000, "completion_tokens": 0}))  # fmt: skip
    task = make_task(tmp_path / "t", judge_toml(fake_openai.url))
    v = await pipeline(task, submitted(tmp_path, GOOD), tmp_path)
    judge = v.stages[-1]
    assert judge.status == "vetoed" and judge.reason == "only decorated"
    assert v.rewards == {"reward": 0.0, "judge.pass": 0.0}
    assert judge.model is not None and judge.model.prompt_sha256 == PROMPT_SHA256
    assert judge.usage is not None and judge.usage.input_tokens == 1_000_000
    assert judge.cost_usd == pytest.approx(0.15)  # gpt-4o-mini's list price per 1M input tokens
    assert v.stage_cost_usd == pytest.approx(0.15)


async def test_judge_endpoint_errors_are_model_failed_and_recorded(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.fail_always = 503
    task = make_task(tmp_path / "t", CONTRACTS + judge_toml(fake_openai.url))
    v = VerifierResult(rewards={"reward": 1.0})
    with pytest.raises(ModelFailed, match="HTTP 503"):
        await pipeline(task, submitted(tmp_path, GOOD), tmp_path, v=v)
    assert [s.status for s in v.stages] == ["passed", "passed", "error"]
    assert v.stages[-1].reason.startswith("model_failed:")
    assert v.rewards is None and v.script_rewards == {"reward": 1.0}  # never read as a 1


@pytest.mark.parametrize(
    ("reply", "parsed"),
    [
        ('{"verdict": "pass", "reason": "ok"}', ("pass", "ok")),
        ('Here: {"verdict": "veto", "reason": "local only"} done', ("veto", "local only")),
        ('{"verdict": "PASS", "reason": "ok"}', None),
        ('{"verdict": "pass", "reason": 3}', None),
        ("[1, 2]", None),
        ("", None),
    ],
)
def test_parse_verdict(reply: str, parsed: tuple[str, str] | None) -> None:
    assert parse_verdict(reply) == parsed


def test_final_rewards_keep_the_script_keys_first() -> None:
    stages = [
        StageResult(
            name="c", kind="contracts", role="score", status="passed", components={"present": 0.5}
        ),
        StageResult(name="j", kind="judge", role="veto", status="vetoed", components={"pass": 0.0}),
    ]
    out = final_rewards({"accuracy": 0.8, "speed": 0.3}, stages)
    assert list(out) == ["accuracy", "speed", "c.present", "j.pass"]
    assert out["accuracy"] == 0.0 and out["c.present"] == 0.5


# -- the submission, collected from a hostile sandbox --------------------------------------


class ScriptAgent(Agent):
    name = "script"

    def __init__(self, command: str) -> None:
        self.command = command

    async def run(self, ctx: AgentContext) -> AgentResult:
        res = await ctx.sandbox.exec(self.command, timeout=10, cwd=ctx.task.workdir)
        assert res.exit_code == 0, res.stderr
        return AgentResult(exit_code=0)


async def local_trial(task: Task, command: str, tmp: Path):  # type: ignore[no-untyped-def]
    return await run_trial(TrialPlan(task=task, attempt=0, job_id="t"), provider=LocalProvider(),
                           agent=ScriptAgent(command), job_dir=tmp / "job")  # fmt: skip


async def test_a_submission_link_is_not_followed(tmp_path: Path) -> None:
    # The test script passes (main.py resolves to a file with `def square`), but the
    # submission is a link to a file elsewhere: the host never follows it, so the gate
    # sees no program and zeroes the reward.
    task = make_task(tmp_path / "t", CONTRACTS)
    plant = (f"mkdir -p /srv && cat > /srv/real.py <<'EOF'\n{GOOD}EOF\n"
             "ln -s /srv/real.py /app/main.py")  # fmt: skip
    r = await local_trial(task, plant, tmp_path)
    assert r.outcome == "graded" and r.verifier_result.script_rewards == {"reward": 1.0}
    assert r.reward == 0.0
    assert "no Python file was submitted" in r.verifier_result.stages[1].reason
    assert r.verifier_result.submission.missing == ["/app/main.py"]
    assert any("symlink" in n for n in r.verifier_result.submission.notes)
    copied = tmp_path / "job" / "t__0" / "sandbox" / "submission" / "app"
    assert not (copied / "main.py").exists() and not (copied / "main.py").is_symlink()


async def test_the_submission_folder_as_a_link_to_the_root_is_not_followed(tmp_path: Path) -> None:
    # /app/code -> / : a folder submission that points outside is not walked.
    task = make_task(tmp_path / "t", CONTRACTS, submission='["/app/code/"]')
    r = await local_trial(
        task,
        "printf 'def square(x):\\n  return x\\n' > /app/main.py && ln -s / /app/code",
        tmp_path,
    )
    assert r.outcome == "graded" and r.reward == 0.0
    assert r.verifier_result.stages[1].status == "failed"
    assert not list((tmp_path / "job" / "t__0" / "sandbox").rglob("passwd"))


async def test_a_real_submission_is_graded_from_the_sandbox(tmp_path: Path) -> None:
    task = make_task(tmp_path / "t", CONTRACTS)
    r = await local_trial(task, f"cat > /app/main.py <<'EOF'\n{GOOD}EOF", tmp_path)
    assert r.outcome == "graded" and r.reward == 1.0
    assert r.verifier_result.submission.files == ["/app/main.py"]
    assert r.verifier_result.stages[1].details["present"][:4] == [
        "app",
        "function",
        "local_entrypoint",
        "gpu",
    ]


async def test_a_submission_cut_short_by_a_cap_is_not_read(tmp_path: Path) -> None:
    # 2 MiB of padding after a good program: past the submission's per-file cap. Half a
    # file is not the submission (its cut could hide what follows), so the gate sees none.
    task = make_task(tmp_path / "t", CONTRACTS)
    pad = "head -c 2097152 /dev/zero | tr '\\0' '#' >> /app/main.py"
    r = await local_trial(task, f"cat > /app/main.py <<'EOF'\n{GOOD}EOF\n{pad}", tmp_path)
    assert r.outcome == "graded" and r.verifier_result.script_rewards == {"reward": 1.0}
    assert r.reward == 0.0 and "no Python file" in r.verifier_result.stages[1].reason
    sub = r.verifier_result.submission
    assert sub.files == [] and sub.missing == ["/app/main.py"]
    assert any(n.startswith("/app/main.py: file") for n in sub.notes), sub.notes


# -- a judge with no endpoint configured -------------------------------------------------

UNSET_ENV = "CRUCIBLE_JUDGE_BASE_URL"


def unconfigured_judge(policy: str | None, *, base_url: str | None = None) -> str:
    toml = (f'[[metadata.crucible.stages]]\nkind = "judge"\nmodel = "gpt-4o-mini"\n'
            f'base_url_env = "{UNSET_ENV}"\nmax_retries = 0\n')  # fmt: skip
    if base_url is not None:
        toml += f'base_url = "{base_url}"\n'
    return toml + (f'if_unconfigured = "{policy}"\n' if policy else "")


async def test_unconfigured_judge_is_model_failed_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(UNSET_ENV, "  ")  # set but blank counts as unset
    task = make_task(tmp_path / "t", CONTRACTS + unconfigured_judge(None))
    v = VerifierResult(rewards={"reward": 1.0})
    with pytest.raises(ModelFailed, match=rf"\${UNSET_ENV} is unset"):
        await pipeline(task, submitted(tmp_path, GOOD), tmp_path, v=v)
    assert [s.status for s in v.stages] == ["passed", "passed", "error"]
    assert v.rewards is None


async def test_unconfigured_judge_with_skip_is_recorded_as_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(UNSET_ENV, raising=False)
    task = make_task(tmp_path / "t", CONTRACTS + unconfigured_judge("skip"))
    v = await pipeline(task, submitted(tmp_path, GOOD), tmp_path)
    judge = v.stages[-1]
    assert (judge.status, judge.reason) == (
        "skipped",
        f"judge not configured: ${UNSET_ENV} is unset",
    )
    assert judge.usage is None and judge.model is None  # no call was made
    # the rollout keeps the script's reward; no judge component is invented
    assert v.rewards == {"reward": 1.0, "contracts.present": 1.0}
    assert v.stage_note() is None  # a skip is not why a trial scored what it did


async def test_skip_never_hides_a_configured_endpoint_that_fails(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_openai.fail_always = 503
    # configured through the variable ...
    monkeypatch.setenv(UNSET_ENV, fake_openai.url)
    task = make_task(tmp_path / "t", CONTRACTS + unconfigured_judge("skip"))
    with pytest.raises(ModelFailed, match="HTTP 503"):
        await pipeline(task, submitted(tmp_path, GOOD), tmp_path)
    # ... or through base_url when the variable is unset
    monkeypatch.delenv(UNSET_ENV)
    task = make_task(
        tmp_path / "t2", CONTRACTS + unconfigured_judge("skip", base_url=fake_openai.url)
    )
    with pytest.raises(ModelFailed, match="HTTP 503"):
        await pipeline(task, submitted(tmp_path, GOOD), tmp_path)
    assert len(fake_openai.requests) == 2


async def test_skip_applies_once_the_operator_sets_the_endpoint(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(UNSET_ENV, fake_openai.url)
    fake_openai.push(text('{"verdict": "veto", "reason": "decorated only"}'))
    task = make_task(tmp_path / "t", CONTRACTS + unconfigured_judge("skip"))
    v = await pipeline(task, submitted(tmp_path, GOOD), tmp_path)
    assert v.stages[-1].status == "vetoed" and v.rewards is not None
    assert v.rewards["reward"] == 0.0


def test_if_unconfigured_takes_only_error_or_skip(tmp_path: Path) -> None:
    task = make_task(tmp_path / "t", unconfigured_judge("ignore"))
    with pytest.raises(TaskInvalid, match="if_unconfigured"):
        declared(task)
