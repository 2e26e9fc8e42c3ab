"""The original program: rank-k approximations of random matrices by numpy's SVD.

For each of `--n` Gaussian `--rows`x`--cols` matrices drawn from `--seed`, it keeps the top
`--rank` singular triples and reports the singular values it kept, the relative Frobenius
error of the rank-k approximation and the share of the energy it keeps. Singular vectors
are unique only up to sign, so only sign-free quantities are printed.

    python reference.py --n 4 --rows 12 --cols 8 --rank 3 --seed 1   # one JSON list
"""

import argparse
import json

import numpy as np


def make_matrices(n, rows, cols, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((rows, cols)) for _ in range(n)]


def low_rank(a, rank):
    u, s, vt = np.linalg.svd(a, full_matrices=False)
    approx = (u[:, :rank] * s[:rank]) @ vt[:rank]
    error = np.linalg.norm(a - approx) / np.linalg.norm(a)
    energy = float(np.sum(s[:rank] ** 2) / np.sum(s**2))
    return {"singular_values": s[:rank].tolist(), "rel_error": float(error), "energy": energy}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--rows", type=int, default=12)
    parser.add_argument("--cols", type=int, default=8)
    parser.add_argument("--rank", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    matrices = make_matrices(args.n, args.rows, args.cols, args.seed)
    print(json.dumps([low_rank(a, args.rank) for a in matrices]))


if __name__ == "__main__":
    main()
