"""The io stage on real Modal (iomodal.py), against the modal SDK stand-in: each case's
submission runs in a Modal Sandbox of its own (real bwrap sandboxes behind the stand-in),
through `modal run`. The stand-in has no `modal` CLI, so a small one is submitted beside
the program (FAKE_CLI: it runs the local entrypoint with `.remote` in-process) and the
command points at it; everything else is the production path: the io token, never the
provider's, the token only in the sandbox's config file (never its environment), one
sandbox per case, each terminated, output read back and compared."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from tests.sandboxes.modal_fixtures import MODAL_VARS, TOKEN
from tests.sandboxes.modal_standin import World, install
from tests.verifiers.test_stage_io import GOOD, io_task
from tests.verifiers.test_stages import submitted

import crucible.verifiers.stages.io.realmodal as iomodal
from crucible.errors import ResourcesUnavailable
from crucible.sandboxes.modal import provider as modal_provider
from crucible.tasks.loader import load_task
from crucible.verifiers.pipeline import declared
from crucible.verifiers.stages.base import StageContext
from crucible.verifiers.stages.io import IoStage
from crucible.verifiers.submission import Submission

FAKE_CLI = """import os, runpy, sys, tomllib, types
args = sys.argv[1:]
assert args[:2] == ["run", "--quiet"], args
target, rest = args[2], args[3:]
path, _, entry = target.partition("::")
with open(os.environ["MODAL_CONFIG_PATH"], "rb") as f:
    profile = tomllib.load(f)["io"]
if not profile.get("active") or profile["token_id"] != os.environ.get("EXPECT_TOKEN_ID", "ak-test"):
    sys.exit("stand-in modal: no active io profile")
sys.stderr.write("env tokens: %r\\n" % sorted(k for k in os.environ if "TOKEN" in k))


ENTRIES = []


class Function:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *a, **k):
        return self.fn(*a, **k)


class App:
    def __init__(self, *a, **k):
        pass

    def function(self, **k):
        return Function

    def local_entrypoint(self, **k):
        return lambda fn: ENTRIES.append(fn) or fn


sys.modules["modal"] = types.SimpleNamespace(App=App)
ns = runpy.run_path(path)
(ns[entry] if entry else ENTRIES[0])(**{rest[i].lstrip("-").replace("-", "_"): rest[i + 1] for i in range(0, len(rest), 2)})
"""
CLI_PATH = "/app/fake_modal.py"


@pytest.fixture
def cloud(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> World:
    """The stand-in behind the provider, the io token set, no provider credentials at all."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for var in MODAL_VARS:
        monkeypatch.delenv(var, raising=False)
    sdk, world = install(tmp_path / "cloud", token=TOKEN)
    monkeypatch.setattr(modal_provider, "load_sdk", lambda: sdk)
    monkeypatch.setenv(iomodal.RUNTIME_VAR, "modal")
    monkeypatch.setenv(iomodal.TOKEN_ID_VAR, TOKEN[0])
    monkeypatch.setenv(iomodal.TOKEN_SECRET_VAR, TOKEN[1])
    monkeypatch.setattr(iomodal, "MODAL_RUN", ("python3", f"{iomodal.WORKDIR}/src{CLI_PATH}",
                                               "run", "--quiet"))  # fmt: skip
    return world


async def run_on_modal(tmp: Path, program: str) -> dict[str, Any]:
    """The io stage over `program`, with the stand-in CLI submitted beside it."""
    task = io_task(tmp / "task", extra='program = "/app/main.py"\n')
    (stage,) = declared(task)[1]
    assert isinstance(stage, IoStage)
    sub = submitted(tmp, program)
    sub.files[CLI_PATH] = tmp / "sub" / "fake_modal.py"
    sub.files[CLI_PATH].write_text(FAKE_CLI)
    res = await stage.run(StageContext(task, sub, {"reward": 1.0}))
    return res.model_dump(mode="json")


