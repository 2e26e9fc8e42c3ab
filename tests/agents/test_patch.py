"""The unified-diff parser and applier (agents/patch.py, agents/patch_apply.py), on diffs made by real `git diff`
and `diff -ruN` in tmp_path: each applied to the tree before must give the tree after,
and every shape it cannot apply faithfully is refused with a PatchError."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from tests.helpers.diffs import LONG, Tree, git, git_diff, plain_diff

from crucible.agents.patch import PatchError, parse_patch
from crucible.agents.patch_apply import Outcome, apply_patch, touched


def applied(patch: str, before: Tree) -> Tree:
    """The tree `patch` makes of `before`, as the submission agent would write it."""
    patches = parse_patch(patch)
    outcome = apply_patch(patches, {p: before.get(p) for p in touched(patches)})
    tree = dict(before)
    for path, out in outcome.items():
        if out.text is None:
            tree.pop(path, None)
        else:
            tree[path] = out.text
    return tree


CASES: dict[str, tuple[Tree, Tree]] = {
    "two hunks": (
        {"src/m.py": LONG},
        {"src/m.py": LONG.replace("line 5\n", "five\n").replace("line 50\n", "L50\nx\n")},
    ),
    "new and deleted files": (
        {"old.txt": "gone\nsoon\n", "keep.txt": "k\n"},
        {"keep.txt": "k\n", "dir/new.txt": "fresh\nfile\n"},
    ),
    "no newline at the end, kept": ({"f": "a\nb\nc"}, {"f": "a\nB\nc"}),
    "no newline at the end, added": ({"f": "a\nb"}, {"f": "a\nb\n"}),
    "no newline at the end, removed": ({"f": "a\nb\n"}, {"f": "a\nb"}),
    "crlf lines": ({"w.txt": "one\r\ntwo\r\nthree\r\n"}, {"w.txt": "one\r\n2\r\nthree\r\n"}),
    "odd line breaks kept": ({"f": "a\x0bb\x0cc\n\rd\n"}, {"f": "a\x0bB\x0cc\n\rd\nend\n"}),
    "unicode names and text": (
        {"dé jà/ñ.txt": "naïve ☃\n"},
        {"dé jà/ñ.txt": "naïve ☃ 😀\n", "名前.md": "新しい\n"},
    ),
    "a name with spaces": ({"a b/c d.txt": "x\n"}, {"a b/c d.txt": "y\n"}),
    "an empty new file": ({"k": "k\n"}, {"k": "k\n", "empty": ""}),
    "an empty file deleted": ({"k": "k\n", "empty": ""}, {"k": "k\n"}),
    "a file emptied": ({"k": "k\nl\n"}, {"k": ""}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_git_diffs_apply(tmp_path: Path, case: str) -> None:
    before, after = CASES[case]
    assert applied(git_diff(tmp_path, before, after), before) == after


@pytest.mark.parametrize("case", sorted(CASES))
def test_plain_diffs_apply(tmp_path: Path, case: str) -> None:
    before, after = CASES[case]
    if case in ("an empty new file", "an empty file deleted"):
        pytest.skip("diff -ruN writes no hunk for an empty file: nothing to apply")
    assert applied(plain_diff(tmp_path, before, after), before) == after


def test_unified_zero_and_wide_context(tmp_path: Path) -> None:
    before, after = CASES["two hunks"]
    for flags in (("-U0",), ("-U10",)):
        sub = tmp_path / flags[0]
        sub.mkdir()
        assert applied(git_diff(sub, before, after, *flags), before) == after
        assert applied(plain_diff(sub / "p", before, after, *flags), before) == after


def test_renames_and_copies(tmp_path: Path) -> None:
    before = {"a/x.py": LONG, "keep": "k\n"}
    after = {"b/y.py": LONG.replace("line 30\n", "thirty\n"), "keep": "k\n"}
    patch = git_diff(tmp_path / "r", before, after, "-M")
    assert "rename from a/x.py" in patch
    assert applied(patch, before) == after
    after = {**before, "c.py": LONG.replace("line 2\n", "two\n")}
    patch = git_diff(tmp_path / "c", before, after, "-C", "--find-copies-harder")
    assert "copy from a/x.py" in patch
    assert applied(patch, before) == after
    pure = git_diff(tmp_path / "p", before, {"z": LONG, "keep": "k\n"}, "-M")
    assert "@@" not in pure and applied(pure, before) == {"z": LONG, "keep": "k\n"}


def test_modes(tmp_path: Path) -> None:
    patch = git_diff(
        tmp_path / "m", {"run.sh": "echo\n"}, {"run.sh": "echo\n"}, prep="chmod +x run.sh"
    )
    assert "new mode 100755" in patch
    patches = parse_patch(patch)
    assert apply_patch(patches, {"run.sh": "echo\n"}) == {"run.sh": Outcome("echo\n", 0o755)}
    new = git_diff(tmp_path / "n", {}, {"go.sh": "hi\n"}, prep="chmod +x go.sh")
    assert apply_patch(parse_patch(new), {"go.sh": None}) == {"go.sh": Outcome("hi\n", 0o755)}


def test_offsets_like_patch_without_fuzz(tmp_path: Path) -> None:
    before, after = CASES["two hunks"]
    patch = git_diff(tmp_path, before, after)
    moved = {"src/m.py": "new top\nlines\n" + before["src/m.py"]}
    assert applied(patch, moved) == {"src/m.py": "new top\nlines\n" + after["src/m.py"]}
    # A context line that differs (patch's fuzz would take it; fuzz 0 does not).
    fuzzy = {"src/m.py": before["src/m.py"].replace("line 3\n", "LINE 3\n")}
    with pytest.raises(PatchError, match=r"hunk 1 .* does not match"):
        applied(patch, fuzzy)
    # A hunk at the top of the file is pinned there, not found further down.
    top = git_diff(tmp_path / "t", {"f": "a\nb\nc\nd\ne\n"}, {"f": "A\nb\nc\nd\ne\n"})
    with pytest.raises(PatchError, match="does not match"):
        applied(top, {"f": "z\na\nb\nc\nd\ne\n"})


def test_a_format_patch_mail_applies(tmp_path: Path) -> None:
    before, after = {"f": "a\n"}, {"f": "b\n"}
    repo = tmp_path / "repo"
    git_diff(tmp_path, before, after)
    git(repo, "commit", "-q", "-m", "change --- not a header\n\n+++ nor this")
    mail = git(repo, "format-patch", "-1", "--stdout")
    assert mail.rstrip().splitlines()[-2] == "-- "
    assert applied(mail, before) == after


def test_binary_patches_are_refused(tmp_path: Path) -> None:
    bin_before = {"f.bin": "\x00\x01\n"}
    for n, flags in enumerate(((), ("--binary",))):
        patch = git_diff(tmp_path / str(n), bin_before, {"f.bin": "\x00\x02\n"}, *flags)
        with pytest.raises(PatchError, match="binary"):
            parse_patch(patch)
    with pytest.raises(PatchError, match="binary"):
        parse_patch(plain_diff(tmp_path / "p", bin_before, {"f.bin": "\x00\x03\n"}))


def test_links_and_submodule_modes_are_refused(tmp_path: Path) -> None:
    link = git_diff(tmp_path, {"k": "k\n"}, {"k": "k\n"}, prep="ln -s /etc/shadow app.txt")
    assert "new file mode 120000" in link
    with pytest.raises(PatchError, match="symbolic link"):
        parse_patch(link)
    turned = "diff --git a/k b/k\nold mode 100644\nnew mode 120000\n"
    with pytest.raises(PatchError, match="symbolic link"):
        parse_patch(turned)
    with pytest.raises(PatchError, match="100644, 100755"):
        parse_patch(
            "diff --git a/k b/k\nnew file mode 104755\n--- /dev/null\n+++ b/k\n@@ -0,0 +1 @@\n+x\n"
        )


HEADER = "--- {old}\n+++ {new}\n@@ -0,0 +1 @@\n+owned\n"


@pytest.mark.parametrize(
    "old,new",
    [
        ("/dev/null", "b/../../etc/x"),
        ("/dev/null", "/etc/x"),
        ("/etc/passwd", "/etc/passwd"),
        ("a/../x", "b/../x"),
        ("/dev/null", "b/./x"),
        ("/dev/null", "b//x"),
        ("/dev/null", "x"),
        ("/dev/null", '"b/\\056\\056/etc/x"'),
        ("/dev/null", "b/" + "n" * 256),
    ],
)
def test_paths_that_leave_the_workdir_are_refused(old: str, new: str) -> None:
    with pytest.raises(PatchError):
        parse_patch(HEADER.format(old=old, new=new))


def test_git_renames_out_of_the_workdir_are_refused() -> None:
    patch = "diff --git a/x b/y\nsimilarity index 100%\nrename from x\nrename to ../../etc/y\n"
    with pytest.raises(PatchError, match=r"'\.\.'"):
        parse_patch(patch)


@pytest.mark.parametrize(
    "patch,match",
    [
        ("", "no file changes"),
        ("just words\n", "no file changes"),
        ("--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n-b\n", "ends early"),
        ("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\x00\n", "NUL"),
        ("--- a/x\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n", "differ in a plain diff"),
        ("@@ -1 +1 @@\n-a\n+b\n", "no file header"),
        ("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n-b\n+c\n", "hold"),
        ("--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n\\ No newline at end of file\n b\n+c\n", "before"),
        ("--- a/x\n+++ b/x\n@@ junk @@\n", "malformed"),
        ("--- a/x\n+++ b/x\n", "no hunks"),
    ],
)
def test_malformed_patches_are_refused(patch: str, match: str) -> None:
    with pytest.raises(PatchError, match=match):
        parse_patch(patch)


def test_what_does_not_fit_the_files_is_refused(tmp_path: Path) -> None:
    new = parse_patch(HEADER.format(old="/dev/null", new="b/x"))
    with pytest.raises(PatchError, match="already exists"):
        apply_patch(new, {"x": ""})
    edit = parse_patch("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
    with pytest.raises(PatchError, match="no such file"):
        apply_patch(edit, {"x": None})
    gone = parse_patch(
        "diff --git a/x b/x\ndeleted file mode 100644\n--- a/x\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n"
    )
    with pytest.raises(PatchError, match="deletes it but its lines differ"):
        apply_patch(gone, {"x": "a\nmore\n"})
    assert apply_patch(gone, {"x": "a\n"}) == {"x": Outcome(None)}
    onto = parse_patch("diff --git a/x b/y\nsimilarity index 100%\nrename from x\nrename to y\n")
    with pytest.raises(PatchError, match="exists"):
        apply_patch(onto, {"x": "a\n", "y": "b\n"})
    # All or nothing: the second file's failure leaves the first unwritten (nothing returned).
    two = parse_patch(
        HEADER.format(old="/dev/null", new="b/ok") + "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-q\n+r\n"
    )
    with pytest.raises(PatchError):
        apply_patch(two, {"ok": None, "x": "a\n"})


def test_hunks_far_from_their_lines_are_placed_within_a_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = "".join(f"{n}\n" for n in range(100_000))
    far = "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n 90000\n-90001\n+changed\n 90002\n"
    assert applied(far, {"f": text})["f"] == text.replace("\n90001\n", "\nchanged\n")
    # A start past any file's end is sought from the end, never counted up to.
    huge = "--- a/f\n+++ b/f\n@@ -99999999999999999999,3 +1,3 @@\n 5\n-6\n+x\n 7\n"
    assert applied(huge, {"f": text})["f"] == text.replace("\n6\n", "\nx\n")
    with pytest.raises(PatchError, match="does not match"):
        applied(huge.replace(" 7", " 8"), {"f": text})
    monkeypatch.setattr("crucible.agents.patch_apply.MAX_PROBES", 10_000)
    with pytest.raises(PatchError, match="too long to place"):
        applied(far, {"f": text})


SEEDS = [
    "diff --git a/x b/x\nindex 1..2 100644\n--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n",
    "--- a/x\t2020-01-01 00:00:00.000000000 +0000\n+++ b/x\t1970-01-01 00:00:00.000000000 +0000\n"
    "@@ -1,2 +0,0 @@\n-a\n-b\n",
    'diff --git "a/\\303\\251" "b/\\303\\251"\nnew file mode 100755\n--- /dev/null\n'
    '+++ "b/\\303\\251"\n@@ -0,0 +1 @@\n+x\n\\ No newline at end of file\n',
    "diff --git a/x b/y\nsimilarity index 90%\nrename from x\nrename to y\n--- a/x\n+++ b/y\n"
    "@@ -2 +2 @@\n-b\n+c\n",
]
PIECES = [*'@-+ \\\n\t"/abx0123456789,.', "@@ ", "--- ", "+++ ", "\\ No newline", "/dev/null"]
PIECES += ["new file mode ", "rename from ", "\\3", "1970-01-01 00:00:00 +0000", "diff --git "]


def test_mangled_patches_raise_only_patch_errors() -> None:
    # Hostile input of every shape: a PatchError (the policy's invalid_submission), never
    # another exception (a crash) and never a hang.
    rng = random.Random(26)
    for _ in range(5000):
        chars = list(rng.choice(SEEDS))
        for _ in range(rng.randint(1, 6)):
            at = rng.randrange(len(chars) + 1)
            if rng.random() < 0.5:
                chars.insert(at, rng.choice(PIECES))
            elif chars:
                chars[min(at, len(chars) - 1)] = rng.choice(PIECES)
        try:
            patches = parse_patch("".join(chars))
            current = {p: rng.choice([None, "a\nb\nc\n", "", "b\n"]) for p in touched(patches)}
            apply_patch(patches, current)
        except PatchError:
            pass
