"""Fixed ScatterNet features vs raw pixels on Fashion-MNIST: teachers and the true-label ceiling.

Teachers: the first ``--teachers`` shards (240 private images each, the shards of a 250-teacher
partition, seed 0) trained with each recipe; reported: mean teacher accuracy and the accuracy of
their plurality vote on the 1000 evaluation images, and the wall time (features included).
Ceiling: a logistic regression on the ScatterNet features of all 9000 public items with their
TRUE labels (no privacy), evaluated on the same 1000 images -- what a student on these features
could reach at best with a linear head.

    .venv/bin/python benchmarks/features_fmnist.py            # ~5 minutes on 2 CPU cores
    .venv/bin/python benchmarks/features_fmnist.py --teachers 10 --threads 1

Run on demand, never as a test; docs/teachers.md quotes its output.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings

import numpy as np

RECIPES = (
    ("cnn28 on pixels", dict(model="cnn28", features="none", epochs=20, lr=2e-3)),
    ("linear on ScatterNet", dict(model="linear", features="scatternet", epochs=20, lr=2e-3)),
    (
        "scatter_cnn on ScatterNet",
        dict(model="scatter_cnn", features="scatternet", epochs=20, lr=1e-3),
    ),
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--teachers", type=int, default=25)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--skip-ceiling", action="store_true")
    args = parser.parse_args(argv)

    import torch
    from sklearn.linear_model import LogisticRegression

    from pate.core.partition import partition_random
    from pate.ledger import record_keys
    from pate.teachers import features
    from pate.teachers.data import load_pate_data
    from pate.teachers.ensemble import TeacherConfig, train_teachers

    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"load average {os.getloadavg()}, torch threads {torch.get_num_threads()}", flush=True)
    data = load_pate_data("fashion-mnist")
    part = partition_random(
        record_keys(data.private.x, data.private.y), num_teachers=250, rng=np.random.default_rng(0)
    )
    shards = part.shards[: args.teachers]
    rows = []
    for name, recipe in RECIPES:
        start = time.perf_counter()
        result = train_teachers(
            data,
            shards,
            list(range(len(shards))),
            TeacherConfig(device="cpu", **recipe),
            progress=False,
        )
        rows.append(
            {
                "recipe": name,
                "teachers": len(shards),
                "mean_accuracy": round(float(result.teacher_accuracy.mean()), 4),
                "plurality_accuracy": round(float(result.plurality_accuracy), 4),
                "seconds": round(time.perf_counter() - start, 1),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    if not args.skip_ceiling:
        start = time.perf_counter()
        pub, ev = features.scatter(data.public.x), features.scatter(data.evaluation.x)
        norm = features.Standardizer.fit(pub)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # lbfgs' iteration-limit warning
            clf = LogisticRegression(C=0.01, max_iter=300).fit(
                norm.transform(pub).reshape(len(pub), -1), data.public.y
            )
        acc = clf.score(norm.transform(ev).reshape(len(ev), -1), data.evaluation.y)
        print(
            json.dumps(
                {
                    "ceiling": "logistic regression on ScatterNet, 9000 true labels",
                    "accuracy": round(float(acc), 4),
                    "seconds": round(time.perf_counter() - start, 1),
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
