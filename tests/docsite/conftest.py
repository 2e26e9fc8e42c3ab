"""Fixtures of the docs-site tests: one strict build of the site, shared, and the generator."""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest
from sitebuild import ROOT, BuiltSite, mkdocs_build, require_mkdocs


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> BuiltSite:
    require_mkdocs()
    site = tmp_path_factory.mktemp("docs-site") / "site"
    return BuiltSite(site, mkdocs_build(ROOT / "mkdocs.yml", site))


@pytest.fixture(scope="session")
def gen_docs() -> ModuleType:
    """scripts/gen-docs.py, imported (its name is not a module name)."""
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen-docs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
