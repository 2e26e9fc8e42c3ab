"""tests/reference.py ported to Modal: each matrix's power iteration runs in a GPU
function, fanned out over the matrices with .map from the local entrypoint."""

import json
import math
import random

import modal

app = modal.App("power-iteration")


def make_matrices(n, size, seed):
    rng = random.Random(seed)
    return [[[rng.uniform(-1, 1) for _ in range(size)] for _ in range(size)] for _ in range(n)]


def matvec(a, v):
    return [sum(x * y for x, y in zip(row, v)) for row in a]


@app.function(gpu="T4", timeout=600)
def rank1(a, iters=200):
    at = [list(col) for col in zip(*a)]
    v = [1.0] * len(a[0])
    for _ in range(iters):
        w = matvec(at, matvec(a, v))
        norm = math.sqrt(sum(x * x for x in w))
        v = [x / norm for x in w]
    av = matvec(a, v)
    sigma = math.sqrt(sum(x * x for x in av))
    u = [x / sigma for x in av]
    residual = math.sqrt(
        sum((a[i][j] - sigma * u[i] * v[j]) ** 2 for i in range(len(a)) for j in range(len(a[0])))
    )
    return {"sigma": sigma, "residual": residual}


@app.local_entrypoint()
def main(n: int = 4, size: int = 6, seed: int = 0):
    print(json.dumps(list(rank1.map(make_matrices(n, size, seed)))))
