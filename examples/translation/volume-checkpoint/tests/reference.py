"""The original program: a training loop that checkpoints to disk and resumes after a stop.

Linear regression by minibatch SGD on a data set drawn from `--seed`. The loop saves a
checkpoint (step and weights) every `--every` steps. The first run is stopped after
`--stop-at` steps (a preemption: the steps after its last checkpoint are lost); the second
run resumes from the last checkpoint and trains to `--steps`. Step t's minibatch depends
only on (seed, t), so the resumed run ends where an uninterrupted one would.

    python reference.py --steps 60 --every 10 --stop-at 37 --seed 1   # one JSON object
"""

import argparse
import json
import os
import tempfile

import numpy as np

FEATURES = 5
SAMPLES = 200
BATCH = 16
LR = 0.05


def make_data(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((SAMPLES, FEATURES))
    w_true = rng.standard_normal(FEATURES)
    y = x @ w_true + 0.1 * rng.standard_normal(SAMPLES)
    return x, y


def sgd_step(w, x, y, seed, step):
    batch = np.random.default_rng([seed, step]).choice(SAMPLES, BATCH, replace=False)
    xb, yb = x[batch], y[batch]
    grad = 2 * xb.T @ (xb @ w - yb) / BATCH
    return w - LR * grad


def train(ckpt_dir, until, every, seed):
    """Train from the last checkpoint in `ckpt_dir` (or from zero) up to step `until`,
    checkpointing every `every` steps. Returns the step it resumed from and the weights."""
    x, y = make_data(seed)
    path = os.path.join(ckpt_dir, "latest.json")
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
    loss = float(np.mean((x @ w - y) ** 2))
    return {"resumed_from": start, "weights": w.tolist(), "loss": loss}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--stop-at", type=int, default=37)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as ckpt_dir:
        train(ckpt_dir, args.stop_at, args.every, args.seed)  # stopped: preempted
        print(json.dumps(train(ckpt_dir, args.steps, args.every, args.seed)))


if __name__ == "__main__":
    main()
