"""Deduplication against the archive: exact hash, near-duplicate text, reference structure.

The archive is every task the run has accepted (and those that were seen and
rejected as duplicates are not added). Three keys per task: a hash of its files
(failure cases and task.toml's [metadata] aside), the 5-word shingles of its
instruction (Jaccard >= NEAR_JACCARD is a near duplicate), and a hash of the
reference solution's normalised structure (Python: the AST with names and
constants erased; shell: the command words of each line).
"""

from __future__ import annotations

import ast
import hashlib
import io
import re
import shlex
from pathlib import Path

from pydantic import BaseModel, Field

from crucible.generate.checks import Rejection, solution_texts

NEAR_JACCARD = 0.8
SHINGLE = 5


class ArchiveEntry(BaseModel):
    name: str
    exact: str
    shingles: list[str] = Field(default_factory=list)
    structure: str


def exact_hash(task_dir: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(task_dir.rglob("*")):
        rel = path.relative_to(task_dir).as_posix()
        if not path.is_file() or path.is_symlink() or rel.startswith("solution/failures/"):
            continue
        text = path.read_text(errors="replace")
        if rel == "task.toml":
            text = re.sub(r"(?ms)^\[metadata\].*?(?=^\[|\Z)", "", text)
        h.update(rel.encode() + b"\0" + text.encode("utf-8", "replace") + b"\0")
    return h.hexdigest()


def shingles(text: str, n: int = SHINGLE) -> set[str]:
    words = re.findall(r"\w+", text.lower())
    if len(words) < n:
        return {" ".join(words)} if words else set()
    return {" ".join(words[i : i + n]) for i in range(len(words) - n + 1)}


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


class _Erase(ast.NodeTransformer):
    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.copy_location(ast.Name(id="_", ctx=node.ctx), node)

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        return ast.copy_location(ast.Constant(value=type(node.value).__name__), node)

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.arg = "_"
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.name = "_"
        self.generic_visit(node)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        return node


def structure(text: str) -> str:
    """The shape of one solution file: Python's erased AST, else shell command words."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        tree = None
    if tree is not None and any(not isinstance(n, ast.Expr) for n in tree.body):
        return ast.dump(_Erase().visit(tree), annotate_fields=False)
    words = []
    for line in io.StringIO(text):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            tokens = line.split()
        words.append(" ".join(t for t in tokens[:1]))
    return "\n".join(words)


def structure_hash(task_dir: Path) -> str:
    parts = [structure(t) for t in solution_texts(task_dir)]
    return hashlib.sha256("\n--\n".join(parts).encode()).hexdigest()


def entry_of(name: str, task_dir: Path) -> ArchiveEntry:
    instruction = (task_dir / "instruction.md").read_text(errors="replace")
    return ArchiveEntry(
        name=name,
        exact=exact_hash(task_dir),
        shingles=sorted(shingles(instruction)),
        structure=structure_hash(task_dir),
    )


def find_duplicate(entry: ArchiveEntry, archive: list[ArchiveEntry]) -> Rejection | None:
    """The first archived task `entry` duplicates: same files, near-same instruction,
    or (with a near instruction, Jaccard >= half the bar) the same reference structure."""
    mine = set(entry.shingles)
    for other in archive:
        if other.name == entry.name:
            continue
        if other.exact == entry.exact:
            return Rejection(reason="duplicate", message=f"same files as {other.name}")
        sim = jaccard(mine, set(other.shingles))
        if sim >= NEAR_JACCARD:
            return Rejection(
                reason="duplicate", message=f"instruction {sim:.2f} Jaccard-similar to {other.name}"
            )
        if other.structure == entry.structure and sim >= NEAR_JACCARD / 2:
            return Rejection(
                reason="duplicate",
                message=f"same reference structure as {other.name} (instruction {sim:.2f} similar)",
            )
    return None
