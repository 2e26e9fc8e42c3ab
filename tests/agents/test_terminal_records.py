"""The terminal agent's append-only trajectory log, its loader, and the plain-text parser."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from crucible.agents.terminal.tools import parse_text_reply
from crucible.agents.terminal.trajectory import TrajectoryLog
from crucible.records.trajectory import (
    TRAJECTORY_JSON,
    TRAJECTORY_LOG,
    Action,
    Event,
    Trajectory,
    Turn,
    load_trajectory,
)
from crucible.records.trial import utcnow


def traj() -> Trajectory:
    return Trajectory(
        agent="terminal", agent_version="1", model="m", base_url="http://x", task="t", mode="tools"
    )


def grow(t: Trajectory, i: int, size: int = 100) -> None:
    t.messages.append({"role": "assistant", "content": f"turn {i}"})
    t.messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": "x" * size})
    t.turns.append(
        Turn(
            index=i,
            started_at=utcnow(),
            mode="tools",
            actions=[Action(tool="bash", arguments={"command": "ls"}, output="x" * size)],
        )
    )
    t.n_turns = i + 1


def test_log_round_trips_and_grows_linearly(tmp_path: Path) -> None:
    t = traj()
    t.messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "do it"}]
    log = TrajectoryLog(tmp_path, cap_bytes=1 << 30)
    sizes = []
    for i in range(40):
        grow(t, i)
        if i == 3:
            t.events.append(Event(kind="context_trim", detail="d", messages=t.messages[:2]))
            t.messages[0] = {"role": "system", "content": "text mode"}  # a mode switch
        log.sync(t)
        sizes.append(log.bytes_written)
    t.status = "submitted"
    log.sync(t, finished=True)
    steps = [b - a for a, b in itertools.pairwise(sizes[5:])]
    assert max(steps) - min(steps) < 64  # each turn appends about the same: O(turns) in all
    back = load_trajectory(tmp_path)
    assert back.model_dump(exclude={"updated_at"}) == t.model_dump(exclude={"updated_at"})
    assert back.messages[0]["content"] == "text mode" and back.truncation is None


def test_log_cap_records_the_truncation_and_keeps_the_final_status(tmp_path: Path) -> None:
    t = traj()
    log = TrajectoryLog(tmp_path, cap_bytes=20_000)
    for i in range(60):
        grow(t, i, size=400)
        log.sync(t)
    t.status = "turn_limit"
    log.sync(t, finished=True)
    assert log.truncated and (tmp_path / TRAJECTORY_LOG).stat().st_size <= 20_000
    back = load_trajectory(tmp_path / TRAJECTORY_LOG)
    assert back.truncation is not None and back.truncation["cap_bytes"] == 20_000
    assert back.status == "turn_limit" and back.n_turns == 60 and len(back.turns) < 60


def test_a_line_cut_by_a_crash_and_an_old_json_record_both_load(tmp_path: Path) -> None:
    t = traj()
    log = TrajectoryLog(tmp_path, cap_bytes=1 << 20)
    grow(t, 0)
    log.sync(t)
    with (tmp_path / TRAJECTORY_LOG).open("a") as fh:
        fh.write('{"type": "turn", "turn": {"ind')  # the writer was killed mid-line
    assert len(load_trajectory(tmp_path).turns) == 1
    old = tmp_path / "old"
    old.mkdir()
    (old / TRAJECTORY_JSON).write_text(t.model_dump_json())
    assert load_trajectory(old).turns[0].actions[0].output == "x" * 100


def test_plain_text_parser_keeps_a_fence_inside_a_heredoc() -> None:
    reply = (
        "Writing the README.\n```bash\ncat > README.md <<'EOF'\n# Usage\n```python\n"
        'print("hi")\n```\nEOF\ncat README.md\n```\nthen more prose'
    )
    actions, submitted = parse_text_reply(reply)
    assert [a.body for a in actions] == [
        "cat > README.md <<'EOF'\n# Usage\n```python\nprint(\"hi\")\n```\nEOF\ncat README.md"
    ]
    assert not submitted
    # <<- and double-quoted delimiters; a here-string is not a heredoc; unclosed is no command
    assert parse_text_reply('```sh\ncat <<-"X"\n```\nX\n```')[0][0].body == 'cat <<-"X"\n```\nX'
    assert parse_text_reply("```bash\ntr a b <<< word\n```\nSUBMIT") == (
        parse_text_reply("```bash\ntr a b <<< word\n```")[0],
        True,
    )
    assert parse_text_reply("```bash\ncat <<EOF\nno end") == ([], False)
    assert json.dumps(parse_text_reply("```bash\nls -la```")[0][0].body) == '"ls -la"'
