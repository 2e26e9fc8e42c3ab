"""A tiny SWE-bench-format instance, made for real in a test's folder: a git repository
with a bug (calc.mul adds), the gold patch that fixes it, a test patch that adds the
test of it, a patch that fixes it but breaks a PASS_TO_PASS test, and the image that
stands in for its evaluation image: the base image with /testbed, and the host's own
Debian python3.11, git and (pure-Python) pytest copied in, since nothing can be
installed from a network here.

The instance is filed under a real repository key of the official swebench package
(pytest-dev/pytest 8.4: `pytest -rA`, parsed by parse_log_pytest), so the official eval
script, parser and resolution rule apply to it unchanged.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO, VERSION = "pytest-dev/pytest", "8.4"
INSTANCE_ID = "pytest-dev__pytest-90001"
F2P = ["tests/test_calc.py::test_mul"]
P2P = ["tests/test_calc.py::test_add", "tests/test_calc.py::test_neg"]

CALC = "def add(a, b):\n    return a + b\n\n\ndef neg(x):\n    return -x\n\n\ndef mul(a, b):\n    return a + b\n"
TESTS = (
    "from calc import add, neg\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
    "def test_neg():\n    assert neg(4) == -4\n"
)
TEST_MUL = "\n\ndef test_mul():\n    from calc import mul\n    assert mul(3, 4) == 12\n"
SITE = Path("/usr/lib/python3/dist-packages")
PURE = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py.py")
LIBS = ("libexpat.so.1", "libpcre2-8.so.0", "libz.so.1")


def _git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
        "PATH": "/usr/bin:/bin",
    }
    out = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _diff(repo: Path, edits: dict[str, str]) -> str:
    """The diff that `edits` (path -> new text) make to the repository's HEAD."""
    for rel, text in edits.items():
        (repo / rel).write_text(text)
    diff = _git(repo, "diff")
    _git(repo, "checkout", "--", ".")
    return diff


@dataclass
class TinyInstance:
    row: dict[str, object]
    repo: Path
    break_patch: str  # fixes mul, breaks neg (a PASS_TO_PASS test)

    def jsonl(self, path: Path) -> Path:
        path.write_text(json.dumps(self.row) + "\n")
        return path


def make_instance(root: Path) -> TinyInstance:
    repo = root / "testbed"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text(CALC)
    (repo / "tests" / "test_calc.py").write_text(TESTS)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "calc")
    base = _git(repo, "rev-parse", "HEAD").strip()
    fixed = CALC[: CALC.rindex("return a + b")] + "return a * b\n"
    gold = _diff(repo, {"calc.py": fixed})
    test_patch = _diff(repo, {"tests/test_calc.py": TESTS + TEST_MUL})
    broken = _diff(repo, {"calc.py": fixed.replace("return -x", "return x")})
    row: dict[str, object] = {
        "repo": REPO,
        "instance_id": INSTANCE_ID,
        "base_commit": base,
        "version": VERSION,
        "problem_statement": "calc.mul(3, 4) returns 7: it adds. Make it multiply.",
        "patch": gold,
        "test_patch": test_patch,
        "FAIL_TO_PASS": json.dumps(F2P),  # as SWE-bench's files store them
        "PASS_TO_PASS": json.dumps(P2P),
    }
    return TinyInstance(row=row, repo=repo, break_patch=broken)


def image_context(instance: TinyInstance, ctx: Path) -> Path:
    """A build context whose Dockerfile copies the repository and the host's python3.11,
    git and pytest onto the base image (no RUN step, nothing fetched)."""
    rootfs = ctx / "root"
    for binary in ("/usr/bin/python3.11", "/usr/bin/git"):
        if not Path(binary).is_file():
            pytest.skip(f"the host has no {binary} to copy into the stand-in image")
        (rootfs / "usr/bin").mkdir(parents=True, exist_ok=True)
        shutil.copy2(binary, rootfs / binary.lstrip("/"))
    (rootfs / "usr/bin/python3").symlink_to("python3.11")
    skip = shutil.ignore_patterns("test", "tests", "__pycache__", "idlelib", "tkinter", "ensurepip")
    shutil.copytree(
        "/usr/lib/python3.11", rootfs / "usr/lib/python3.11", ignore=skip, symlinks=True
    )
    libdir = rootfs / "usr/lib/x86_64-linux-gnu"
    libdir.mkdir(parents=True)
    for lib in LIBS:
        shutil.copy2(Path("/usr/lib/x86_64-linux-gnu") / lib, libdir / lib)
    site = rootfs / SITE.relative_to("/")
    site.mkdir(parents=True)
    import _pytest

    venv_site = Path(_pytest.__file__).parent.parent
    metadata = [p.name for n in PURE for p in venv_site.glob(f"{n}-*.dist-info")]
    for name in [*PURE, *metadata]:
        src = venv_site / name
        if src.is_dir():
            shutil.copytree(src, site / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, site / name)
    (site / "testbed.pth").write_text("/testbed\n")  # as an editable install would
    (rootfs / "usr/local/bin").mkdir(parents=True)
    runner = rootfs / "usr/local/bin/pytest"
    runner.write_text("#!/usr/bin/python3.11\nimport pytest\nraise SystemExit(pytest.main())\n")
    runner.chmod(0o755)
    shutil.copytree(instance.repo, rootfs / "testbed", symlinks=True)
    (ctx / "Dockerfile").write_text("FROM debian:bookworm-slim\nCOPY root/ /\nWORKDIR /testbed\n")
    return ctx


def build_buildah(ctx: Path, tag: str) -> None:
    out = subprocess.run(
        ["buildah", "build", "--network", "none", "--layers=false", "-q", "-t", tag, str(ctx)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-2000:]


def build_docker(ctx: Path, tag: str) -> None:
    out = subprocess.run(
        ["docker", "build", "-q", "-t", tag, str(ctx)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
