"""ATIF v1.8 from the terminal agent's record and from installed agents' recorded logs.

Every document is checked by the `atif` package's models (the converters
validate on the way out; the tests re-validate the written JSON) and, where a
Python 3.12 venv with Harbor exists (scripts/setup-harbor-validator.sh), by
Harbor's own validator.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from atif import Trajectory as AtifModel
from tests.helpers.jobs import JobsFactory
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.export.atif.claude_code import claude_code_to_atif
from crucible.export.atif.codex import codex_to_atif
from crucible.export.atif.common import ATIF_FILE, MAX_STEPS, TEXT_CAP
from crucible.export.atif.installed import write_installed_atif
from crucible.export.atif.native import write_native_atif
from crucible.records.trajectory import Action, Event, Trajectory, Turn
from crucible.records.usage import Usage

SAMPLES = Path(__file__).parent / "atif_samples"
HARBOR_VENV = Path(os.environ.get("CRUCIBLE_HARBOR_VENV", "/tmp/crucible-harbor312"))
T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


class NewerTurn(Turn):
    """A turn as a newer record may carry it (RL passthrough fields)."""

    completion_token_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    reasoning_content: str | None = None


def native_record() -> Trajectory:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "bash", "arguments": '{"command": "ls"}'},
    }
    sub = {"id": "c2", "type": "function", "function": {"name": "submit", "arguments": "{}"}}
    return Trajectory(
        agent="terminal",
        agent_version="1",
        model="m",
        base_url="http://127.0.0.1:1/v1",
        task="hello-file",
        mode="tools",
        status="submitted",
        n_turns=3,
        messages=[
            {"role": "system", "content": "You are an agent."},
            {"role": "user", "content": "Write hello."},
            {"role": "assistant", "content": "Looking.", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "[exit code 0]\nREADME"},
            {"role": "assistant", "content": "```bash\ncat README\n```"},
            {"role": "user", "content": "[exit code 1]\nno"},
            {"role": "assistant", "content": "Hmm."},
            {"role": "user", "content": "No command found. Give exactly one command."},
            {"role": "assistant", "content": None, "tool_calls": [sub]},
            {"role": "tool", "tool_call_id": "c2", "content": "submitted"},
        ],
        turns=[
            NewerTurn(
                index=0,
                started_at=T0,
                mode="tools",
                usage=Usage(input_tokens=100, cache_read_tokens=40, output_tokens=7),
                cost_usd=0.01,
                completion_token_ids=[5, 6, 7],
                logprobs=[-0.1, -0.2, -0.3],
                reasoning_content="think first",
                actions=[
                    Action(
                        tool="bash",
                        arguments={"command": "ls"},
                        tool_call_id="c1",
                        output="[exit code 0]\nREADME",
                        exit_code=0,
                    )
                ],
            ),
            Turn(
                index=1,
                started_at=T0,
                mode="text",
                usage=Usage(input_tokens=120, output_tokens=5),
                actions=[
                    Action(
                        tool="bash",
                        arguments={"command": "cat README"},
                        output="[exit code 1]\nno",
                        exit_code=1,
                    )
                ],
            ),
            Turn(
                index=2, started_at=T0, mode="text", usage=Usage(input_tokens=130, output_tokens=2)
            ),
            Turn(
                index=3,
                started_at=T0,
                mode="tools",
                usage=Usage(input_tokens=140, output_tokens=3),
                actions=[
                    Action(tool="submit", arguments={}, tool_call_id="c2", output="submitted")
                ],
            ),
        ],
        events=[Event(kind="mode_switch", detail="plain-text protocol: test")],
    )


def harbor_validates(path: Path) -> subprocess.CompletedProcess[str] | None:
    python = HARBOR_VENV / "bin" / "python"
    if not python.is_file():
        return None
    return subprocess.run(
        [str(python), "-m", "harbor.utils.trajectory_validator", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_native_record_converts_to_valid_atif(tmp_path: Path) -> None:
    path = write_native_atif(native_record(), tmp_path / "agent")
    assert path is not None and path.name == ATIF_FILE
    doc = AtifModel.model_validate_json(path.read_text())
    assert doc.schema_version == "ATIF-v1.8"
    sources = [s.source for s in doc.steps]
    # system, user, 4 agent turns; the nudge stays a user step, the text-mode output does not
    assert sources == ["system", "user", "agent", "agent", "agent", "user", "agent"]
    first = doc.steps[2]
    assert first.tool_calls and first.tool_calls[0].tool_call_id == "c1"
    assert first.observation and first.observation.results[0].source_call_id == "c1"
    assert first.observation.results[0].extra == {"exit_code": 0, "duration_sec": 0.0}
    assert first.metrics and first.metrics.completion_token_ids == [5, 6, 7]
    assert first.metrics.logprobs == [-0.1, -0.2, -0.3] and first.metrics.cached_tokens == 40
    assert first.reasoning_content == "think first"
    text_step = doc.steps[3]
    assert text_step.observation and text_step.observation.results[0].content == "[exit code 1]\nno"
    assert doc.final_metrics and doc.final_metrics.total_prompt_tokens == 490
    assert (
        doc.extra
        and doc.extra["status"] == "submitted"
        and doc.extra["events"][0]["kind"] == "mode_switch"
    )


@pytest.mark.parametrize(
    ("sample", "convert", "n_steps", "calls"),
    [
        ("claude-code-stream.jsonl", claude_code_to_atif, 3, ["toolu_01", "toolu_02"]),
        ("claude-code-session.jsonl", claude_code_to_atif, 3, ["toolu_a"]),
        ("codex-rollout.jsonl", codex_to_atif, 3, ["call_A1"]),
        ("codex-exec.jsonl", codex_to_atif, 3, ["item_1", "item_2"]),
    ],
)
def test_recorded_agent_logs_convert(sample: str, convert, n_steps: int, calls: list[str]) -> None:  # type: ignore[no-untyped-def]
    doc = convert((SAMPLES / sample).read_text())
    assert doc is not None and len(doc.steps) == n_steps
    AtifModel.model_validate(doc.to_json_dict())
    made = [tc.tool_call_id for s in doc.steps for tc in s.tool_calls or []]
    answered = [
        r.source_call_id
        for s in doc.steps
        for r in (s.observation.results if s.observation else [])
    ]
    assert made == calls and answered == calls  # every call has its result, in one step


def test_claude_code_stream_merges_one_message_and_keeps_totals() -> None:
    doc = claude_code_to_atif((SAMPLES / "claude-code-stream.jsonl").read_text())
    assert doc is not None
    step = doc.steps[0]
    assert step.reasoning_content == "I should check what is in the folder first."
    assert step.message == "Let me look around."
    assert (
        step.metrics and step.metrics.prompt_tokens == 912 and step.metrics.completion_tokens == 58
    )
    assert doc.final_metrics and doc.final_metrics.total_cost_usd == pytest.approx(0.0123)
    assert doc.session_id == "5b0c3f5e-1d7a-4c55-9a3e-2f3a1c9b8e11"


def test_codex_keeps_exit_codes() -> None:
    doc = codex_to_atif((SAMPLES / "codex-exec.jsonl").read_text())
    assert doc is not None
    codes = [
        r.extra["exit_code"]
        for s in doc.steps
        for r in (s.observation.results if s.observation else [])
        if r.extra
    ]
    assert codes == [0, 1]


def test_hostile_logs_are_capped_and_never_raise(tmp_path: Path) -> None:
    """Attack: an agent's stdout is written by code in the sandbox. Wrong types, a result for
    a call never made, huge text, deep nesting and step floods must give a valid, bounded
    document (before the caps and type checks, these raised or grew without bound)."""
    huge = "x" * (TEXT_CAP * 3)
    lines = [
        '{"type":"assistant","message":"not a dict"}',
        '{"type":"assistant","message":{"content":{"type":"text"}}}',
        json.dumps(
            {
                "type": "assistant",
                "message": {
                    "id": 1,
                    "content": [{"type": "tool_use", "id": 5, "name": ["x"], "input": "rm -rf /"}],
                    "usage": {"input_tokens": "9", "output_tokens": True},
                },
            }
        ),
        json.dumps(
            {
                "type": "user",
                "message": {
                    "content": [
                        {"type": "tool_result", "tool_use_id": "never-made", "content": huge}
                    ]
                },
            }
        ),
        "[" * 100_000,
        '{"type":"result","total_cost_usd":"free"}',
        "not json at all",
    ] + [
        json.dumps(
            {
                "type": "assistant",
                "message": {"id": f"m{i}", "content": [{"type": "text", "text": "flood"}]},
            }
        )
        for i in range(MAX_STEPS + 10)
    ]
    path = write_installed_atif("claude-code", "\n".join(lines), tmp_path)
    assert path is not None
    doc = AtifModel.model_validate_json(path.read_text())
    assert len(doc.steps) == MAX_STEPS and doc.notes and "dropped" in doc.notes
    assert all(len(str(s.message)) <= TEXT_CAP + 100 for s in doc.steps)
    stray = [s for s in doc.steps if s.source == "user"]
    assert stray and stray[0].extra == {"tool_use_id": "never-made"}  # not attached to a call
    assert codex_to_atif("\n".join(lines[:7])) is None
    assert write_installed_atif("mini-swe-agent", "\n".join(lines), tmp_path / "other") is None


def test_harbor_validator_accepts_the_output(tmp_path: Path) -> None:
    """Harbor's own validator (Python 3.12 venv) on a native and a claude-code document."""
    native = write_native_atif(native_record(), tmp_path / "native")
    claude = write_installed_atif(
        "claude-code", (SAMPLES / "claude-code-stream.jsonl").read_text(), tmp_path / "cc"
    )
    codex = write_installed_atif(
        "codex", (SAMPLES / "codex-rollout.jsonl").read_text(), tmp_path / "cx"
    )
    assert native and claude and codex
    for path in (native, claude, codex):
        res = harbor_validates(path)
        if res is None:
            pytest.skip(
                f"no Harbor validator venv at {HARBOR_VENV} (make one with scripts/setup-harbor-validator.sh)"
            )
        assert res.returncode == 0, res.stdout + res.stderr
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            {
                "schema_version": "ATIF-v1.8",
                "agent": {"name": "a", "version": "1"},
                "steps": [{"step_id": 2, "source": "user", "message": ""}],
            }
        )
    )
    res = harbor_validates(bad)
    assert res is not None and res.returncode != 0  # the validator does reject


