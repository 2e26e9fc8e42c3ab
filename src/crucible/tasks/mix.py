"""`crucible dataset mix NAME=DIR:WEIGHT ... -o OUT`: a curriculum from named sources.

The weights are shares (45, 45, 10 or 0.45, 0.45, 0.1 alike). The size is `total`, or by
default the largest curriculum that keeps the shares without repeating a task; counts per
source are the shares of that size, rounded by largest remainder (ties to the earlier
source), never more than a source holds. Each source's tasks are drawn with a generator
seeded by `seed` and the source's name, so a mix is the same for the same inputs, and adding
a source leaves the others' draws alone. The tasks are written to OUT/<NAME>/<task>/ (copied,
or hard-linked with `link`) with the manifest beside them.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from crucible.errors import ExitCode
from crucible.records.dataset_manifest import DatasetManifest, MixSource
from crucible.tasks.curate import CurateError, load_valid, write_dataset

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


@dataclass(frozen=True)
class SourceSpec:
    name: str
    path: Path
    weight: float


def parse_source(spec: str) -> SourceSpec:
    """NAME=DIR:WEIGHT (the last colon separates the weight, so DIR may hold colons)."""
    name, eq, rest = spec.partition("=")
    path, colon, weight = rest.rpartition(":")
    if not eq or not colon or not path:
        raise CurateError(ExitCode.USAGE, "usage", f"{spec!r}: write a source as NAME=DIR:WEIGHT")
    if not _NAME.match(name):
        raise CurateError(ExitCode.USAGE, "usage",
                          f"{spec!r}: a source name is lowercase letters, digits, - and _")  # fmt: skip
    try:
        w = float(weight)
    except ValueError:
        w = math.nan
    if not math.isfinite(w) or w <= 0:
        raise CurateError(ExitCode.USAGE, "usage", f"{spec!r}: the weight is a positive number")
    return SourceSpec(name=name, path=Path(path), weight=w)


def counts(
    weights: Sequence[float],
    available: Sequence[int],
    total: int | None,
    names: Sequence[str] = (),
) -> list[int]:
    """How many tasks each source gives: `total` split by the weights (largest remainder)."""
    shares = [w / sum(weights) for w in weights]
    if total is None:
        total = min(math.floor(a / s + 1e-9) for a, s in zip(available, shares, strict=True))
    exact = [total * s for s in shares]
    out = [math.floor(x + 1e-9) for x in exact]
    order = sorted(range(len(exact)), key=lambda i: (-(exact[i] - out[i]), i))
    for i in order[: total - sum(out)]:
        out[i] += 1
    for i, (n, a) in enumerate(zip(out, available, strict=True)):
        if n > a:
            raise CurateError(ExitCode.ERROR, "mix_refused",
                              f"source {names[i] if names else i + 1} holds {a} task(s), and {total} at these weights "
                              f"takes {n} from it",
                              hint="lower --total, or leave it out for the largest mix that "
                              "repeats no task")  # fmt: skip
    return out


def mix_datasets(
    specs: Sequence[SourceSpec],
    out: Path,
    *,
    total: int | None = None,
    seed: int = 0,
    force: bool = False,
    link: bool = False,
) -> DatasetManifest:
    if not specs:
        raise CurateError(ExitCode.USAGE, "usage", "name at least one source NAME=DIR:WEIGHT")
    dupes = sorted({s.name for s in specs if [x.name for x in specs].count(s.name) > 1})
    if dupes:
        raise CurateError(
            ExitCode.USAGE, "usage", f"source name(s) given twice: {', '.join(dupes)}"
        )
    if total is not None and total < 1:
        raise CurateError(ExitCode.USAGE, "usage", "--total is at least 1")
    pools = [load_valid([s.path]) for s in specs]
    n = counts([s.weight for s in specs], [len(p) for p in pools], total, [s.name for s in specs])
    picked = []
    owner: dict[str, str] = {}
    for spec, pool, k in zip(specs, pools, n, strict=True):
        chosen = random.Random(f"{seed}:{spec.name}").sample(sorted(pool, key=lambda t: t.name), k)
        for t in sorted(chosen, key=lambda t: t.name):
            if t.name in owner:
                raise CurateError(ExitCode.ERROR, "mix_refused",
                                  f"task {t.name!r} is in both {owner[t.name]} and {spec.name}",
                                  hint="a task's name is its identity: rename one")  # fmt: skip
            owner[t.name] = spec.name
            picked.append((spec.name, t))
    sources = [MixSource(name=s.name, path=str(s.path), weight=s.weight, available=len(p),
                         count=k) for s, p, k in zip(specs, pools, n, strict=True)]  # fmt: skip
    placed = [(t, name, None) for name, t in picked]
    return write_dataset(out, placed, force=force, link=link, kind="mix", seed=seed,
                         sources=sources)  # fmt: skip
