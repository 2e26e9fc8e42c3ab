"""`crucible dataset split DIR --val F -o OUT`: a train/validation split that leaks nothing.

Tasks are grouped before they are assigned, and a group moves as one:
- a lineage: tasks with the same `root` in `[metadata]`, and a task with its `parent`;
- a source workflow: tasks with the same `source` (a mined file, a seed-pack line);
- near-duplicates: tasks whose instruction and normalised solution are at least
  `threshold` similar (tasks/neardup.py).
Groups are shuffled with `seed` and taken into validation while they fit the budget
(round(F * tasks)); the split is deterministic for a given folder and seed. Tasks named by
`val_include` (globs) are put in validation first, and refused if their group holds others.

Then the rules are checked on the result, whatever made it: no root, source or parent
link straddles the two parts, and no pair across them is a near-duplicate. A split that
breaks one, or that cannot give validation any task, is refused (CurateError, exit 1,
`split_refused`) with what broke and why.
"""

from __future__ import annotations

import fnmatch
import random
from collections.abc import Sequence
from pathlib import Path

from crucible.errors import ExitCode
from crucible.records.dataset_manifest import (
    DatasetManifest,
    Lineage,
    NearDuplicateCheck,
)
from crucible.tasks.curate import CurateError, lineage_of, load_valid, write_dataset
from crucible.tasks.models import Task
from crucible.tasks.neardup import (
    DEFAULT_THRESHOLD,
    near_pairs,
    near_pairs_within,
    shingles,
    task_text,
)

REFUSED = "split_refused"
TRAIN, VAL = "train", "val"


class _Groups:
    """Union-find over task names."""

    def __init__(self, names: Sequence[str]) -> None:
        self.up = {n: n for n in names}

    def find(self, n: str) -> str:
        while self.up[n] != n:
            self.up[n] = self.up[self.up[n]]
            n = self.up[n]
        return n

    def join(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.up[max(ra, rb)] = min(ra, rb)


def plan_split(
    tasks: Sequence[Task],
    val: float,
    *,
    seed: int = 0,
    val_include: Sequence[str] = (),
    threshold: float = DEFAULT_THRESHOLD,
) -> tuple[dict[str, str], dict[str, str], NearDuplicateCheck]:
    """(task name -> part, task name -> group, the cross-split check) or CurateError."""
    if not 0.0 < val < 1.0:
        raise CurateError(ExitCode.USAGE, "usage", f"--val {val}: a fraction between 0 and 1")
    names = [t.name for t in tasks]
    lineage = {t.name: lineage_of(t) for t in tasks}
    sh = {t.name: shingles(task_text(t.path, t.instruction)) for t in tasks}
    groups = _Groups(names)
    _join_by_links(groups, lineage)
    for a, b, _sim in near_pairs_within(sorted(sh.items()), threshold):
        groups.join(a, b)
    members: dict[str, list[str]] = {}
    for n in sorted(names):
        members.setdefault(groups.find(n), []).append(n)

    budget = max(1, round(val * len(names)))
    part = {n: TRAIN for n in names}
    forced = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in val_include)]
    for n in forced:
        part[n] = VAL
    if not forced:
        order = sorted(members)
        random.Random(seed).shuffle(order)
        taken = 0
        for g in order:
            if taken + len(members[g]) <= budget:
                for n in members[g]:
                    part[n] = VAL
                taken += len(members[g])
        if taken == 0:
            smallest = min(len(m) for m in members.values())
            raise CurateError(ExitCode.ERROR, REFUSED,
                              f"no validation split of {budget} task(s) keeps every group whole: "
                              f"the smallest group (a lineage, a source workflow or "
                              f"near-duplicates) holds {smallest}",
                              hint="raise --val, or split a folder with more lineages")  # fmt: skip
    if all(p == VAL for p in part.values()):
        raise CurateError(ExitCode.ERROR, REFUSED, "every task would be in validation")
    check = check_split(tasks, part, lineage, sh, threshold)
    return part, {n: groups.find(n) for n in names}, check


def _join_by_links(groups: _Groups, lineage: dict[str, Lineage]) -> None:
    by_key: dict[tuple[str, str], str] = {}
    for name in sorted(lineage):
        lin = lineage[name]
        for key, value in (("root", lin.root), ("source", lin.source), ("root", name)):
            if value is None:
                continue
            first = by_key.setdefault((key, value), name)
            groups.join(first, name)
        if lin.parent is not None and lin.parent in lineage:
            groups.join(lin.parent, name)


def check_split(
    tasks: Sequence[Task],
    part: dict[str, str],
    lineage: dict[str, Lineage],
    sh: dict[str, frozenset[int]],
    threshold: float,
) -> NearDuplicateCheck:
    """The leakage rules on a finished split; CurateError (split_refused) naming the first
    breaks, else the record of the near-duplicate check."""
    broken: list[str] = []
    for key in ("root", "source"):
        seen: dict[str, set[str]] = {}
        for n, lin in lineage.items():
            value = getattr(lin, key) or (n if key == "root" else None)
            if value is not None:
                seen.setdefault(value, set()).add(part[n])
        for value, parts in sorted(seen.items()):
            if len(parts) > 1:
                what = "lineage (root)" if key == "root" else "source workflow"
                broken.append(f"the {what} {value!r} would straddle train and val")
    for n in sorted(lineage):
        cur, hops = lineage[n].parent, 0
        while part[n] == VAL and cur is not None and cur in part and hops < len(part):
            if part[cur] == TRAIN:
                broken.append(f"val task {n!r} is a hardened version of train task {cur!r}")
                break
            cur, hops = lineage[cur].parent, hops + 1
    train = [(t.name, sh[t.name]) for t in tasks if part[t.name] == TRAIN]
    valid = [(t.name, sh[t.name]) for t in tasks if part[t.name] == VAL]
    found, checked = near_pairs(valid, train, threshold)
    for a, b, sim in found[:20]:
        broken.append(f"val task {a!r} and train task {b!r} are near-duplicates ({sim:.2f})")
    if broken:
        more = f" (and {len(broken) - 5} more)" if len(broken) > 5 else ""
        raise CurateError(ExitCode.ERROR, REFUSED,
                          "the split would leak: " + "; ".join(broken[:5]) + more,
                          hint="tasks of one lineage, source workflow or near-duplicate "
                          "group go to one side together")  # fmt: skip
    return NearDuplicateCheck(threshold=threshold, pairs_checked=checked, found=[])


def split_dataset(
    src: Path,
    val: float,
    out: Path,
    *,
    seed: int = 0,
    val_include: Sequence[str] = (),
    threshold: float = DEFAULT_THRESHOLD,
    force: bool = False,
    link: bool = False,
) -> DatasetManifest:
    """Split the tasks under `src` into OUT/train/ and OUT/val/ with the manifest beside them."""
    tasks = load_valid([src])
    if len(tasks) < 2:
        raise CurateError(ExitCode.ERROR, REFUSED, "a split needs at least two tasks")
    part, group, check = plan_split(tasks, val, seed=seed, val_include=val_include,
                                    threshold=threshold)  # fmt: skip
    placed = [(t, part[t.name], group[t.name]) for t in tasks]
    return write_dataset(out, placed, force=force, link=link, kind="split", seed=seed, val=val,
                         near_duplicates=check)  # fmt: skip
