"""Datasets (JSONL, a local Hugging Face dataset, crucible tasks through `dataset export`,
an overridden load()) as rows of chat messages, and rewards in slime's signature: a number,
or components with a total; what is not a reward is refused."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.answer_tasks import answer_task

from crucible.train.dataset import Dataset, HFDataset, JSONLDataset, TaskSetDataset
from crucible.train.reward import RewardError, Sample, as_args, score, split_reward


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_jsonl_rows_map_columns_through_the_template_and_system_prompt(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "d.jsonl", [{"q": "sky?", "a": "blue", "topic": "nature"}])
    ds = JSONLDataset(path=p, columns={"prompt": "q", "label": "a"}, system_prompt="Rhyme.",
                      prompt_template="[{topic}] {prompt}")  # fmt: skip
    [row] = ds.rows()
    assert row.prompt == [{"role": "system", "content": "Rhyme."},
                          {"role": "user", "content": "[nature] sky?"}]  # fmt: skip
    assert (row.text, row.label, row.metadata) == ("[nature] sky?", "blue", {"topic": "nature"})


def test_a_missing_column_or_template_name_is_a_clear_error(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "d.jsonl", [{"question": "x"}])
    with pytest.raises(ValueError, match="no 'prompt' column"):
        JSONLDataset(path=p).rows()
    with pytest.raises(ValueError, match="prompt_template names"):
        JSONLDataset(path=p, columns={"prompt": "question"}, prompt_template="{nope}").rows()


def test_hf_dataset_loads_a_local_file_and_a_saved_dataset(tmp_path: Path) -> None:
    import datasets

    p = write_jsonl(
        tmp_path / "d.jsonl", [{"prompt": "a", "label": 1}, {"prompt": "b", "label": 2}]
    )
    assert [r.text for r in HFDataset(path=str(p)).rows()] == ["a", "b"]
    saved = tmp_path / "saved"
    datasets.Dataset.from_dict({"text": ["c"], "y": [3]}).save_to_disk(str(saved))
    [row] = HFDataset(path=str(saved), columns={"prompt": "text", "label": "y"}).rows()
    assert (row.text, row.label) == ("c", 3)


def test_load_can_be_overridden(tmp_path: Path) -> None:
    class Made(Dataset):
        def load(self) -> list[dict[str, Any]]:
            return [{"prompt": f"n={i}"} for i in range(5)]

    assert [r.text for r in Made(limit=2).rows()] == ["n=0", "n=1"]


def test_task_set_rows_carry_the_task_for_the_grader(tmp_path: Path) -> None:
    answer_task(tmp_path / "tasks", "add", "What is 2 + 3?", "5")
    [row] = TaskSetDataset(paths=[tmp_path / "tasks"], system_prompt="One word.").rows()
    assert row.prompt[0] == {"role": "system", "content": "One word."}
    assert row.text.startswith("What is 2 + 3?") and row.label == "5"
    assert row.metadata["task_id"] == "add" and row.metadata["task_hash"]


async def test_rewards_a_number_components_with_a_total_and_sync_functions() -> None:
    s = Sample(prompt="p", response="r", label="l")

    async def number(args: Any, sample: Sample, **kw: Any) -> float:
        return 0.5 * args.scale

    def parts(args: Any, sample: Sample, **kw: Any) -> dict[str, float]:
        return {"total": 0.7, "rhyme": 1.0, "relevance": 0.4}

    assert await score(number, as_args({"scale": 2}), s) == (1.0, {})
    assert await score(parts, as_args(None), s) == (0.7, {"rhyme": 1.0, "relevance": 0.4})


@pytest.mark.parametrize("bad", [math.nan, math.inf, "1", True, None, {"rhyme": 1.0},
                                 {"total": 1.0, "x": math.nan}])  # fmt: skip
def test_what_is_not_a_reward_is_refused(bad: Any) -> None:
    with pytest.raises(RewardError):
        split_reward(bad)
