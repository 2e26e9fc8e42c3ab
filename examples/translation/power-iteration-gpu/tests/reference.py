"""The original program: the top singular value of random matrices by power iteration,
and the error of the rank-1 approximation. Pure Python (no numpy) so it runs anywhere.

    python reference.py --n 4 --size 6 --seed 1     # prints a JSON list, one item a matrix
"""

import argparse
import json
import math
import random


def make_matrices(n, size, seed):
    rng = random.Random(seed)
    return [[[rng.uniform(-1, 1) for _ in range(size)] for _ in range(size)] for _ in range(n)]


def matvec(a, v):
    return [sum(x * y for x, y in zip(row, v)) for row in a]


def transpose(a):
    return [list(col) for col in zip(*a)]


def rank1(a, iters=200):
    """Top singular triple (sigma, u, v) by power iteration on A^T A, and ||A - s u v^T||_F."""
    at = transpose(a)
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--size", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(json.dumps([rank1(m) for m in make_matrices(args.n, args.size, args.seed)]))


if __name__ == "__main__":
    main()
