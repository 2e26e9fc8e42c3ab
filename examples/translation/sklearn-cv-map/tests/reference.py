"""The original program: k-fold cross-validation of a logistic regression with scikit-learn.

It draws a classification data set (`--samples` x `--features`) from `--seed`, splits it
into `--folds` shuffled folds (seeded), fits a model on each fold's training part and
scores its accuracy on the held-out part; it prints each fold's score and their mean.

    python reference.py --samples 300 --features 10 --folds 5 --seed 1   # one JSON object
"""

import argparse
import json

from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import KFold


def make_data(samples, features, seed):
    return make_classification(
        n_samples=samples, n_features=features, n_informative=features // 2, random_state=seed
    )


def fold_score(x, y, train, test, c):
    model = LogisticRegression(C=c, max_iter=1000)
    model.fit(x[train], y[train])
    return float(model.score(x[test], y[test]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--features", type=int, default=10)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--c", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    x, y = make_data(args.samples, args.features, args.seed)
    splits = KFold(n_splits=args.folds, shuffle=True, random_state=args.seed).split(x)
    scores = [fold_score(x, y, train, test, args.c) for train, test in splits]
    print(json.dumps({"fold_scores": scores, "mean": sum(scores) / len(scores)}))


if __name__ == "__main__":
    main()
