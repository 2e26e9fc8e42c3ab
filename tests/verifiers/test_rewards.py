"""Reward files, Harbor's way: reward.json (flat map of finite numbers) wins over reward.txt."""

from __future__ import annotations

import pytest

from crucible.errors import VerifierFailed
from crucible.verifiers.rewards import parse_reward_json, parse_reward_txt


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
