"""The entry points: detect contracts in source text, files or folders.

A single source is analysed alone. Files analysed together (detect_paths, the
CLI) are one program: `from common import app, image` resolves to what
common.py built, so a multi-file project is labelled as a reader would.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

from crucible.contracts.detect import Analyzer
from crucible.contracts.model import Analysis, ContractReport
from crucible.contracts.resolve import ModuleExports, Resolver
from crucible.errors import VerifierFailed


class ContractAnalysisError(VerifierFailed):
    """The analyzer could not walk a file (nesting deeper than Python's recursion
    limit). A stage reports it as an error, never as a 0 or a 1."""


def _parse(source: str, filename: str) -> ast.Module:
    try:
        return ast.parse(source, filename=filename)
    except RecursionError as exc:
        raise ContractAnalysisError(
            f"{filename}: nested too deep to analyse ({exc})",
            hint="split the deepest expression or block",
        ) from exc


def _walk(tree: ast.Module, filename: str, resolver: Resolver | None = None) -> Analyzer:
    analyzer = Analyzer(resolver)
    try:
        analyzer.run(tree)
    except RecursionError as exc:
        raise ContractAnalysisError(f"{filename}: nested too deep to analyse") from exc
    return analyzer


def analyze_source(source: str, filename: str = "<string>") -> Analysis:
    """Parse and walk one file. Raises SyntaxError when it is not Python, and
    ContractAnalysisError when it nests too deep to walk (the code is submitted,
    so it may be built to crash the analyzer). The code is never imported or run."""
    return _walk(_parse(source, filename), filename).result


def detect_source(source: str, filename: str = "<string>") -> ContractReport:
    """The contracts one file's source uses, as the spec table defines them."""
    analysis = analyze_source(source, filename)
    return ContractReport.of(filename, (o.contract for o in analysis.occurrences))


def python_files(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given, folders searched for *.py (sorted); missing paths raise."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            out.extend(sorted(p for p in path.rglob("*.py") if p.is_file()))
        elif path.is_file():
            out.append(path)
        else:
            raise FileNotFoundError(str(path))
    return out


def _resolver(path: Path, roots: list[Path], exports: dict[Path, ModuleExports]) -> Resolver:
    """How `path` finds the other files of the program: relative imports from its
    package, absolute ones from its folder, then from each folder given."""

    def resolve(module: str, level: int) -> ModuleExports | None:
        if level:
            base = path.parent
            for _ in range(level - 1):
                base = base.parent
            bases = [base]
        else:
            bases = [path.parent, *roots]
        parts = [p for p in module.split(".") if p]
        for base in bases:
            target = base.joinpath(*parts)
            candidates = [target / "__init__.py"]
            if parts:
                candidates.insert(0, target.with_suffix(".py"))
            for cand in candidates:
                if cand in exports and cand != path:
                    return exports[cand]
        return None

    return resolve


def analyze_paths(
    paths: Iterable[str | Path], texts: Mapping[Path, str] | None = None
) -> list[tuple[Path, Analysis]]:
    """Analyse files and folders as one program (imports between them resolved).

    Two passes: the first finds each file's module-level Modal objects, the
    second analyses each file with its imports of the others resolved. A file
    in `texts` is analysed as that text (the verifier's decoding of a submitted
    file), any other is read as UTF-8.
    """
    given = list(paths)
    files = python_files(given)
    roots = [Path(p).resolve() for p in given if Path(p).is_dir()]
    trees: list[tuple[Path, Path, ast.Module]] = []
    exports: dict[Path, ModuleExports] = {}
    for path in files:
        given_text = (texts or {}).get(path)
        if given_text is None:
            given_text = path.read_text(encoding="utf-8", errors="replace")
        tree = _parse(given_text, str(path))
        real = path.resolve()
        trees.append((path, real, tree))
        exports[real] = _walk(tree, str(path)).exports()
    return [
        (path, _walk(tree, str(path), _resolver(real, roots, exports)).result)
        for path, real, tree in trees
    ]


def detect_paths(paths: Iterable[str | Path]) -> list[ContractReport]:
    """The contracts each file uses, folders searched recursively for *.py."""
    return [
        ContractReport.of(str(path), (o.contract for o in analysis.occurrences))
        for path, analysis in analyze_paths(paths)
    ]