def test_runs_trace_format_atif(jobs: JobsFactory, tmp_path: Path) -> None:
    """`crucible runs trace --format atif`: a terminal-agent record and a claude-code stdout
    become TRIAL/agent/trajectory.json (Harbor's layout); a trial with neither is missing."""
    j = jobs.job("job-atif", tasks=["alpha", "beta", "gamma"])
    j.trial("alpha", 0, agent_files={"trajectory.json": native_record().model_dump_json()})
    j.trial(
        "beta", 0, agent_files={"stdout.txt": (SAMPLES / "claude-code-stream.jsonl").read_text()}
    )
    j.trial("gamma", 0, agent_files={"oracle.txt": "ran solve.sh\n"})
    result = j.path / "beta__0" / "result.json"
    data = json.loads(result.read_text())
    data["agent_result"]["metadata"] = {"template": "claude-code"}
    result.write_text(json.dumps(data))
    out = tmp_path / "out"
    args = [
        "runs",
        "trace",
        j.job_id,
        "--jobs-dir",
        str(j.jobs_dir),
        "--out",
        str(out),
        "--format",
        "atif",
        "--json",
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.stderr
    manifest = json.loads(res.stdout)
    by_trial = {t["trial_name"]: t for t in manifest["trials"]}
    assert by_trial["gamma__0"]["files"] == [] and by_trial["gamma__0"]["missing"]
    for name, agent in (("alpha__0", "terminal"), ("beta__0", "claude-code")):
        path = out / name / "agent" / "trajectory.json"
        doc = AtifModel.model_validate_json(path.read_text())
        assert doc.agent.name == agent
        (entry,) = by_trial[name]["files"]
        assert entry["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert sorted(p.name for p in out.iterdir()) == ["alpha__0", "beta__0", "manifest.json"]
    bad = CliRunner().invoke(app, [*args[:-3], "--format", "xml"])
    assert bad.exit_code == 2 and "--format" in bad.stderr
