"""The API-reference index of an installed package: built from the installed modal SDK
(and from a small package written here), queried and read like any other index."""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import modal
import pytest
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.docs.index import build_package_index, open_index
from crucible.docs.package import PackageNotFound, format_signature, package_pages
from crucible.docs.query import search
from crucible.docs.show import show_page

runner = CliRunner()


@pytest.fixture(scope="module")
def modal_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("modal-docs")
    stats = build_package_index("modal", out)
    assert stats.source == f"package:modal {modal.__version__}"
    assert stats.n_pages > 300  # every public class, method and module of the SDK
    return out


@pytest.mark.parametrize(
    ("keys", "page", "signature"),
    [
        ("Function.map", "modal.Function.map", "def map(\n    self,\n    *input_iterators"),
        ("starmap", "modal.Function.starmap", "input_iterator: Iterable[Sequence[Any]]"),
        ("Volume.commit", "modal.Volume.commit", "def commit(self)"),
        (
            "Secret.from_dict",
            "modal.Secret.from_dict",
            "@staticmethod\ndef from_dict(env_dict: dict[str, str | None] = {})",
        ),
    ],
)
def test_modal_api_pages_are_found_with_real_signatures(
    modal_index: Path, keys: str, page: str, signature: str
) -> None:
    hits = search(modal_index, [keys])
    assert hits and hits[0].path == page, [h.path for h in hits]
    text = show_page(modal_index, page, limit=400).text
    assert signature in text
    # the docstring is the installed SDK's own
    obj: object = modal
    for part in page.split(".")[1:]:
        obj = getattr(obj, part)
    doc = inspect.getdoc(obj) or ""
    assert doc.splitlines()[0] in text


def test_signatures_name_public_classes_not_private_wrapped_ones(modal_index: Path) -> None:
    text = show_page(modal_index, "App.function", limit=400).text
    assert "gpu: str | list[str] | None = None," in text
    assert "image: modal.Image | None = None" in text and "_Image" not in text
    cls = show_page(modal_index, "modal.Volume", limit=400).text
    assert "- `commit`: Commit changes to a mounted volume." in cls
    assert "- `object_id` (property)" in cls  # inherited from modal.Object: kept
    assert "with_traceback" not in show_page(modal_index, "modal.Error").text


def test_objects_are_paged_once_where_first_reached(modal_index: Path) -> None:
    # modal.Volume is defined in modal.volume: one page, at the package's own name
    module = show_page(modal_index, "modal.volume", limit=400).text
    assert "- `Volume`: see modal.Volume" in module
    db = open_index(modal_index)
    paths = {row["path"] for row in db.execute("SELECT path FROM pages")}
    db.close()
    assert "modal.Volume" in paths and "modal.volume.Volume" not in paths
    assert not [p for p in paths if "._" in p or p.startswith("_")]  # nothing private


PKG = {
    "__init__.py": '"""Quiver: frames."""\nfrom quiverpkg.frame import Frame, read\n'
    '__all__ = ["Frame", "read", "LIMIT"]\nLIMIT = 3\nprint("import side effect")\n',
    "frame.py": '''"""Frames and reading them."""


class Frame:
    """A table of columns."""

    def __init__(self, columns: dict[str, list[int]], /, *, name: str = "f") -> None:
        self.columns = columns

    def merge(self, other: "Frame", on: str = "key") -> "Frame":
        """Join two frames on a key column."""
        return self

    @property
    def width(self) -> int:
        """How many columns."""
        return len(self.columns)

    def _hidden(self) -> None:
        """Not public."""


def read(path: str) -> Frame:
    """Read a frame from PATH."""
    return Frame({})
''',
    "_private.py": "def secret() -> None:\n    pass\n",
    "broken.py": "raise RuntimeError('this module cannot be imported')\n",
}


@pytest.fixture
def quiverpkg(tmp_path: Path) -> Iterator[str]:
    root = tmp_path / "site" / "quiverpkg"
    root.mkdir(parents=True)
    for name, body in PKG.items():
        (root / name).write_text(body)
    sys.path.insert(0, str(root.parent))
    try:
        yield "quiverpkg"
    finally:
        sys.path.remove(str(root.parent))
        for mod in [m for m in sys.modules if m == "quiverpkg" or m.startswith("quiverpkg.")]:
            del sys.modules[mod]