async def test_each_case_runs_in_its_own_modal_sandbox_with_the_io_token(
    cloud: World, tmp_path: Path
) -> None:
    res = await run_on_modal(tmp_path, GOOD)
    assert res["status"] == "passed", res["reason"]
    assert res["components"] == {"pass_rate": 1.0, "all_pass": 1.0}, res["reason"]
    cases = res["details"]["cases"]
    assert [c["runtime"] for c in cases] == ["modal", "modal"]
    # no trace on real Modal: the evidence is said to be missing, and not asked for
    assert all(c["evidence"] == "not recorded on real Modal" for c in cases)
    creates = cloud.called("Sandbox.create")
    assert len(creates) == 2  # a fresh sandbox per case...
    assert all(sb.terminated for sb in cloud.sandboxes.values())  # ...each ended after
    for sb in cloud.sandboxes.values():
        assert not sb.block_network  # `modal run` reaches Modal
        assert TOKEN[1] not in json.dumps(sb.env) and TOKEN[0] not in json.dumps(sb.env)
        assert sb.env["MODAL_CONFIG_PATH"] == iomodal.CONFIG_PATH


async def test_a_wrong_answer_on_modal_fails_its_cases(cloud: World, tmp_path: Path) -> None:
    wrong = GOOD.replace("add.remote(xs) + 1e-12", "add.remote(xs) + 1")
    res = await run_on_modal(tmp_path, wrong)
    assert res["components"] == {"pass_rate": 0.0, "all_pass": 0.0}
    assert res["reason"].startswith("0/2 cases match; case 0: $.sum"), res["reason"]


async def test_the_program_crashing_on_modal_is_the_attempts(cloud: World, tmp_path: Path) -> None:
    res = await run_on_modal(tmp_path, GOOD.replace("print(", "raise SystemExit(5)\n    print(", 1))
    assert res["components"]["all_pass"] == 0.0
    assert "the submission exited 5" in res["reason"], res["reason"]


async def test_without_the_io_token_the_run_is_resources_unavailable(
    cloud: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the provider's own credentials are there; the io stage still refuses to hand them over
    monkeypatch.delenv(iomodal.TOKEN_SECRET_VAR)
    monkeypatch.setenv("MODAL_TOKEN_ID", TOKEN[0])
    monkeypatch.setenv("MODAL_TOKEN_SECRET", TOKEN[1])
    with pytest.raises(ResourcesUnavailable, match="CRUCIBLE_IO_MODAL_TOKEN_SECRET"):
        await run_on_modal(tmp_path, GOOD)
    assert cloud.called("Sandbox.create") == []
    monkeypatch.setenv(iomodal.RUNTIME_VAR, "cloud")
    with pytest.raises(ResourcesUnavailable, match="expected 'offline' or 'modal'"):
        await run_on_modal(tmp_path / "again", GOOD)


def test_the_stage_declares_its_runtime_and_the_operator_overrides_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(iomodal.RUNTIME_VAR, raising=False)
    assert iomodal.chosen_runtime("offline") == "offline"
    assert iomodal.chosen_runtime("modal") == "modal"
    monkeypatch.setenv(iomodal.RUNTIME_VAR, "offline")
    assert iomodal.chosen_runtime("modal") == "offline"
    job = {"program": "/app/main.py", "entrypoint": "main", "args": ["--xs", "1; rm -rf /"]}
    assert iomodal.run_command(job) == (
        "modal run --quiet /work/src/app/main.py::main --xs '1; rm -rf /'"
    )


def test_web_mode_runs_offline_even_when_modal_is_asked(
    cloud: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The web example's io stage with CRUCIBLE_IO_RUNTIME=modal (and no io token at all):
    served by the offline runtime, as its cases say; no Modal sandbox is made."""
    monkeypatch.delenv(iomodal.TOKEN_ID_VAR)
    root = Path(__file__).resolve().parents[2] / "examples" / "translation" / "polars-lookup-web"
    task = load_task(root)
    io = next(s for s in declared(task)[1] if isinstance(s, IoStage))
    sub = Submission(files={"/app/main.py": root / "solution" / "main.py"})
    res = asyncio.run(io.run(StageContext(task, sub, {"reward": 1.0})))
    assert res.components == {"pass_rate": 1.0, "all_pass": 1.0}, res.reason
    assert {c["runtime"] for c in res.details["cases"]} == {"offline"}
    assert cloud.called("Sandbox.create") == []
