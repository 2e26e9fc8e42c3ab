"""tests/reference.py ported to Modal: each training run is a call of a Modal function
whose checkpoints go to a modal.Volume (committed after each write); the second call
reloads the volume and resumes from the first call's last checkpoint."""

import json
import os
import shutil

import modal

image = modal.Image.debian_slim().pip_install("numpy")
app = modal.App("volume-checkpoint", image=image)
volume = modal.Volume.from_name("training-checkpoints", create_if_missing=True)
CKPT = "/ckpt"
FEATURES = 5
SAMPLES = 200
BATCH = 16
LR = 0.05


def make_data(seed):
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((SAMPLES, FEATURES))
    w_true = rng.standard_normal(FEATURES)
    y = x @ w_true + 0.1 * rng.standard_normal(SAMPLES)
    return x, y


def sgd_step(w, x, y, seed, step):
    import numpy as np

    batch = np.random.default_rng([seed, step]).choice(SAMPLES, BATCH, replace=False)
    xb, yb = x[batch], y[batch]
    grad = 2 * xb.T @ (xb @ w - yb) / BATCH
    return w - LR * grad


@app.function(volumes={CKPT: volume}, timeout=600)
def train(run: str, until: int, every: int, seed: int, fresh: bool = False) -> dict:
    """Train run `run` from its last checkpoint on the volume (or from zero) to step
    `until`, committing a checkpoint every `every` steps."""
    import numpy as np

    folder = os.path.join(CKPT, run)
    if fresh:
        shutil.rmtree(folder, ignore_errors=True)
    else:
        volume.reload()  # see the checkpoints another container committed
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "latest.json")
    x, y = make_data(seed)
    start, w = 0, np.zeros(FEATURES)
    if os.path.exists(path):
        with open(path) as f:
            ckpt = json.load(f)
        start, w = ckpt["step"], np.array(ckpt["weights"])
    for step in range(start, until):
        w = sgd_step(w, x, y, seed, step)
        if (step + 1) % every == 0:
            with open(path, "w") as f:
                json.dump({"step": step + 1, "weights": w.tolist()}, f)
            volume.commit()
    loss = float(np.mean((x @ w - y) ** 2))
    return {"resumed_from": start, "weights": w.tolist(), "loss": loss}


@app.local_entrypoint()
def main(steps: int = 60, every: int = 10, stop_at: int = 37, seed: int = 0):
    run = f"seed-{seed}"
    train.remote(run, stop_at, every, seed, fresh=True)  # stopped: preempted
    print(json.dumps(train.remote(run, steps, every, seed)))