def test_a_package_is_walked_within_its_public_surface(
    quiverpkg: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pages, problems, label = package_pages(quiverpkg)
    paths = sorted(p.path for p in pages)
    assert paths == [
        "quiverpkg",
        "quiverpkg.Frame",
        "quiverpkg.Frame.merge",
        "quiverpkg.Frame.width",
        "quiverpkg.frame",
        "quiverpkg.read",
    ]
    assert label == "package:quiverpkg"  # no version to say
    assert problems == [
        "quiverpkg.broken: not imported: RuntimeError: this module cannot be imported"
    ]
    text = {p.path: p.text for p in pages}
    assert (
        "def merge(self, other: quiverpkg.frame.Frame, on: str = 'key') -> quiverpkg.frame.Frame"
        in text["quiverpkg.Frame.merge"]
    )
    assert (
        "class Frame(columns: dict[str, list[int]], /, *, name: str = 'f')"
        in text["quiverpkg.Frame"]
    )
    assert "width: int" in text["quiverpkg.Frame.width"]
    assert "- `LIMIT`: int value" in text["quiverpkg"]
    assert "_hidden" not in text["quiverpkg.Frame"]
    assert "import side effect" not in capsys.readouterr().out  # kept off crucible's stdout


def test_bounds_are_kept_and_said(quiverpkg: str) -> None:
    pages, problems, _ = package_pages(quiverpkg, max_pages=2, max_page_chars=60)
    assert len(pages) == 2 and all(len(p.text) <= 60 + len("\n… (cut)\n") for p in pages)
    assert "stopped at 2 pages (max_pages)" in problems
    assert any("cut to 60 chars" in p for p in problems)
    _, problems, _ = package_pages(quiverpkg, max_modules=1)
    assert "stopped at 1 modules (max_modules)" in problems


def test_long_signatures_are_one_parameter_per_line() -> None:
    def f(a: int, /, b: str, *, c: float = 1.0, d: list[int] | None = None, **kw: object) -> str:
        return ""

    out = format_signature("fetch_everything_from_everywhere", inspect.signature(f, eval_str=True))
    assert out.splitlines() == [
        "def fetch_everything_from_everywhere(",
        "    a: int,",
        "    /,",
        "    b: str,",
        "    *,",
        "    c: float = 1.0,",
        "    d: list[int] | None = None,",
        "    **kw: object,",
        ") -> str",
    ]
    assert format_signature("g", inspect.signature(lambda x: x)) == "def g(x)"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no_such_package_here", "no installed package 'no_such_package_here'"),
        ("../etc", "is not a Python package name"),
    ],
)
def test_a_missing_package_is_a_clear_error(name: str, message: str) -> None:
    with pytest.raises(PackageNotFound, match=message):
        package_pages(name)


def test_cli_package_index_then_query(tmp_path: Path) -> None:
    out = tmp_path / "idx"
    res = runner.invoke(app, ["docs", "index", "--package", "modal", "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    stats = json.loads(res.stdout)
    assert stats["source"].startswith("package:modal ") and stats["n_pages"] > 300
    res = runner.invoke(app, ["docs", "query", "Function.map", "--index", str(out), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)[0]["path"] == "modal.Function.map"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["docs", "index"], 2, "give SOURCE or --package NAME"),
        (["docs", "index", "docs/", "--package", "modal"], 2, "not both"),
        (["docs", "index", "--package", "no_such_package_here"], 3, "no installed package"),
    ],
)
def test_cli_source_and_package_are_exclusive(
    tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    res = runner.invoke(app, [*args, "--out", str(tmp_path / "idx"), "--json"])
    assert res.exit_code == code, res.output
    assert message in json.loads(res.stderr)["message"]
    assert not (tmp_path / "idx").exists()


def test_without_the_package_the_error_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`docs index --package modal` where modal is not installed: exit 3 (not found), and
    the hint names the install command (the modal extra's pin, for this Python)."""
    monkeypatch.setitem(sys.modules, "modal", None)  # as if modal were not installed
    res = runner.invoke(
        app, ["docs", "index", "--package", "modal", "--out", str(tmp_path / "i"), "--json"]
    )
    assert res.exit_code == 3, res.output
    err = json.loads(res.stderr)
    assert err["error"] == "not_found" and "no installed package 'modal'" in err["message"]
    assert f"{sys.executable} -m pip install 'modal>=1.6'" in err["hint"]
    assert "pip install -e '.[modal]'" in err["hint"]  # in a checkout of crucible
    res = runner.invoke(app, ["docs", "index", "--package", "no_such_package_here"])
    assert res.exit_code == 3 and "pip install no_such_package_here" in res.stderr
