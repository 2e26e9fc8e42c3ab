"""tests/reference.py ported to Modal: the SVD of each matrix runs in a GPU function with
numpy in its image, fanned out over the matrices with .map from the local entrypoint."""

import json

import modal

image = modal.Image.debian_slim().pip_install("numpy")
app = modal.App("svd-lowrank", image=image)


@app.function(gpu="T4", timeout=600)
def low_rank(a, rank: int) -> dict:
    import numpy as np

    u, s, vt = np.linalg.svd(a, full_matrices=False)
    approx = (u[:, :rank] * s[:rank]) @ vt[:rank]
    error = np.linalg.norm(a - approx) / np.linalg.norm(a)
    energy = float(np.sum(s[:rank] ** 2) / np.sum(s**2))
    return {"singular_values": s[:rank].tolist(), "rel_error": float(error), "energy": energy}


@app.local_entrypoint()
def main(n: int = 4, rows: int = 12, cols: int = 8, rank: int = 3, seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    matrices = [rng.standard_normal((rows, cols)) for _ in range(n)]
    print(json.dumps(list(low_rank.map(matrices, kwargs={"rank": rank}))))
