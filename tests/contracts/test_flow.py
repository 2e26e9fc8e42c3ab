"""Reach by control flow: a use in code that never runs (a constant-false branch, code
after a `return`) is no use, and a def referred to only from there is not reached."""

from __future__ import annotations

import pytest

from crucible.contracts import detect_source
from crucible.contracts.reach import detect_reached_source

# `work` is a GPU function; the entrypoint refers to it only through `outer`, and to
# `outer` only in the branch DEAD stands for.
CHAIN = """
import typing
from typing import TYPE_CHECKING as TC
import modal

app = modal.App()

@app.function(gpu="T4")
def work(x):
    return x

def helper(xs):
    return list(work.map(xs))

def outer(xs):
    return helper(xs)

@app.local_entrypoint()
def main():
    if DEAD:
        outer([1])
    print(sum(x for x in range(3)))
"""
REACHED = ["app", "function", "local_entrypoint", "gpu", "fan_out"]
UNREACHED = ["app", "local_entrypoint"]

CONSTANT_FALSE = [
    "False",
    "0",
    "None",
    "''",
    "()",
    "{}",
    "1 == 2",
    "not True",
    "not 1",
    "2 ** 3 < 5",
    "1 < 2 > 3",
    "'a' in 'bcd'",
    "None is not None",
    "-1 + 1",
    "True and 0",
    "print('x') and False",
    "[] or ()",
    "TC",
    "typing.TYPE_CHECKING",
    "(x := 0)",
]
NOT_CONSTANT = ["FLAG", "len(())", "1 is 1", "x", "[*()]", "1 / 0", "'%d' % 1"]


def _chain(condition: str) -> str:
    return CHAIN.replace("if DEAD:", f"if {condition}:").replace(
        "import modal", "import modal\nFLAG = False\nx = 0"
    )


@pytest.mark.parametrize("condition", CONSTANT_FALSE)
def test_a_def_reached_only_from_a_constant_false_branch_is_unreached(condition: str) -> None:
    source = _chain(condition)
    assert detect_reached_source(source, "x.py", "modal run", "main").contracts == UNREACHED


@pytest.mark.parametrize("condition", ["True", "1", "'a'", "(0,)", "2 > 1", "not None", "TC or 1"])
def test_a_constant_true_branch_is_reached(condition: str) -> None:
    source = _chain(condition)
    assert detect_reached_source(source, "x.py", "modal run", "main").contracts == REACHED


@pytest.mark.parametrize("condition", NOT_CONSTANT)
def test_a_condition_that_is_no_literal_is_not_folded(condition: str) -> None:
    # `FLAG = False` may be rebound where the detector cannot see: both branches count.
    source = _chain(condition)
    assert detect_reached_source(source, "x.py", "modal run", "main").contracts == REACHED


@pytest.mark.parametrize(
    "dead",
    [
        "while False:\n        outer([1])",
        "for _ in ():\n        outer([1])",
        "return\n    outer([1])",
        "raise SystemExit(0)\n    outer([1])",
        "if 1:\n        return\n    outer([1])",
        "if x:\n        return\n    else:\n        raise ValueError\n    outer([1])",
        "try:\n        return\n    finally:\n        pass\n    outer([1])",
        "while True:\n        pass\n    outer([1])",
        "_ = outer([1]) if False else None",
        "_ = 0 and outer([1])",
        "_ = 1 or outer([1])",
    ],
)
def test_code_that_never_runs_reaches_nothing(dead: str) -> None:
    source = CHAIN.replace("if DEAD:\n        outer([1])", dead).replace(
        "import modal", "import modal\nx = 0"
    )
    assert detect_reached_source(source, "x.py", "modal run", "main").contracts == UNREACHED


@pytest.mark.parametrize(
    "live",
    [
        "while True:\n        outer([1])\n        break",
        "try:\n        return\n    except Exception:\n        pass\n    outer([1])",
        "with open('f') as f:\n        raise ValueError\n    outer([1])",
        "for _ in range(0):\n        outer([1])",
        "_ = x and outer([1])",
    ],
)
def test_code_that_may_run_is_still_reached(live: str) -> None:
    source = CHAIN.replace("if DEAD:\n        outer([1])", live).replace(
        "import modal", "import modal\nx = 0"
    )
    assert detect_reached_source(source, "x.py", "modal run", "main").contracts == REACHED


def test_dead_module_level_code_defines_and_uses_nothing() -> None:
    source = """
import modal
app = modal.App()
if False:
    @app.function(gpu="A100")
    def hidden(): ...
    vol = modal.Volume.from_name("v")
raise SystemExit
q = modal.Queue.from_name("q")
"""
    assert detect_source(source, "x.py").contracts == ["app"]
    assert detect_reached_source(source, "x.py", "deploy").contracts == ["app"]


def test_rebinding_typing_flag_is_not_folded() -> None:
    source = _chain("TC").replace("FLAG = False", "TC = True")
    assert detect_reached_source(source, "x.py", "modal run", "main").contracts == REACHED


@pytest.mark.parametrize(
    "condition",
    [
        "2 ** 10 ** 10",
        "10 ** 10 ** 10 == 0",
        "(2 ** 60) ** 64",
        "1 << 10 ** 12",
        "'a' * 10 ** 12",
        "10 ** 12 * b'a'",
        "[0] * 10 ** 12",
        "('ab' * 5000 + 'c' * 5000) * 2",
        "'%*d' % (10 ** 9, 1)",
        "10.0 ** 10 ** 6",
    ],
)
def test_folding_submitted_code_computes_nothing_large(condition: str) -> None:
    # Each would take memory or time without end if folded: left unknown, both branches count.
    source = _chain(condition)
    assert detect_reached_source(source, "x.py", "modal run", "main").contracts == REACHED
