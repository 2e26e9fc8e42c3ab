"""Training datasets: where a run's prompts come from, as rows of chat messages.

    HFDataset(path="data/", columns={"prompt": "question", "label": "answer"},
              system_prompt="Answer in rhyme.", prompt_template="Q: {prompt}")
    JSONLDataset(path="prompts.jsonl")
    TaskSetDataset(paths=["examples/tasks"])          # crucible tasks, as `dataset export`

Every dataset turns `load()` (raw records: dicts) into `rows()`: a `Row` each, whose prompt
is chat messages (the system prompt, then the user's text rendered from
`prompt_template`), whose label is the `label` column and whose metadata is every other
column. Override `load()` for any other source. `columns` maps crucible's names (`prompt`,
`label`) to the source's; `prompt_template` is formatted with the record's mapped columns
(`{prompt}`, `{label}` and any source column); `chat_template` (Jinja) replaces the
tokenizer's where a recipe renders the chat itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

PROMPT, LABEL = "prompt", "label"


class Row(BaseModel):
    prompt: list[dict[str, str]]  # chat messages: [{"role": ..., "content": ...}]
    text: str  # the user's message as rendered
    label: Any = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class Dataset(BaseModel):
    """A set of prompts; subclass and override `load()` for another source."""

    model_config = ConfigDict(extra="forbid")

    columns: dict[str, str] = Field(default_factory=dict)  # crucible name -> source column
    system_prompt: str | None = None
    prompt_template: str = "{prompt}"
    chat_template: str | None = None
    limit: int | None = None  # at most this many rows (the first ones)

    def load(self) -> list[dict[str, Any]]:
        """The raw records, one dict each."""
        raise NotImplementedError(f"{type(self).__name__} must implement load()")

    def describe(self) -> str:
        return type(self).__name__

    def rows(self) -> list[Row]:
        records = self.load()
        if self.limit is not None:
            records = records[: self.limit]
        out = [self.to_row(r, i) for i, r in enumerate(records)]
        if not out:
            raise ValueError(f"dataset {self.describe()} has no rows")
        return out

    def to_row(self, record: dict[str, Any], index: int = 0) -> Row:
        source = {PROMPT: self.columns.get(PROMPT, PROMPT), LABEL: self.columns.get(LABEL, LABEL)}
        if source[PROMPT] not in record:
            raise ValueError(
                f"dataset {self.describe()}: record {index} has no {source[PROMPT]!r} column "
                f"(it has {sorted(record)}); map one with columns={{'prompt': NAME}}"
            )
        prompt = record[source[PROMPT]]
        values = {k: v for k, v in record.items() if isinstance(k, str)}
        values[PROMPT], values[LABEL] = prompt, record.get(source[LABEL])
        messages: list[dict[str, str]] = []
        if isinstance(prompt, list):  # already chat messages (`dataset export` rows)
            messages = [{"role": str(m["role"]), "content": str(m["content"])} for m in prompt]
            text = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
            if self.system_prompt and not any(m["role"] == "system" for m in messages):
                messages.insert(0, {"role": "system", "content": self.system_prompt})
        else:
            try:
                text = self.prompt_template.format(**values)
            except (KeyError, IndexError) as exc:
                raise ValueError(
                    f"dataset {self.describe()}: prompt_template names {exc} that record "
                    f"{index} does not have"
                ) from exc
            if self.system_prompt:
                messages.append({"role": "system", "content": self.system_prompt})
            messages.append({"role": "user", "content": text})
        meta = {k: v for k, v in record.items() if k not in (source[PROMPT], source[LABEL])}
        return Row(prompt=messages, text=text, label=values[LABEL], metadata=meta)


class JSONLDataset(Dataset):
    """A JSON Lines file, one record (an object) a line."""

    path: Path

    def describe(self) -> str:
        return str(self.path)

    def load(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        with self.path.open(encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                rec = json.loads(line)
                if not isinstance(rec, dict):
                    raise ValueError(f"{self.path}:{n}: a record is a JSON object")
                out.append(rec)
        return out


class HFDataset(Dataset):
    """A Hugging Face dataset: a local folder or data files loaded with `datasets`, or a
    hub repo (only where the hub is reachable: nothing is fetched in tests)."""

    path: str  # a folder, a data file, a saved dataset, or a hub repo id
    name: str | None = None  # the hub dataset's configuration
    split: str = "train"
    data_files: list[str] | None = None

    def describe(self) -> str:
        return self.path + (f":{self.name}" if self.name else "") + f"[{self.split}]"

    def load(self) -> list[dict[str, Any]]:
        import datasets

        local = Path(self.path)
        if local.is_dir() and (local / "dataset_info.json").exists():  # save_to_disk
            ds: Any = datasets.load_from_disk(str(local))
            ds = ds[self.split] if isinstance(ds, datasets.DatasetDict) else ds
        elif local.is_file():
            kind = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
            builder = kind.get(local.suffix)
            if builder is None:
                raise ValueError(f"{local}: not a .jsonl, .json, .parquet or .csv file")
            ds = datasets.load_dataset(builder, data_files=str(local), split=self.split)
        else:
            ds = datasets.load_dataset(self.path, self.name, split=self.split,
                                       data_files=self.data_files)  # fmt: skip
        return [dict(r) for r in ds]


class TaskSetDataset(Dataset):
    """crucible tasks as prompts, as `crucible dataset export` makes them: each row carries
    `task_id` and `task_hash`, so `GraderReward` grades a response with its own task."""

    paths: list[Path]
    include: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)

    def describe(self) -> str:
        return ",".join(str(p) for p in self.paths)

    def load(self) -> list[dict[str, Any]]:
        from crucible.export.dataset import load_rows

        rows = load_rows(self.paths, include=self.include, exclude=self.exclude,
                         system=self.system_prompt)  # fmt: skip
        out = []
        for r in rows:
            rec = r.model_dump(mode="json")
            if self.prompt_template != "{prompt}":  # render the instruction through it
                user = rec["prompt"][-1]
                user["content"] = self.prompt_template.format(prompt=user["content"])
            out.append(rec)
        return out
