"""tests/reference.py ported to Modal: each fold is fitted and scored in a Modal function
whose image installs scikit-learn, fanned out over the folds with .map (one fold per input);
the entrypoint averages the scores."""

import json

import modal

image = modal.Image.debian_slim().pip_install("scikit-learn")
app = modal.App("sklearn-cv", image=image)


def make_data(samples, features, seed):
    from sklearn.datasets import make_classification

    return make_classification(
        n_samples=samples, n_features=features, n_informative=features // 2, random_state=seed
    )


@app.function(cpu=1.0, timeout=600)
def fold_score(fold: int, samples: int, features: int, folds: int, c: float, seed: int) -> float:
    """Accuracy of the model fitted without fold `fold`, on fold `fold`. The container
    rebuilds the (seeded) data set and split itself: only the fold index travels."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import KFold

    x, y = make_data(samples, features, seed)
    splits = list(KFold(n_splits=folds, shuffle=True, random_state=seed).split(x))
    train, test = splits[fold]
    model = LogisticRegression(C=c, max_iter=1000)
    model.fit(x[train], y[train])
    return float(model.score(x[test], y[test]))


@app.local_entrypoint()
def main(samples: int = 300, features: int = 10, folds: int = 5, c: float = 1.0, seed: int = 0):
    params = {"samples": samples, "features": features, "folds": folds, "c": c, "seed": seed}
    scores = list(fold_score.map(range(folds), kwargs=params))
    print(json.dumps({"fold_scores": scores, "mean": sum(scores) / len(scores)}))
