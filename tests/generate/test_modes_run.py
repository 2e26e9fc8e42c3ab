"""The done-when runs of the mine and issues modes: a scripted setter replays the proven
Modal-translation tasks of examples/generate/setter/ for the seeds it is given, a scripted
solver (the terminal agent) solves half its attempts, and each run accepts proven tasks
that grade offline through the contracts and io stages; `crucible dataset split` on the
output then passes its own leakage check."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import tomllib
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.generate.loop import GenConfig, Generator
from crucible.generate.setter import SetterSpec
from crucible.generate.solver import SolverSpec
from tests.generate.scripted import propose
from tests.helpers.fake_openai import FakeOpenAI, Step, bash, submit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "generate"
REPLY = {m: json.loads((EXAMPLES / "setter" / f"{m}.json").read_text()) for m in ("mine", "issues")}
# which reply answers which seed (by a phrase of the seed's text in the setter's prompt)
ANSWERS = {
    "spectral_peaks.py": "mine",  # mine: the FFT workflow
    "Variance merged from parallel chunks": "issues",  # issues: the unequal-chunk bug
    "Peak frequency reported as 0 Hz": "mine",  # issues: the DC-offset report, same program
}


def setter(body: dict[str, Any]) -> Step:
    prompt = body["messages"][-1]["content"]
    assert "data from an untrusted source" in prompt  # the seed's brief, fenced
    (which,) = {reply for phrase, reply in ANSWERS.items() if phrase in prompt}
    return propose(REPLY[which])


class ModalSolver:
    """Writes the reference port on the attempts `wins` says (cycled per task), else nothing."""

    def __init__(self, wins: list[bool]) -> None:
        self.wins, self.count, self.lock = wins, {"mine": 0, "issues": 0}, threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Step:
        msgs = body["messages"]
        if any(m.get("role") == "tool" for m in msgs):
            return submit()
        text = " ".join(str(m.get("content") or "") for m in msgs)
        which = "mine" if "peak_frequency" in text else "issues"
        with self.lock:
            i = self.count[which]
            self.count[which] = i + 1
        if not self.wins[i % len(self.wins)]:
            return bash("true")
        port = REPLY[which]["files"]["solution/main.py"]
        return bash(f"cat > /app/main.py <<'PORT'\n{port}PORT\n")


def config(
    tmp_path: Path, mode: str, source: Path, n: int, first: str, urls: tuple[str, str]
) -> GenConfig:
    cats = [ln.strip() for ln in (EXAMPLES / "categories.txt").read_text().splitlines()
            if ln.strip() and not ln.startswith("#")]  # fmt: skip
    cats.remove(first)  # asked first: it names the run's first task (and its lineage's root)
    return GenConfig(
        out=tmp_path / f"gen-{mode}", mode=mode, source=source, domain="scientific computing",
        setter=SetterSpec("gpt-4.1-mini", urls[0], None),
        solver=SolverSpec("terminal", {"model": "gpt-4.1-mini", "model_base_url": urls[1],
                                       "max_retries": 0}),
        categories=[first, *cats], max_tasks=n, max_proposals=n, k=2,
        jobs_dir=tmp_path / f"jobs-{mode}",
    )  # fmt: skip


def stages_of(result: Path) -> list[tuple[str, str, str]]:
    v = json.loads(result.read_text())["verifier_result"] or {}
    return [(s["kind"], s["status"], s["reason"][:300]) for s in v.get("stages", [])]


def proven(out: Path, mode: str) -> list[str]:
    """The accepted tasks of a run, each checked: lineage keys, its stages, its runs on disk,
    and every oracle run graded 1.0 through the contracts and io stages (offline Modal)."""
    state = json.loads((out / "state.json").read_text())
    names = []
    for p in state["proposals"]:
        where = out / ("proposals" if p["outcome"] == "accepted" else "rejected") / p["name"]
        runs = {r.parent.parent.name + "/" + r.parent.name: stages_of(r)
                for r in where.glob("jobs/*/*/result.json")}  # fmt: skip
        assert p["outcome"] == "accepted", (p["name"], p["reason"], p["message"], runs)
        names.append(p["name"])
        meta = tomllib.loads((out / "tasks" / p["name"] / "task.toml").read_text())["metadata"]
        assert meta["mode"] == mode and meta["source"].startswith(mode.rstrip("s") + "-")
        oracle = [r for r in where.glob("jobs/oracle/*/result.json")]
        assert len(oracle) == 3 and list(where.glob("jobs/nop/*/result.json"))
        for r in oracle:
            assert [(k, st) for k, st, _ in stages_of(r)] == [
                ("script", "passed"), ("contracts", "passed"), ("io", "passed")], runs  # fmt: skip
            assert json.loads(r.read_text())["verifier_result"]["rewards"]["reward"] == 1.0
    return names


@pytest.mark.slow
def test_mine_and_issues_runs_accept_proven_tasks_and_their_split_passes_the_leak_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CRUCIBLE_JUDGE_BASE_URL", raising=False)
    mined = tmp_path / "mine"
    mined.mkdir()
    shutil.copy(EXAMPLES / "mine" / "spectral_peaks.py", mined)
    solver = ModalSolver([True, False])
    with FakeOpenAI([setter] * 10) as s, FakeOpenAI([solver] * 200) as v:
        urls = (s.url, v.url)
        mine = config(tmp_path, "mine", mined, 1, "image_build", urls)
        issues = config(tmp_path, "issues", EXAMPLES / "seeds.jsonl", 1, "fan_out", urls)

        async def both() -> None:
            await asyncio.gather(Generator(mine).run(), Generator(issues).run())

        asyncio.run(both())
    assert proven(mine.out, "mine") == ["image-build-000"]
    assert proven(issues.out, "issues") == ["fan-out-000"]

    # the two runs' tasks as one folder: the split keeps their sources apart and checks clean
    pool = tmp_path / "pool"
    for out in (mine.out, issues.out):
        for task in (out / "tasks").iterdir():
            shutil.copytree(task, pool / task.name)
    split = tmp_path / "split"
    res = CliRunner().invoke(app, ["dataset", "split", str(pool), "--val", "0.5", "-o", str(split),
                                   "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert (report["train"], report["val"], report["near_duplicate_pairs_checked"]) == (1, 1, 1)
    assert {t["lineage"]["mode"] for t in report["tasks"]} == {"mine", "issues"}
    # and the split's parts still grade: the oracle through the stages, from the manifest
    res = CliRunner().invoke(app, ["run", str(split / "crucible-dataset.json"), "--agent", "oracle",
                                   "--env", "local", "--jobs-dir", str(tmp_path / "check"),
                                   "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert (summary["n_trials"], summary["mean_reward"]) == (2, 1.0)
