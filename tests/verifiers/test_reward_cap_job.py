"""The reward file's size cap, 1 MiB (1,048,576 bytes), in a real `crucible run` on local
sandboxes. Each task's test script writes a reward.json of a literal size: `{"reward": 1}`
padded with spaces. At the cap it is read (reward 1); one byte over, it is refused as
the attempt's (verifier_failed, counted 0). The sizes are written here as numbers, never
from crucible's constant: a cap raised in the code fails this test.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.tasks.scaffold import scaffold_task

runner = CliRunner()
REWARD = '{"reward": 1}'
SIZES = {"at-cap": 1_048_576, "over-cap": 1_048_577}  # bytes of reward.json


def _task(root: Path, name: str, size: int) -> Path:
    task = scaffold_task(name, root)
    pad = size - len(REWARD)
    (task / "tests" / "test.sh").write_text(
        "#!/usr/bin/env bash\nset -euo pipefail\nmkdir -p /logs/verifier\n"
        f"{{ printf '%s' '{REWARD}'; head -c {pad} /dev/zero | tr '\\0' ' '; }}"
        " > /logs/verifier/reward.json\n"
        "wc -c < /logs/verifier/reward.json\n"
    )
    return task


def test_a_reward_file_one_byte_over_one_mib_is_refused(tmp_path: Path) -> None:
    tasks = [str(_task(tmp_path / "tasks", name, size)) for name, size in SIZES.items()]
    jobs = tmp_path / "jobs"
    result = runner.invoke(app, ["run", *tasks, "--env", "local", "--jobs-dir", str(jobs),
                                 "--job-name", "j", "--max-retries", "0", "--json", "--quiet"])  # fmt: skip
    assert result.exit_code == 0, result.output
    trials = {p.parent.name: json.loads(p.read_text()) for p in (jobs / "j").glob("*/result.json")}
    at, over = trials["at-cap__0"], trials["over-cap__0"]
    # the script wrote the sizes meant (its stdout: wc -c)
    assert (jobs / "j" / "at-cap__0" / "verifier" / "test-stdout.txt").read_text().split() == [
        "1048576"
    ]
    assert at["outcome"] == "graded" and at["verifier_result"]["rewards"] == {"reward": 1.0}, at
    assert over["outcome"] == "verifier_failed", over["verifier_result"]
    assert "reward.json is larger than 1048576 bytes" in over["error"]["message"]
    summary = json.loads((jobs / "j" / "result.json").read_text())
    assert summary["mean_reward"] == 0.5 and summary["n_excluded"] == 0, summary
