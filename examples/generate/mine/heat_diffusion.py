"""Explicit finite differences for the 1-D heat equation on [0, 1] with zero boundaries,
swept over diffusivities; prints the peak temperature left after --steps steps.

    python heat_diffusion.py --cells 50 --steps 400 --alphas 0.1 0.5 1.0
"""

import argparse
import json

import numpy as np

from lib.grid import initial_bump


def simulate(alpha, cells, steps):
    dx = 1.0 / (cells + 1)
    dt = 0.4 * dx * dx / max(alpha, 1e-12)  # within the stability bound of 0.5
    u = initial_bump(cells)
    for _ in range(steps):
        lap = np.zeros_like(u)
        lap[1:-1] = u[:-2] - 2 * u[1:-1] + u[2:]
        lap[0] = -2 * u[0] + u[1]
        lap[-1] = u[-2] - 2 * u[-1]
        u = u + alpha * dt / (dx * dx) * lap
    return float(u.max()), steps * dt


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", type=int, default=50)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--alphas", type=float, nargs="+", default=[0.1, 0.5, 1.0])
    args = parser.parse_args()
    out = []
    for alpha in args.alphas:
        peak, t = simulate(alpha, args.cells, args.steps)
        out.append({"alpha": alpha, "peak": round(peak, 8), "time": round(t, 8)})
    print(json.dumps(out))
