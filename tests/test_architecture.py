"""The import rules of DESIGN.md ("Layout of the package"), checked on the source.

Every `import` counts: module level, inside functions, and under TYPE_CHECKING
(a type-only import still ties the two files together). The rules:
- each module belongs to a unit of LAYERS (the longest matching prefix); a new
  package must be placed in the table before it can be imported from;
- a subpackage placed apart from its parent sits at or below its parent's layer,
  never above (else the table could lift sandboxes/conformance/ over verifiers/ again);
- a unit imports only from units in lower layers, or from itself: never upward,
  and never sideways into another unit of its own layer;
- the engine never imports the packages that drive it (DRIVERS);
- no circles between files: the file-level import graph has no cycle;
- no source file is longer than MAX_LINES, every package's __init__.py opens with
  a one-line docstring.
The checks run on a tiny fake package first, so each one is shown to fail.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "crucible"

# Lowest first. A unit is a package under crucible/ (or a subpackage, written with a dot,
# placed apart from its parent, never above it). Units of one layer are independent of
# each other. The conformance checks that grade with the verifier are verifiers/
# conformance.py: sandboxes/conformance/ is the providers' suite and imports no verifier.
LAYERS: list[tuple[str, ...]] = [
    ("", "errors"),  # "": crucible/__init__.py (the version)
    ("records",),
    # docs/ is the documentation index the terminal agent's docs tool searches, so it
    # sits below agents/ (DESIGN.md lists it beside skills/, which only the CLI uses).
    ("tasks", "store", "docs", "contracts", "modalrt", "webauth"),
    ("sandboxes",),
    # export.atif converts records and agents' logs to ATIF; agents/ write it at a run's end
    ("llm", "export.atif"),
    ("agents",),
    ("verifiers",),
    ("metrics",),
    ("engine",),
    ("executors",),  # where trials run (ray): above the engine, whose seam it implements
    ("reports", "export", "skills", "serve", "generate", "trainers", "adapt"),
    # train/ drives the trainers' adapters, the grading service and the dataset export
    ("train",),
    ("cli",),
]
# What the engine must never import, whatever the table says: they use the engine.
DRIVERS = ("cli", "serve", "generate", "train", "trainers", "export", "adapt")
MAX_LINES = 400
# Files other work is splitting; each must still be over the limit (else remove it here).
OVERSIZE_PENDING: set[str] = set()


# -- the module graph ----------------------------------------------------------------


def modules(src: Path, root: str = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under src/root."""
    out: dict[str, Path] = {}
    for path in sorted((src / root).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imported_names(name: str, path: Path) -> Iterator[str]:
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                package = name.split(".")
                drop = node.level - 1 if is_package else node.level
                package = package[: len(package) - drop]
                base = ".".join([*package, base] if base else package)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph(mods: dict[str, Path], root: str = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (the longest existing prefix)."""
    graph: dict[str, set[str]] = {name: set() for name in mods}
    for name, path in mods.items():
        for target in _imported_names(name, path):
            if target != root and not target.startswith(root + "."):
                continue
            while target and target not in mods:
                target = target.rpartition(".")[0]
            if target and target != name:
                graph[name].add(target)
    return graph


def unit_of(module: str, units: Iterable[str], root: str = ROOT) -> str | None:
    rel = module[len(root) + 1 :] if module != root else ""
    best: str | None = None
    for unit in units:
        if unit == rel or (unit and rel.startswith(unit + ".")) or (unit == "" and rel == ""):
            if best is None or len(unit) > len(best):
                best = unit
    return best


def layer_violations(
    graph: dict[str, set[str]], layers: list[tuple[str, ...]], root: str = ROOT
) -> list[str]:
    level = {unit: i for i, units in enumerate(layers) for unit in units}
    problems: list[str] = []
    for module in sorted(graph):
        unit = unit_of(module, level, root)
        if unit is None:
            problems.append(f"{module}: its package is not in LAYERS; place it there")
            continue
        for target in sorted(graph[module]):
            tunit = unit_of(target, level, root)
            if tunit is None or tunit == unit:
                continue  # an unplaced target is reported as a module of its own
            if level[tunit] > level[unit]:
                problems.append(f"{module} imports {target}: {unit!r} is below {tunit!r}")
            elif level[tunit] == level[unit]:
                problems.append(f"{module} imports {target}: {unit!r} and {tunit!r} are peers")
    return problems


def placement_problems(layers: list[tuple[str, ...]]) -> list[str]:
    """Subpackages placed above their parent: a lower unit that may import upward."""
    level = {unit: i for i, units in enumerate(layers) for unit in units}
    problems: list[str] = []
    for unit, at in sorted(level.items()):
        parent = unit.rpartition(".")[0]
        while parent and parent not in level:
            parent = parent.rpartition(".")[0]
        if "." in unit and parent in level and at > level[parent]:
            problems.append(f"{unit!r} is placed above its parent {parent!r}")
    return problems


def driver_imports(graph: dict[str, set[str]], root: str = ROOT) -> list[str]:
    engine = f"{root}.engine"
    drivers = tuple(f"{root}.{d}" for d in DRIVERS)
    return [
        f"{m} imports {t}"
        for m in sorted(graph)
        if m == engine or m.startswith(engine + ".")
        for t in sorted(graph[m])
        if any(t == d or t.startswith(d + ".") for d in drivers)
    ]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one file (Tarjan, iterative)."""
    counter = itertools.count()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = next(counter)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = next(counter)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


# -- the checks fail on a package that breaks them -------------------------------------


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checks_catch_upward_sideways_driver_imports_and_circles(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "crucible/__init__.py": '"""Root."""\n',
            "crucible/records/__init__.py": '"""R."""\n',
            "crucible/records/a.py": "def f() -> None:\n    from crucible.engine import run\n",
            "crucible/store/__init__.py": '"""S."""\n',
            "crucible/store/b.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from crucible.tasks.c import X\n",
            "crucible/tasks/__init__.py": '"""T."""\n',
            "crucible/tasks/c.py": "from . import d\n",
            "crucible/tasks/d.py": "from crucible.tasks import c\n",
            "crucible/engine/__init__.py": '"""E."""\n',
            "crucible/engine/run.py": "import crucible.export.trace\nimport crucible.newthing\n",
            "crucible/export/__init__.py": '"""X."""\n',
            "crucible/export/trace.py": "",
            "crucible/newthing.py": "",
        },
    )
    layers: list[tuple[str, ...]] = [
        ("",),
        ("records",),
        ("tasks", "store"),
        ("engine",),
        ("export",),
    ]
    graph = import_graph(modules(tmp_path))
    problems = layer_violations(graph, layers)
    assert any(p.startswith("crucible.records.a imports crucible.engine") for p in problems)
    assert any("crucible.store.b imports crucible.tasks.c" in p and "peers" in p for p in problems)
    assert any(p.startswith("crucible.engine.run imports crucible.export.trace") for p in problems)
    assert "crucible.newthing: its package is not in LAYERS; place it there" in problems
    assert driver_imports(graph) == ["crucible.engine.run imports crucible.export.trace"]
    assert cycles(graph) == [["crucible.tasks.c", "crucible.tasks.d"]]
    lifted = [("",), ("tasks",), ("engine",), ("tasks.checks", "engine.grading")]
    assert placement_problems(lifted) == [
        "'engine.grading' is placed above its parent 'engine'",
        "'tasks.checks' is placed above its parent 'tasks'",
    ]
    assert placement_problems([("",), ("tasks.checks",), ("tasks",)]) == []


# -- the rules hold on crucible ----------------------------------------------------------


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(modules(SRC))


def test_no_upward_or_sideways_imports_between_packages(graph: dict[str, set[str]]) -> None:
    assert layer_violations(graph, LAYERS) == []


def test_no_subpackage_is_placed_above_its_parent() -> None:
    assert placement_problems(LAYERS) == []


def test_sandboxes_import_no_verifier_nor_engine(graph: dict[str, set[str]]) -> None:
    """The arrow that sandboxes/conformance/ once drew: the providers' suite grading with
    the real verifier. Grading's checks are verifiers/conformance.py."""
    above = tuple(f"{ROOT}.{unit}" for unit in ("verifiers", "engine"))
    assert [
        f"{m} imports {t}"
        for m in sorted(graph)
        if m.startswith(f"{ROOT}.sandboxes.")
        for t in sorted(graph[m])
        if any(t == a or t.startswith(a + ".") for a in above)
    ] == []


def test_the_engine_never_imports_what_drives_it(graph: dict[str, set[str]]) -> None:
    assert driver_imports(graph) == []


def test_no_import_circles_between_files(graph: dict[str, set[str]]) -> None:
    assert cycles(graph) == []


def test_files_are_small_and_packages_say_what_they_hold() -> None:
    too_long, pending_done, bad_init = [], [], []
    for name, path in modules(SRC).items():
        rel = path.relative_to(SRC).as_posix()
        n = len(path.read_text().splitlines())
        if rel in OVERSIZE_PENDING:
            if n <= MAX_LINES:
                pending_done.append(f"{rel} ({n} lines): remove it from OVERSIZE_PENDING")
        elif n > MAX_LINES:
            too_long.append(f"{rel}: {n} lines")
        if path.name == "__init__.py":
            doc = ast.get_docstring(ast.parse(path.read_text()), clean=False)
            if not doc or "\n" in doc.strip():
                bad_init.append(f"{name}: the docstring must be one line")
    assert too_long == [], f"split these along a real seam (at most {MAX_LINES} lines)"
    assert pending_done == []
    assert bad_init == []
