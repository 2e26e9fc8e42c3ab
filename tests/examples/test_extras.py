"""The `translation` extra installs every library the example translation tasks import on
the host (their solutions, reference programs and tests run in crucible's offline Modal
runtime, in crucible's own environment): with only `pip install -e '.[translation]'`, no
task ends `task_invalid` for a missing module (polars-lookup-web once did, for fastapi)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TRANSLATION = REPO / "examples" / "translation"
# Provided by crucible itself: the offline runtime's `modal`, and crucible.
OWN = {"modal", "crucible"}


def _name(requirement: str) -> str:
    """A requirement's distribution name, normalized (PEP 503)."""
    bare = re.split(r"[\s<>=!~;\[]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", bare).lower()


def _top_imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
    return out


def test_the_translation_extra_has_every_library_the_examples_import() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    provided = {_name(r) for r in project["dependencies"]}
    provided |= {_name(r) for r in project["optional-dependencies"]["translation"]}
    dists = packages_distributions()
    missing: dict[str, set[str]] = {}
    for py in sorted(TRANSLATION.rglob("*.py")):
        for module in _top_imports(py) - set(sys.stdlib_module_names) - OWN:
            names = {_name(d) for d in dists.get(module, [module])}
            if not names & provided:
                missing.setdefault(module, set()).add(str(py.relative_to(TRANSLATION)))
    assert not missing, f"imported by the translation examples, not in the extra: {missing}"
