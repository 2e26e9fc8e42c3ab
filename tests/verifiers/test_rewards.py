"""Reward files, Harbor's way: reward.json (flat map of finite numbers) wins over reward.txt."""

from __future__ import annotations

from pathlib import Path

import pytest

from crucible.errors import VerifierFailed
from crucible.verifiers.rewards import parse_reward_json, parse_reward_txt
from crucible.verifiers.script import read_rewards


def test_reward_json_flat_map() -> None:
    assert parse_reward_json('{"reward": 1, "style": 0.5}') == {"reward": 1.0, "style": 0.5}


@pytest.mark.parametrize(
    "text, why",
    [
        ("", "not valid JSON"),
        ("{}", "empty"),
        ("[1, 2]", "flat object"),
        ('{"reward": "1"}', "not a number"),
        ('{"reward": true}', "not a number"),
        ('{"reward": NaN}', "not finite"),
        ('{"reward": Infinity}', "not finite"),
        ('{"reward": -Infinity}', "not finite"),
        ('{"reward": {"nested": 1}}', "not a number"),
        ('{"reward": null}', "not a number"),
    ],
)
def test_reward_json_rejects(text: str, why: str) -> None:
    with pytest.raises(VerifierFailed, match=why):
        parse_reward_json(text)


@pytest.mark.parametrize(
    "text, value", [("1", 1.0), ("0\n", 0.0), ("  0.25  \n", 0.25), ("-1", -1.0)]
)
def test_reward_txt(text: str, value: float) -> None:
    assert parse_reward_txt(text) == {"reward": value}


@pytest.mark.parametrize(
    "text, why",
    [("", "empty"), ("\n  \n", "empty"), ("pass", "one number"), ("1 2", "one number"),
     ("nan", "not finite"), ("inf", "not finite"), ("-inf", "not finite")],
)  # fmt: skip
def test_reward_txt_rejects(text: str, why: str) -> None:
    with pytest.raises(VerifierFailed, match=why):
        parse_reward_txt(text)


@pytest.mark.parametrize(
    "text, why",
    [
        ('{"reward": ' + "9" * 400 + "}", "too large"),  # valid JSON, no float
        ('{"reward": ' + "1" * 5000 + "}", "not valid JSON"),  # past Python's digit limit
        ("[" * 100_000 + "]" * 100_000, "not valid JSON|nested too deeply"),
        ("1e999", "not a number|flat object"),
    ],
)
def test_reward_json_that_breaks_parsers_is_verifier_failed(text: str, why: str) -> None:
    with pytest.raises(VerifierFailed, match=why):
        parse_reward_json(text)


@pytest.mark.parametrize("text", ["9" * 400, "1" * 5000, "1e999"])
def test_reward_txt_that_breaks_parsers_is_verifier_failed(text: str) -> None:
    with pytest.raises(VerifierFailed):
        parse_reward_txt(text)


def test_any_failure_reading_a_reward_is_verifier_failed(tmp_path: Path) -> None:
    # one byte over the cap (1 MiB), as a number: a cap raised in the code fails here
    (tmp_path / "reward.json").write_bytes(b'{"reward": 1}'.ljust(1_048_577))
    with pytest.raises(VerifierFailed, match="larger than"):
        read_rewards(tmp_path)
    (tmp_path / "reward.json").unlink()
    (tmp_path / "reward.json").mkdir()  # not a file: reward.txt is read instead
    (tmp_path / "reward.txt").write_text("0.25\n")
    assert read_rewards(tmp_path) == ({"reward": 0.25}, {})
    (tmp_path / "reward.txt").write_bytes(b"\xff\xfe1")
    with pytest.raises(VerifierFailed):
        read_rewards(tmp_path)


def test_reward_json_strings_are_details_not_rewards(tmp_path: Path) -> None:
    (tmp_path / "reward.json").write_text('{"reward": 1, "note": "all 3 passed", "n": 3}')
    assert read_rewards(tmp_path) == ({"reward": 1.0, "n": 3.0}, {"note": "all 3 passed"})
    (tmp_path / "reward.json").write_text('{"note": "no number"}')
    with pytest.raises(VerifierFailed, match="no number"):
        read_rewards(tmp_path)


def test_the_primary_reward_must_be_a_number(tmp_path: Path) -> None:
    # "reward", else the file's first key: a detail there would hand the count to the next key
    for text in ('{"reward": "x", "format_ok": 1}', '{"reward": true, "n": 1}',
                 '{"score": null, "bonus": 1}'):  # fmt: skip
        (tmp_path / "reward.json").write_text(text)
        with pytest.raises(VerifierFailed, match="primary reward"):
            read_rewards(tmp_path)
    (tmp_path / "reward.json").write_text('{"score": 0.5, "note": "ok", "reward": 0}')
    assert read_rewards(tmp_path) == ({"score": 0.5, "reward": 0.0}, {"note": "ok"})
