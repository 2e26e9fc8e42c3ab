"""The io stage uses the local provider only through its public one-shot API
(crucible.sandboxes.local.oneshot), never the provider's internals (issue 24)."""

from __future__ import annotations

import ast
from pathlib import Path

VERIFIERS = Path(__file__).resolve().parents[2] / "src" / "crucible" / "verifiers"
PUBLIC = "crucible.sandboxes.local.oneshot"


def _local_imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        out += [n for n in names if n.startswith("crucible.sandboxes.local")]
    return out


def test_verifiers_import_only_the_local_providers_public_api() -> None:
    found = {
        str(p.relative_to(VERIFIERS)): [n for n in _local_imports(p) if n != PUBLIC]
        for p in sorted(VERIFIERS.rglob("*.py"))
    }
    assert {k: v for k, v in found.items() if v} == {}
    assert any(PUBLIC in _local_imports(p) for p in VERIFIERS.rglob("*.py"))


def test_the_io_family_is_one_subpackage() -> None:
    stages = VERIFIERS / "stages"
    assert sorted(p.name for p in stages.glob("io*.py")) == []
    assert (stages / "io" / "stage.py").is_file() and (stages / "io" / "driver.py").is_file()
