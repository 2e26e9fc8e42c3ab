"""The reward library (crucible.train.rewards) and the rhyme example's reward: a real rhyme
scores above prose, both known hacks (self-rhyme, one-word lines) score below a real
rhyme, an off-topic rhyme is capped by the gate, and each fallback is recorded."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from crucible.train.config import load_config
from crucible.train.reward import Sample, score
from crucible.train.rewards import Embedder, Gate, RhymeReward, rhyme_score
from crucible.train.rewards.rhyme import ending_of, rhymes

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "train" / "rhyme" / "config.py"

POEM = """The sea rolls in beneath the moon,
its silver waves will vanish soon.
The gulls cry out above the foam,
and sailors dream of coming home."""
PROSE = """The sea is very large and it covers most of the planet.
Many fish live in it and sailors cross it on their ships."""
SELF_RHYME = """The sea is calm and dark at night,
I watch the sea at night, at night,
the waves are silver in the night,
I love the sea at night, the night."""
ONE_WORD = "sea\nme\nsee\nbe\nfree\nglee"
OFF_TOPIC = """My taxes are due in the spring,
the forms are a terrible thing.
I file them by hand every year,
and hope that the errors are clear."""


def run(reward: RhymeReward, text: str, topic: str = "the sea") -> dict[str, float]:
    total, comps = asyncio.run(score(reward, None, Sample(prompt="p", response=text, label=topic)))
    return {"total": total, **comps}


@pytest.fixture(scope="module")
def lexical() -> RhymeReward:
    return RhymeReward(min_words=4, min_lines=4, embedder=Embedder(Path("/nonexistent")))


@pytest.fixture(scope="module")
def real() -> RhymeReward:
    reward = RhymeReward(min_words=4, min_lines=4)
    assert reward.embedder.available, reward.embedder.error  # the packaged MiniLM loads offline
    return reward


def check_ranking(reward: RhymeReward, fallback: float) -> None:
    poem, prose = run(reward, POEM), run(reward, PROSE)
    assert poem["total"] == pytest.approx(1.0) and poem["relevance_fallback"] == fallback
    assert poem["gate"] == 1.0 and poem["relevance"] > 0.3
    assert prose["total"] < poem["total"] and prose["rhyme"] == 0.0
    hack = run(reward, SELF_RHYME)
    assert hack["total"] < poem["total"] and hack["rhyme"] == 0.0 and hack["self_rhymes"] > 0
    short = run(reward, ONE_WORD)
    assert short["total"] < poem["total"] and short["short_lines"] == 6
    off = run(reward, OFF_TOPIC)
    assert off["rhyme"] == 1.0 and off["gate"] == 0.0 and off["total"] == pytest.approx(0.1)


def test_a_rhyme_beats_prose_and_both_hacks_lexical(lexical: RhymeReward) -> None:
    check_ranking(lexical, fallback=1.0)


@pytest.mark.slow  # loads torch and the packaged MiniLM (a minute on a loaded machine)
def test_a_rhyme_beats_prose_and_both_hacks_with_the_embedder(real: RhymeReward) -> None:
    check_ranking(real, fallback=0.0)


def test_the_lexical_fallback_is_recorded_when_the_embedder_is_unavailable(
    tmp_path: Path,
) -> None:
    reward = RhymeReward(min_lines=4, embedder=Embedder(tmp_path / "no-model"))
    got = run(reward, POEM)
    assert got["relevance_fallback"] == 1.0 and got["relevance"] == 1.0  # "sea" is used
    assert "no embedding model" in (reward.embedder.error or "")


def test_true_rhymes_only() -> None:
    def r(a: str, b: str) -> bool:
        return rhymes(ending_of(a), ending_of(b))

    assert r("moon", "soon") and r("foam", "home") and r("night", "light")
    for a, b in (("night", "night"), ("light", "delight"), ("there", "their"),
                 ("play", "replay"), ("walk", "walks"), ("Night", "night")):  # fmt: skip
        assert not r(a, b), (a, b)
    assert ending_of("delight").rhyme == ("AY", "T")  # last stressed vowel onward


def test_unknown_words_fall_back_to_spelling_and_say_so() -> None:
    got = rhyme_score("the lamps are burning through the night\nthe pixies dance in zorblight",
                      min_lines=2)  # fmt: skip
    assert got.score == 1.0 and got.fallback == pytest.approx(0.5)
    assert not ending_of("zorblight").from_dictionary and ending_of("night").from_dictionary


def test_the_line_length_and_the_options_come_from_args() -> None:
    text = "the cat\nthe hat"
    assert rhyme_score(text, min_words=4).score == 0.0
    assert rhyme_score(text, min_words=2).score == 1.0
    reward = RhymeReward(min_lines=2, embedder=Embedder(Path("/nonexistent")))
    args = type("Args", (), {"min_words": 2, "threshold": 0.0})()
    got = asyncio.run(reward(args, Sample(prompt="p", response=text, label="a cat")))
    assert got["rhyme"] == 1.0 and got["gate"] == 1.0
    with pytest.raises(ValueError):
        Gate(threshold=2.0)


def test_the_example_config_loads_with_the_library_reward() -> None:
    config = load_config(EXAMPLE)
    rows = config.dataset.rows()
    assert len(rows) >= 8 and rows[0].label and "rhyming" in rows[0].text
    [reward] = config.rewards()
    assert isinstance(reward, RhymeReward) and reward.min_words >= 4


@pytest.mark.slow  # TRL, torch and the embedder: about two minutes on a loaded machine
def test_the_rhyme_example_smokes_on_cpu(tmp_path: Path, real: RhymeReward) -> None:
    """`crucible train smoke examples/train/rhyme/config.py`: one step on the tiny local
    model, every sample scored by the library reward with the embedder (no fallback)."""
    import json

    from typer.testing import CliRunner

    from crucible.cli.main import app

    pytest.importorskip("trl")
    res = CliRunner().invoke(app, ["train", "smoke", str(EXAMPLE), "--jobs-dir",
                                   str(tmp_path), "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["state"] == "completed" and out["samples"]
    for s in out["samples"]:
        assert {"rhyme", "relevance", "gate", "short_lines", "self_rhymes"} <= set(s["components"])
        assert s["components"]["relevance_fallback"] == 0.0
    [step] = out["reward_per_step"]
    assert "rhyme" in step["components"]
