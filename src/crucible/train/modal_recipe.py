"""ModalRecipe: slime (default) or verl GRPO/GSPO on Modal GPUs, through the Modal SDK.

    ModalRecipe(trainer="slime", gpu="H100", gpus=8, algorithm="grpo")

`plan(config)` is the launch, described: the image (the trainer's image from the registry,
the config's `image_overlay` pip packages, crucible's source, the config's folder and the
prompts), the GPUs, the Volumes (checkpoints; the Hugging Face cache), the trainer's
command (train/modal_commands.py), the names of the variables it sets, and the cost per
hour at Modal's list prices (train/modal_prices.py). `launch(config, run)` does it:
credentials as the Modal provider finds them (sandboxes/modal/auth.py), App.lookup, the
image built, Volume.from_name, one Sandbox.create with the GPUs and Volumes, the script
run by Sandbox.exec, and its output read into the run (train/modal_watch.py) until it
ends or `runs cancel` asks (then the sandbox is terminated). Every SDK call goes through
train/modal_sdk.py's declared table, which the tests check against the SDK.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from crucible.train.modal_commands import (
    CKPT_MOUNT,
    CONFIG_DIR,
    DATA_DIR,
    HF_CACHE_MOUNT,
    SRC_DIR,
    Algorithm,
    Layout,
    Trainer,
    shell_script,  # fmt: skip
    trainer_argv,
)
from crucible.train.modal_prices import PRICES_SOURCE, cost_per_hour
from crucible.train.recipe import GPUSpec, LaunchPlan, Recipe, VolumeSpec
from crucible.train.remote import CONFIG_ENV, NONCE_ENV

if TYPE_CHECKING:
    from crucible.train.config import TrainConfig
    from crucible.train.run import RunHandle

IMAGES: dict[str, str] = {"slime": "slimerl/slime:latest", "verl": "verlai/verl:vllm011.latest"}
CRUCIBLE_DEPS = ("pydantic>=2.6", "httpx>=0.27", "typer>=0.12", "rich>=13")
CHUNK_POLL_S = 2.0
IMAGE_ENV = {"PYTHONPATH": f"{SRC_DIR}:/root/Megatron-LM", "PYTHONUNBUFFERED": "1"}


class ModalRecipe(Recipe):
    """A remote trainer on Modal GPUs; the reward runs in it through crucible."""

    name: ClassVar[str] = "modal"

    def __init__(self, *, trainer: Trainer = "slime", gpu: str = "H100", gpus: int = 8,
                 algorithm: Algorithm = "grpo", image: str | None = None,
                 app_name: str = "crucible-train", environment: str | None = None,
                 checkpoints_volume: str = "crucible-train-checkpoints",
                 hf_cache_volume: str = "crucible-hf-cache", timeout_h: float = 24.0,
                 cpu: float = 16.0, memory_gib: int = 256,
                 credentials: str | None = None) -> None:  # fmt: skip
        if trainer not in ("slime", "verl") or algorithm not in ("grpo", "gspo"):
            raise ValueError("trainer is slime or verl, algorithm grpo or gspo")
        if gpus < 1 or not 0 < timeout_h <= 24:
            raise ValueError("gpus >= 1; timeout_h in (0, 24] (Modal's sandbox limit)")
        self.trainer, self.gpu, self.gpus, self.algorithm = trainer, gpu, gpus, algorithm
        self.image = image or IMAGES[trainer]
        self.app_name, self.environment = app_name, environment
        self.checkpoints_volume, self.hf_cache_volume = checkpoints_volume, hf_cache_volume
        self.timeout_h, self.cpu, self.memory_gib = timeout_h, cpu, memory_gib
        self.credentials = credentials  # a private TOML file, as --env-param config=PATH

    def describe(self) -> str:
        return f"modal-{self.trainer}-{self.algorithm}"

    # -- the plan ------------------------------------------------------------------------
    def layout(self, config: TrainConfig, run_id: str) -> Layout:
        name = config.source.name if config.source else "config.py"
        data = "prompts.jsonl" if self.trainer == "slime" else "prompts.parquet"
        return Layout(run_id=run_id, config_file=name, data_file=data)

    def volumes(self) -> list[VolumeSpec]:
        return [VolumeSpec(name=self.checkpoints_volume, mount=CKPT_MOUNT,
                           purpose="checkpoints (one folder per run)"),
                VolumeSpec(name=self.hf_cache_volume, mount=HF_CACHE_MOUNT,
                           purpose="the Hugging Face cache (models download once)")]  # fmt: skip

    def image_layers(self, config: TrainConfig) -> list[str]:
        src = config.source.parent if config.source else Path("CONFIG_DIR")
        pip = [*CRUCIBLE_DEPS, *config.image_overlay]
        return [f"from_registry {self.image}", "pip_install " + " ".join(pip),
                "env " + " ".join(f"{k}={v}" for k, v in IMAGE_ENV.items()),
                f"add_local_dir <crucible package> {SRC_DIR}/crucible",
                f"add_local_dir {src} {CONFIG_DIR}",
                f"add_local_file <run>/{self.layout(config, 'RUN').data_file} {DATA_DIR}/"]  # fmt: skip

    def plan(self, config: TrainConfig) -> LaunchPlan:
        lay = self.layout(config, "<run-id>")
        script = shell_script(self.trainer, config, lay, gpus=self.gpus, algorithm=self.algorithm)
        notes = [f"image layers: {' | '.join(self.image_layers(config))}",
                 f"sandbox: cpu {self.cpu:g}, memory {self.memory_gib} GiB, timeout "
                 f"{self.timeout_h:g} h, app {self.app_name}"
                 + (f" in environment {self.environment}" if self.environment else ""),
                 f"cost: {PRICES_SOURCE}; GPUs at list price plus CPU and memory, without "
                 "region or non-preemptible multipliers (a floor)",
                 f"reward: {config.reward_label()} runs in the trainer through crucible "
                 f"({'--custom-rm-path crucible.train.remote.slime_rm' if self.trainer == 'slime' else 'custom_reward_function crucible/train/remote.py:compute_score'})",
                 "steps are counted as batch_size x samples_per_prompt scored samples"]  # fmt: skip
        argv = trainer_argv(self.trainer, config, lay, gpus=self.gpus, algorithm=self.algorithm)
        return LaunchPlan(
            recipe=self.describe(), trainer=self.trainer, where="modal",
            image=f"{self.image} + pip {' '.join(config.image_overlay) or '(no overlay)'} "
                  "+ crucible + the config's folder",
            gpus=GPUSpec(type=self.gpu, count=self.gpus), volumes=self.volumes(),
            command=["bash", "-c", script], env=sorted([CONFIG_ENV, NONCE_ENV, "PYTHONPATH"]),
            cost_per_hour_usd=cost_per_hour(self.gpu, self.gpus, cpu=self.cpu,
                                            memory_gib=self.memory_gib),
            knobs={"trainer_argv": argv, "model": config.model}, notes=notes,
        )  # fmt: skip

    # -- the launch ----------------------------------------------------------------------
    def launch(self, config: TrainConfig, run: RunHandle) -> None:
        asyncio.run(self._launch(config, run))

    async def _launch(self, config: TrainConfig, run: RunHandle) -> None:
        from crucible.sandboxes.modal.auth import resolve_credentials
        from crucible.train.modal_sdk import TrainSdk, load_sdk
        from crucible.train.modal_watch import Watcher

        sdk = TrainSdk(load_sdk())
        creds = resolve_credentials(self.credentials)
        lay = self.layout(config, run.id)
        data = write_prompts(config, run.folder / lay.data_file, self.trainer)
        nonce = secrets.token_hex(16)
        client = await sdk.aio(None, "Client.from_credentials", creds.token_id, creds.token_secret)
        env_name = self.environment or creds.environment
        app = await sdk.aio(None, "App.lookup", self.app_name, create_if_missing=True,
                            environment_name=env_name, client=client)  # fmt: skip
        image = self._image(sdk, config, data, lay)
        run.log(f"building the image on Modal ({self.image})")
        image = await sdk.aio(image, "Image.build", app)
        vols = {v.mount: sdk.sync(None, "Volume.from_name", v.name, create_if_missing=True,
                                  environment_name=env_name, client=client)
                for v in self.volumes()}  # fmt: skip
        sb = await sdk.aio(None, "Sandbox.create", app=app, image=image,
                           gpu=f"{self.gpu}:{self.gpus}", volumes=vols,
                           timeout=int(self.timeout_h * 3600), cpu=self.cpu,
                           memory=self.memory_gib * 1024, client=client,
                           tags={"crucible.train": run.id})  # fmt: skip
        run.log(f"sandbox {sdk.prop(sb, 'Sandbox.object_id')}: {self.gpus} x {self.gpu}")
        watcher = Watcher(run, nonce, config.batch_size * config.samples_per_prompt)
        script = shell_script(self.trainer, config, lay, gpus=self.gpus, algorithm=self.algorithm)
        env = {CONFIG_ENV: f"{CONFIG_DIR}/{lay.config_file}", NONCE_ENV: nonce}
        try:
            proc = await sdk.aio(sb, "Sandbox.exec", "bash", "-c", script, env=env, text=False)
            code = await self._follow(sdk, proc, sb, run, watcher)
        finally:
            watcher.close()
            await sdk.aio(sb, "Sandbox.terminate")
        if run.cancel_requested():
            return
        if code != 0:
            raise RuntimeError(
                f"the trainer exited with {code} (see `crucible runs logs {run.id}`)"
            )
        # the trainer's checkpoints stay on the Volume: VOLUME:/checkpoints/RUN
        run.add_checkpoint(watcher.step, Path(f"{self.checkpoints_volume}:{lay.save_dir}"))

    def _image(self, sdk: Any, config: TrainConfig, data: Path, lay: Layout) -> Any:
        import crucible

        image = sdk.sync(None, "Image.from_registry", self.image)
        image = sdk.sync(image, "Image.pip_install", *CRUCIBLE_DEPS, *config.image_overlay)
        image = sdk.sync(image, "Image.env", dict(IMAGE_ENV))
        pkg = Path(crucible.__file__).parent
        image = sdk.sync(image, "Image.add_local_dir", pkg, f"{SRC_DIR}/crucible", copy=True,
                         ignore=["**/__pycache__"])  # fmt: skip
        if config.source is not None:
            image = sdk.sync(image, "Image.add_local_dir", config.source.parent, CONFIG_DIR,
                             copy=True, ignore=["**/__pycache__"])  # fmt: skip
        return sdk.sync(image, "Image.add_local_file", data, f"{DATA_DIR}/{lay.data_file}",
                        copy=True)  # fmt: skip

    async def _follow(self, sdk: Any, proc: Any, sb: Any, run: RunHandle, watcher: Any) -> int:
        """Read the trainer's output into the run; terminate the sandbox on a cancel."""

        async def read() -> None:
            async for chunk in sdk.aiter(sdk.prop(proc, "ContainerProcess.stdout"),
                                         "StreamReader.__aiter__"):  # fmt: skip
                watcher.feed(chunk.decode("utf-8", "replace") if isinstance(chunk, bytes)
                             else str(chunk))  # fmt: skip

        reader = asyncio.ensure_future(read())
        waiter = asyncio.ensure_future(sdk.aio(proc, "ContainerProcess.wait"))
        while not waiter.done():
            if run.cancel_requested():
                run.log("cancel requested: terminating the sandbox")
                await sdk.aio(sb, "Sandbox.terminate")
                break
            await asyncio.wait({waiter}, timeout=CHUNK_POLL_S)
        code = await waiter
        await reader
        return int(code)


def write_prompts(config: TrainConfig, path: Path, trainer: Trainer) -> Path:
    """The dataset's rows as the trainer reads them: JSONL (slime: prompt, label,
    metadata) or Parquet (verl: prompt, data_source, reward_model, extra_info)."""
    rows = config.dataset.rows()
    if trainer == "slime":
        with path.open("w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps({"prompt": r.prompt, "label": r.label,
                                    "metadata": r.metadata}, default=str) + "\n")  # fmt: skip
        return path
    import datasets

    datasets.Dataset.from_list([
        {"prompt": r.prompt, "data_source": "crucible",
         "reward_model": {"style": "rule", "ground_truth": json.dumps(r.label, default=str)},
         "extra_info": {"prompt": r.text, "metadata": json.dumps(r.metadata, default=str)}}
        for r in rows]).to_parquet(str(path))  # fmt: skip
    return path
