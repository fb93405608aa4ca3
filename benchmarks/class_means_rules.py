"""The two labelling rules of a class-means release, side by side: LDA and public-marginal logistic.

For each dataset, the embedding of the packaged configs (public-fitted: ScatterNet + public PCA
512 for Fashion-MNIST, as configs/fashion_mnist_class_means.toml; pixels + public PCA 16 for
digits, as the pipeline tests), then, for each sigma, ``--releases`` releases with fresh noise
(seeds 100, 101, ...; the SAME release feeds both rules) and the share of labels each rule gets
right on the public items (what the student is trained on) and on the evaluation split.
sigma = 0 rows are noise-free (sigma 1e-12): what the rule could reach at best on these features.
Both rules are post-processing of one release: they cost the same eps.
``--count-weights K ...`` repeats everything for each count weight kappa (the release's
``count_weight``; default 1, sums and counts weighted alike, as the committed results were
measured), each listed sigma scaled by sqrt((1 + kappa^2) / 2) so that every kappa's release
costs the same eps as the listed sigma's with kappa = 1 (pate.analysis.class_means).

    .venv/bin/python benchmarks/class_means_rules.py                  # ~4 minutes on 2 CPU cores
    .venv/bin/python benchmarks/class_means_rules.py --datasets digits --releases 10
    .venv/bin/python benchmarks/class_means_rules.py --datasets fashion-mnist \
        --count-weights 1 0.3 0.1 --out benchmarks/results/class_means_count_weight.json
        # 26 minutes on 2 cores shared with another benchmark (the embeddings 21 of them)

Run on demand, never as a test; docs/aggregators.md and docs/benchmarks.md quote its output
(benchmarks/results/class_means_rules.json). The scores use the public split's TRUE labels and
the evaluation split: this is how the rule was chosen (docs/benchmarks.md lists it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import platform
import subprocess
import sys
import time

import numpy as np

#: (features, dims, sigmas) per dataset: sigma 5.72 / 10.84 / 3.04 = eps 1 / 0.5 / 2 at delta
#: 1e-5 with the tight conversion (the utility benchmark's calibration); 3.0 = the digits tests'
SETTINGS = {
    "fashion-mnist": ("scatternet", 512, (0.0, 10.84, 5.72, 3.04)),
    "digits": ("none", 16, (0.0, 1.0, 3.0, 6.0)),
}


def embeddings(name: str):
    from pate.teachers.data import load_pate_data
    from pate.teachers.features import feature_data
    from pate.teachers.public_embedding import public_pca_embedding

    features, dims, _ = SETTINGS[name]
    data = load_pate_data(name)
    front = feature_data(data, features)
    public, private, evaluation = public_pca_embedding(
        front.public.x, front.private.x, front.evaluation.x, dims=dims
    )
    return data, public, private, evaluation


def compare(name: str, releases: int, count_weights=(1.0,)) -> list[dict]:
    from pate.core.labelling_rules import public_logistic
    from pate.core.mean_release import noisy_class_means
    from pate.core.tuned_defaults import LOGISTIC_RIDGE

    start = time.perf_counter()
    data, public, private, evaluation = embeddings(name)
    print(f"{name}: embeddings {time.perf_counter() - start:.0f} s", flush=True)
    rows = []
    for kappa, listed in ((k, s) for k in count_weights for s in SETTINGS[name][2]):
        sigma = listed * math.sqrt((1.0 + kappa**2) / 2.0)  # the same eps as listed at 1
        scores = {"lda": [], "logistic": []}
        for seed in range(100, 100 + (1 if sigma == 0 else releases)):
            release = noisy_class_means(
                public,
                private,
                data.private.y,
                sigma=sigma or 1e-12,
                count_weight=kappa,
                num_classes=data.num_classes,
                rng=np.random.default_rng(seed),
            )
            for rule, labeller in (
                ("lda", release),
                ("logistic", public_logistic(release, public)),
            ):
                scores[rule].append(
                    (
                        float(np.mean(labeller.predict(public) == data.public.y)),
                        float(np.mean(labeller.predict(evaluation) == data.evaluation.y)),
                    )
                )
        for rule, values in scores.items():
            values = np.array(values)
            rows.append(
                {
                    "dataset": name,
                    "count_weight": kappa,
                    "sigma": round(sigma, 6),
                    "sigma_at_count_weight_1": listed,
                    "rule": rule,
                    "ridge": LOGISTIC_RIDGE if rule == "logistic" else None,
                    "releases": len(values),
                    "private_records": int(len(private)),
                    "dims": int(public.shape[1]),
                    "public_right_mean": round(float(values[:, 0].mean()), 4),
                    "public_right": [round(v, 4) for v in values[:, 0]],
                    "evaluation_right_mean": round(float(values[:, 1].mean()), 4),
                }
            )
            print(
                f"{name} kappa {kappa:g} sigma {sigma:>7.4f}: {rule:8s} public "
                f"{values[:, 0].mean():.4f} "
                f"evaluation {values[:, 1].mean():.4f} ({len(values)} releases)",
                flush=True,
            )
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", choices=tuple(SETTINGS), default=list(SETTINGS))
    parser.add_argument(
        "--releases",
        type=int,
        default=3,
        help="releases (fresh noise seeds) per sigma > 0 (default 3)",
    )
    parser.add_argument(
        "--count-weights",
        type=float,
        nargs="+",
        default=[1.0],
        metavar="K",
        help="count weights kappa of the release, each at the listed sigmas' eps (default 1)",
    )
    parser.add_argument("--out", default="benchmarks/results/class_means_rules.json")
    args = parser.parse_args(argv)
    if args.releases < 1:
        parser.error(f"--releases must be at least 1, got {args.releases}")
    bad = [k for k in args.count_weights if not (math.isfinite(k) and k > 0)]
    if bad:
        parser.error(f"--count-weights must be > 0, got {bad[0]:g}")

    start = time.perf_counter()
    rows = [
        row for name in args.datasets for row in compare(name, args.releases, args.count_weights)
    ]
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    meta = {
        "argv": sys.argv[1:] if argv is None else list(argv),
        "commit": commit,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "seconds": round(time.perf_counter() - start, 1),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "meta": meta}, indent=1) + "\n")
    print(f"wrote {out} ({meta['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
