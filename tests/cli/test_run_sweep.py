"""`crucible run` as a sweep (2 agents x 2 models, scripted) and `crucible report` of it:
four rows, the paired differences against the baseline, and the cost of a self-hosted
model worked out from its server's price."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers.fake_openai import FakeOpenAI, Step, bash, fake_openai, submit, text

__all__ = ["fake_openai"]

REPO = Path(__file__).resolve().parents[2]
TASKS = [REPO / "examples" / "tasks" / "hello-file", REPO / "examples" / "tasks" / "two-metrics"]
# What the "good" model runs for each task, keyed by a phrase of the instruction.
SOLUTIONS = {
    "hello.txt": "echo 'Hello, crucible!' > /app/hello.txt",
    "primes.txt": "printf '2\\n3\\n5\\n7\\n11\\n13\\n17\\n19\\n23\\n29\\n' > /app/primes.txt",
}


def crucible(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "OPENAI_API_KEY": "k"}
    env.pop("OPENAI_BASE_URL", None)
    return subprocess.run([sys.executable, "-m", "crucible.cli.main", *args],
                          capture_output=True, text=True, timeout=300, cwd=REPO, env=env)  # fmt: skip


def scripted(body: dict[str, Any]) -> Step:
    """The reply of model `good` (solves every task) or `bad` (submits at once), in the
    tools protocol or the text one, whichever the request speaks."""
    messages = body["messages"]
    tools = bool(body.get("tools"))
    acted = any(m["role"] in ("tool", "assistant") for m in messages)
    if body["model"] == "bad" or acted:
        return submit() if tools else text("done\nSUBMIT")
    prompt = " ".join(str(m.get("content")) for m in messages if m["role"] == "user")
    command = next(cmd for key, cmd in SOLUTIONS.items() if key in prompt)
    return bash(command) if tools else text(f"```bash\n{command}\n```")


def test_two_agents_by_two_models_make_one_report(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.push(*[scripted] * 64)
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        'baseline = "tools/good"\n'
        'agents = [{label = "tools", agent = "terminal", agent_kwargs = {tool_mode = "tools"}},\n'
        '          {label = "text", agent = "terminal", agent_kwargs = {tool_mode = "text"}}]\n'
        'models = ["good", "bad"]\n'
    )
    prices = tmp_path / "prices.toml"
    prices.write_text(
        "[models.good]\ninput = 1.0\noutput = 2.0\n"
        '[self_hosted.bad]\nusd_per_hour = 7.2\noutput_tokens_per_sec = 100\nnote = "2x H100"\n'
    )
    jobs = tmp_path / "jobs"
    run = crucible("run", *map(str, TASKS), "--sweep", str(sweep), "--model-base-url",
                   fake_openai.url, "--agent-kwarg", "max_retries=0", "--jobs-dir", str(jobs),
                   "--job-name", "sw", "-c", "3", "--json")  # fmt: skip
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert [a["label"] for a in out["arms"]] == ["tools/good", "tools/bad", "text/good", "text/bad"]
    assert out["concurrency"] == 3 and out["baseline"] == "tools/good"
    means = {a["label"]: a["summary"]["mean_reward"] for a in out["arms"]}
    assert means == {"tools/good": 1.0, "tools/bad": 0.0, "text/good": 1.0, "text/bad": 0.0}

    rep = crucible("report", "sw", "--jobs-dir", str(jobs), "--price-table", str(prices),
                   "--by", "category", "--json")  # fmt: skip
    assert rep.returncode == 0, rep.stderr
    data = json.loads(rep.stdout)
    rows = {j["arm"]: j for j in data["jobs"]}
    assert list(rows) == ["tools/good", "tools/bad", "text/good", "text/bad"]
    # every arm against the baseline, paired by task
    pairs = {(c["a"], c["b"]): c for c in data["comparisons"]}
    assert set(pairs) == {
        (f"sw.{x}", "sw.tools-good") for x in ("tools-bad", "text-good", "text-bad")
    }
    assert pairs[("sw.tools-bad", "sw.tools-good")]["difference"]["mean"] == -1.0
    assert pairs[("sw.text-good", "sw.tools-good")]["n_common"] == 2
    # per split (task metadata), and the self-hosted cost marked with its basis
    assert rows["text/bad"]["breakdown"]["groups"]["example"]["n_trials"] == 2
    assert rows["tools/good"]["overall"]["cost"]["sources"] == {"priced": 2}  # tokens at a price
    bad = rows["tools/bad"]
    assert bad["overall"]["cost"]["sources"] == {"self-hosted": 2}
    out_tokens = bad["overall"]["cost"]["tokens_per_rollout"]["output"]
    assert abs(bad["overall"]["cost"]["per_rollout_usd"] - out_tokens / 100 * 7.2 / 3600) < 1e-12
    assert "self-hosted at $7.2/h, 2x H100, 100 output tok/s declared" in bad["cost_basis"]

    md = crucible("report", "sw", "--jobs-dir", str(jobs), "--price-table", str(prices),
                  "--baseline", "text/good", "--format", "markdown")  # fmt: skip
    assert md.returncode == 0, md.stderr
    assert "| text/good |" in md.stdout and "tools/good - text/good" in md.stdout
    assert "(self-hosted)" in md.stdout
    again = crucible("run", "--resume", "sw", "--jobs-dir", str(jobs), "--json")
    assert again.returncode == 0, again.stderr  # every arm already final: nothing reruns
    assert [a["summary"]["n_done"] for a in json.loads(again.stdout)["arms"]] == [2, 2, 2, 2]
