"""examples/trainers/trl_grpo.py as a module (it is a script, not a package): the tests build
their tiny policy and GRPOTrainer with its functions, so the example is what they run."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

PATH = Path(__file__).resolve().parents[2] / "examples" / "trainers" / "trl_grpo.py"


def trl_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("trl_grpo_example", PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
