"""Where the planner's constants (pate/plan.py, docs/plan.md) come from: small simulations on
scikit-learn data (digits, breast_cancer, make_classification with our own seed), never
Fashion-MNIST.

For each dataset, the private rows are split into T disjoint shards; one logistic regression
(inputs standardised with the PUBLIC split's mean and std) is trained per shard; the teachers
vote on the public split. We report

* the teachers' mean and plurality accuracy per records per class per teacher (the shard rule);
* the accuracy of the GNMax noisy argmax (vs the true label) per relative noise sigma / T (the
  drowning rule), averaged over 5 noise draws.

    OMP_NUM_THREADS=1 python benchmarks/plan_constants.py        # ~1-2 min on one core
"""

from __future__ import annotations

import json
import sys
import warnings

import numpy as np
from sklearn.datasets import load_breast_cancer, load_digits, make_classification
from sklearn.linear_model import LogisticRegression

warnings.filterwarnings("ignore")


def datasets():
    x, y = load_digits(return_X_y=True)
    yield "digits", x, y
    x, y = load_breast_cancer(return_X_y=True)
    yield "breast_cancer", x, y
    x, y = make_classification(
        n_samples=12000,
        n_features=30,
        n_informative=12,
        n_classes=6,
        n_clusters_per_class=2,
        random_state=3101,
    )
    x = x * np.logspace(-2, 3, 30)  # awkward feature scales, as in issue #31
    yield "make_classification", x, y


def teachers_votes(xp, yp, xq, num_teachers, classes, rng):
    shard = rng.integers(0, num_teachers, size=len(xp))
    votes = np.zeros((len(xq), classes), dtype=np.int64)
    accs = []
    for t in range(num_teachers):
        idx = shard == t
        if len(np.unique(yp[idx])) < 2:
            pred = np.full(len(xq), yp[idx][0] if idx.any() else 0)
        else:
            pred = LogisticRegression(max_iter=300).fit(xp[idx], yp[idx]).predict(xq)
        votes[np.arange(len(xq)), pred] += 1
        accs.append(pred)
    return votes, np.array(accs)


def main() -> None:
    rng = np.random.default_rng(3101)
    out = {}
    for name, x, y in datasets():
        perm = rng.permutation(len(x))
        x, y = x[perm], y[perm]
        n_pub = len(x) // 4
        xq, yq, xp, yp = x[:n_pub], y[:n_pub], x[n_pub:], y[n_pub:]
        mu, sd = xq.mean(0), xq.std(0) + 1e-8  # public statistics only
        xq, xp = (xq - mu) / sd, (xp - mu) / sd
        classes = int(y.max()) + 1
        rows = []
        for per_class in (1, 2, 3, 5, 10, 20, 40):
            t = len(xp) // (per_class * classes)
            if t < 5 or t > 400:
                continue
            votes, preds = teachers_votes(xp, yp, xq, t, classes, rng)
            mean = float((preds == yq).mean())
            plural = float((votes.argmax(1) == yq).mean())
            noisy = {}
            for rel in (0.1, 0.2, 0.3, 0.5, 1.0, 2.0):
                acc = [
                    float(((votes + rng.normal(0, rel * t, votes.shape)).argmax(1) == yq).mean())
                    for _ in range(5)
                ]
                noisy[rel] = round(float(np.mean(acc)), 4)
            rows.append(
                {
                    "records_per_class_per_teacher": per_class,
                    "teachers": t,
                    "teacher_mean": round(mean, 4),
                    "plurality": round(plural, 4),
                    "noisy_argmax_by_sigma_over_T": noisy,
                }
            )
            print(name, rows[-1], flush=True)
        out[name] = {
            "private": len(xp),
            "public": n_pub,
            "classes": classes,
            "majority": round(float(np.bincount(yq).max() / len(yq)), 4),
            "rows": rows,
        }
    json.dump(out, sys.stdout if len(sys.argv) < 2 else open(sys.argv[1], "w"), indent=1)


def labels_curve() -> dict:
    """A logistic-regression student on n correct labels per class (public-standardised inputs),
    accuracy on held-out rows: how many answers a student needs (the answers rule)."""
    rng = np.random.default_rng(3102)
    out = {}
    for name, x, y in datasets():
        perm = rng.permutation(len(x))
        x, y = x[perm], y[perm]
        n_ev = len(x) // 4
        xe, ye, xt, yt = x[:n_ev], y[:n_ev], x[n_ev:], y[n_ev:]
        mu, sd = xt.mean(0), xt.std(0) + 1e-8
        xe, xt = (xe - mu) / sd, (xt - mu) / sd
        row = {}
        for per_class in (2, 5, 10, 20, 50, 100):
            idx = np.concatenate([np.flatnonzero(yt == c)[:per_class] for c in np.unique(yt)])
            model = LogisticRegression(max_iter=500).fit(xt[idx], yt[idx])
            row[per_class] = round(float(model.score(xe, ye)), 4)
        full = LogisticRegression(max_iter=500).fit(xt, yt).score(xe, ye)
        out[name] = {"student_by_labels_per_class": row, "all_labels": round(float(full), 4)}
        print(name, out[name], flush=True)
    return out


if __name__ == "__main__":
    if "--labels" in sys.argv:
        labels_curve()
    else:
        main()
