"""Monte Carlo estimates of three integrals over [0, 1], with their standard errors.

    python monte_carlo_integrate.py --samples 20000 --seed 3
"""

import json
import sys

import numpy as np

FUNCTIONS = {
    "x2": lambda x: x**2,
    "sin": lambda x: np.sin(np.pi * x),
    "exp": lambda x: np.exp(-x),
}

samples = int(sys.argv[sys.argv.index("--samples") + 1]) if "--samples" in sys.argv else 10_000
seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 0
rng = np.random.default_rng(seed)
results = {}
for name, f in FUNCTIONS.items():
    y = f(rng.uniform(0.0, 1.0, size=samples))
    results[name] = {"mean": float(y.mean()), "stderr": float(y.std(ddof=1) / np.sqrt(samples))}
print(json.dumps(results, sort_keys=True))
