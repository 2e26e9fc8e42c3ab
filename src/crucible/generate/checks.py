"""Static checks of a written proposal, before any sandbox: schema, Dockerfile, leaks, contracts.

Each check returns a `Rejection` (reason, message) or None. The reasons are the
stable names the report counts: invalid_schema, unknown_category, no_failure_case,
hostile_dockerfile, leaked_solution, contracts_unreached.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from crucible.tasks.loader import check_task

# The base images a generated task may build FROM (the ones the machine has; a task
# author, here a model, never picks what is pulled or run at build time).
DEFAULT_BASE_IMAGES = ("debian:bookworm-slim",)
MIN_LEAK_CHARS = 16  # a solution line this long, found in the instruction, is a leak

_ALLOWED_INSTR = frozenset({"FROM", "WORKDIR", "ENV", "RUN", "COPY", "USER", "CMD", "LABEL"})


class Rejection(BaseModel):
    reason: str
    message: str


def task_metadata(task_dir: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads((task_dir / "task.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    meta = data.get("metadata")
    return meta if isinstance(meta, dict) else {}


def check_schema(task_dir: Path) -> Rejection | None:
    check = check_task(task_dir)  # no host variable may be read (NO_HOST)
    if check.task is None or check.errors:
        why = "; ".join(f"{p.location()}: {p.message}" for p in check.errors) or "not a task"
        return Rejection(reason="invalid_schema", message=why[:2000])
    return None


def check_dockerfile(
    task_dir: Path, bases: Iterable[str] = DEFAULT_BASE_IMAGES
) -> Rejection | None:
    """One stage FROM an allowed base, only plain instructions: no ADD (URLs, archives),
    no RUN --mount/--network/--security, no COPY --from, no compose file, no image of
    the task's own choosing."""
    allowed = set(bases)
    env = task_dir / "environment"
    problems: list[str] = []
    for extra in ("docker-compose.yaml", "docker-compose.yml", "compose.yaml"):
        if (env / extra).exists():
            problems.append(f"environment/{extra}: compose files are not allowed")
    try:
        toml = tomllib.loads((task_dir / "task.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        toml = {}
    image = (toml.get("environment") or {}).get("docker_image")
    if image is not None and image not in allowed:
        problems.append(f"docker_image {image!r} is not an allowed base")
    dockerfile = env / "Dockerfile"
    text = dockerfile.read_text(errors="replace") if dockerfile.is_file() else ""
    if not text and image is None:
        problems.append("no environment/Dockerfile and no docker_image")
    froms = 0
    for line in _logical_lines(text):
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word not in _ALLOWED_INSTR:
            problems.append(f"instruction {word} is not allowed")
        elif word == "FROM":
            froms += 1
            if rest.split()[0:1] != [b for b in rest.split()[0:1] if b in allowed]:
                problems.append(
                    f"FROM {rest.strip()[:80]!r}: not an allowed base {sorted(allowed)}"
                )
        elif re.search(r"--(mount|network|security|from|privileged)", rest):
            problems.append(f"{word} {rest.strip()[:80]!r}: flag not allowed")
        elif "$" in rest and word in ("RUN", "COPY", "ENV"):
            problems.append(f"{word} {rest.strip()[:80]!r}: variables are not allowed")
    if froms > 1:
        problems.append("more than one FROM (stages are not allowed)")
    if problems:
        return Rejection(reason="hostile_dockerfile", message="; ".join(problems)[:2000])
    return None


def _logical_lines(text: str) -> list[str]:
    out, cur = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not cur and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        out.append((cur + line).strip())
        cur = ""
    if cur.strip():
        out.append(cur.strip())
    return out


def solution_texts(task_dir: Path) -> list[str]:
    """The reference solution's files (failure cases left out)."""
    sol = task_dir / "solution"
    return [
        p.read_text(errors="replace")
        for p in sorted(sol.rglob("*"))
        if p.is_file() and not p.is_symlink() and "failures" not in p.relative_to(sol).parts
    ]


def check_leak(task_dir: Path) -> Rejection | None:
    """A line of the reference solution, written out in the instruction, gives it away."""
    instruction = " ".join((task_dir / "instruction.md").read_text(errors="replace").split())
    for text in solution_texts(task_dir):
        for raw in text.splitlines():
            line = " ".join(raw.split())
            if len(line) < MIN_LEAK_CHARS or line.startswith(("#", "set -")):
                continue
            if line in instruction:
                return Rejection(
                    reason="leaked_solution",
                    message=f"the instruction holds the solution's line {line[:120]!r}",
                )
    return None


def declared_contracts(task_dir: Path) -> list[str]:
    value = task_metadata(task_dir).get("contracts", [])
    return [str(c) for c in value] if isinstance(value, list) else []


def reached_contracts(task_dir: Path) -> list[str]:
    """The contracts the reference solution's Python reaches (crucible.contracts)."""
    from crucible.contracts.api import analyze_paths, python_files
    from crucible.contracts.reach import reached_ids

    sol = task_dir / "solution"
    files = [p for p in python_files([sol]) if "failures" not in p.relative_to(sol).parts]
    if not files:
        return []
    found: set[str] = set()
    for _, analysis in analyze_paths(files):
        found |= reached_ids(analysis)
    return sorted(found)


def check_contracts(task_dir: Path) -> Rejection | None:
    declared = set(declared_contracts(task_dir))
    if not declared:
        return None
    try:
        reached = set(reached_contracts(task_dir))
    except Exception as exc:  # a reference the analyzer cannot read reaches nothing
        return Rejection(reason="contracts_unreached", message=f"analysis failed: {exc}"[:500])
    missing = declared - reached
    if missing:
        return Rejection(
            reason="contracts_unreached",
            message=f"declared contracts the reference never reaches: {sorted(missing)}",
        )
    return None


def static_checks(
    task_dir: Path, category: str, categories: list[str], failures: list[str]
) -> Rejection | None:
    """The first static check the written task fails, or None."""
    if category not in categories:
        return Rejection(
            reason="unknown_category", message=f"category {category!r} is not asked for"
        )
    for check in (check_dockerfile, check_schema, check_leak, check_contracts):
        if (rej := check(task_dir)) is not None:
            return rej
    if not failures:
        return Rejection(reason="no_failure_case", message="no solution/failures/<name>.sh")
    return None
