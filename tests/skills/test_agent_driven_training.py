"""The agent-driven-training skill: every `crucible ...` command it names resolves in the
typer app with the options it uses (test_skills.py's checker), it names the training
commands it teaches, and it covers what issue 30 asks it to teach."""

from __future__ import annotations

import pytest
from tests.skills.test_skills import check_command, commands_in

from crucible.skills.bundle import bundled_skills

TEXT = (
    next(s for s in bundled_skills() if s.name == "agent-driven-training")
    .files["SKILL.md"]
    .decode()
)


def test_every_command_it_names_exists() -> None:
    cmds = commands_in(TEXT)
    for needed in ("crucible train smoke", "crucible train launch", "crucible runs trace",
                   "crucible runs get", "crucible runs cancel"):  # fmt: skip
        assert any(c.startswith(needed) for c in cmds), needed
    assert any("--dry-run" in c and c.startswith("crucible train launch") for c in cmds)
    # each one resolves, options included: test_skills.py's
    # test_every_command_mentioned_exists[agent-driven-training] runs check_command on all


def test_the_checker_rejects_a_wrong_training_command() -> None:
    with pytest.raises(AssertionError, match="no command"):
        check_command("crucible train explode config.py")
    with pytest.raises(AssertionError, match="no option"):
        check_command("crucible train smoke config.py --gpus 8")


def test_it_teaches_what_the_issue_asks() -> None:
    low = TEXT.lower()
    assert "ask before" in low and "cost" in low
    assert "smoke locally first" in low and "healthy smoke run" in low
    assert "read real samples" in low
    for hack in ("self-rhyme", "one-word lines"):
        assert hack in low
    assert "hacking" in low
