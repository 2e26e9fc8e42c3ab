"""The docs site cannot drift: the generated reference pages are what the generator writes
from the code now, the site builds with `mkdocs build --strict` (so a broken link fails CI,
which runs scripts/test.sh), and the README is a short front page into it."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from types import ModuleType

import yaml
from sitebuild import DOCS, ROOT, BuiltSite, mkdocs_build, require_mkdocs

SETUP = (
    "bash scripts/setup-images.sh && python3 -m venv .venv && .venv/bin/pip install -q -e . && "
    ".venv/bin/crucible run examples/tasks --agent oracle && "
    ".venv/bin/crucible run examples/tasks --agent nop"
)


def test_generated_reference_pages_are_what_the_code_gives(gen_docs: ModuleType) -> None:
    pages = gen_docs.generate()
    assert set(pages) == {
        "cli.md",
        "config.md",
        "env-params.md",
        "result-schema.md",
        "python-api.md",
    }
    for name, text in pages.items():
        committed = (DOCS / "reference" / name).read_text()
        assert committed == text, f"docs/reference/{name} is stale: run python scripts/gen-docs.py"


def test_the_cli_reference_has_every_command(gen_docs: ModuleType) -> None:
    import typer

    from crucible.cli.main import app

    cli = gen_docs.generate()["cli.md"]
    root = typer.main.get_command(app)
    for name, cmd in root.commands.items():  # type: ignore[attr-defined]
        if cmd.hidden:  # an alias (`crucible dataset`), named in its group's help
            assert f"`crucible {name}` is the same group" in cli
            continue
        assert f"`crucible {name}`" in cli
        for sub in getattr(cmd, "commands", {}):
            assert f"`crucible {name} {sub}`" in cli
    assert "| `--env-param TEXT` |" in cli


def test_every_provider_param_is_described(gen_docs: ModuleType) -> None:
    from crucible.sandboxes.registry import BUILTIN

    page = gen_docs.generate()["env-params.md"]
    for name in BUILTIN:
        for key, _, _ in gen_docs.provider_params(name):
            assert f"| `{key}` |" in page
    assert "| `userland` | str | `'auto'` |" in page
    assert "| `create_rate` | float | `5.0` |" in page


def test_the_result_schema_covers_the_records(gen_docs: ModuleType) -> None:
    from crucible.records.trial import TrialResult

    page = gen_docs.generate()["result-schema.md"]
    for section in ("TrialResult", "VerifierResult", "StageResult", "TamperRecord", "JobConfig"):
        assert f"\n## {section}\n" in page
    for field in TrialResult.model_fields:
        assert f"| `{field}` |" in page
    assert "0-based; attempt i of every task forms run i" in page  # a field's comment


def test_the_site_builds_strict(built_site: BuiltSite) -> None:
    assert built_site.result.returncode == 0, built_site.result.stderr[-4000:]
    nav = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)["nav"]
    listed: list[str] = []

    def walk(items: list[object]) -> None:
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            walk(value) if isinstance(value, list) else listed.append(str(value))

    walk(nav)
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(listed) == pages  # every page is in the nav, and every nav entry a page
    for page in pages:
        out = built_site.path / (
            "index.html" if page == "index.md" else page.removesuffix(".md") + "/index.html"
        )
        assert out.is_file(), out


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    require_mkdocs()
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "quickstart.md"
    page.write_text(page.read_text() + "\nSee [the missing page](concepts/missing.md).\n")
    result = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0
    assert "concepts/missing.md" in result.stderr


def test_the_readme_is_a_short_front_page() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 150
    # The two set-up commands, exactly as they were (CI and the first hour run them).
    blocks = re.findall(r"```\n(.*?)\n```", readme, re.S)
    assert SETUP in blocks
    assert "bash scripts/test.sh" in blocks
    assert SETUP in (DOCS / "quickstart.md").read_text()
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert len(links) >= 20
    for link in links:
        assert (ROOT / link).is_file(), link
