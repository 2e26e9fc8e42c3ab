"""The manifest of a dataset folder written by `crucible dataset split` or `dataset mix`.

It sits at the folder's top as `crucible-dataset.json`, beside the plain Harbor task folders
it lists. Each entry names a task (its folder relative to the manifest, its name and digest),
the part it is in (`train`/`val` for a split, the source's name for a mix) and its lineage
as the generate loop writes it in task.toml `[metadata]` (`root`, `parent`, `operator`,
`generation`, `source`, `category`, `mode`). Naming the manifest file where a task folder is
expected (`crucible run|serve|dataset export PATH/crucible-dataset.json`) loads the tasks it
lists, each refused if its digest differs from the one recorded (tasks/dataset.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MANIFEST_NAME = "crucible-dataset.json"
MANIFEST_SCHEMA = 1


class Lineage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    root: str | None = None
    parent: str | None = None
    operator: str | None = None
    generation: int | None = None
    source: str | None = None
    category: str | None = None
    mode: str | None = None


class ManifestTask(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    path: str  # relative to the manifest's folder, POSIX separators
    digest: str
    part: str  # train | val (split), or the source's name (mix)
    group: str | None = None  # split: the group that moved as one (lineage, source workflow)
    lineage: Lineage = Field(default_factory=Lineage)


class NearDuplicateCheck(BaseModel):
    model_config = ConfigDict(extra="forbid")

    threshold: float
    pairs_checked: int
    found: list[tuple[str, str, float]] = Field(default_factory=list)


class MixSource(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    path: str
    weight: float
    available: int
    count: int


class DatasetManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = MANIFEST_SCHEMA
    kind: Literal["split", "mix"]
    seed: int
    val: float | None = None  # split: the validation fraction asked for
    sources: list[MixSource] = Field(default_factory=list)  # mix
    near_duplicates: NearDuplicateCheck | None = None  # split: the cross-split check
    tasks: list[ManifestTask]

    def part(self, name: str) -> list[ManifestTask]:
        return [t for t in self.tasks if t.part == name]
