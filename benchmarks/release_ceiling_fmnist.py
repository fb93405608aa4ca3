"""What limits the class-means release on Fashion-MNIST (issue #52), measured: its noiseless
ceiling, the ceilings of richer linear rules on the same features, and what two more Gaussian
releases buy.

The held-out protocol of ``benchmarks/utility_holdout.py``: private = the FIRST 50000 training
images (their labels are the only private labels read), scored on the LAST 10000 training images
(never used otherwise); public = the first 9000 test images (no labels read). The features are
the class-means config's (``configs/fashion_mnist_class_means.toml``): ScatterNet, standardised
with public statistics, the first 512 public principal axes, then clipped and scaled with the
public geometry (u, ||u|| <= 1; ``pate.core.mean_release``). Rows, each the accuracy of a
labelling rule on the held-out images (no student is trained):

* ``release exact, logistic`` / ``release exact, lda``: the config's two rules read from the
  EXACT class sums (no noise): the release's ceiling at any epsilon.
* ``lda, private within-class covariance``: linear discriminant analysis with the private rows'
  own pooled within-class covariance (non-private): the ceiling of a second release of the
  pooled second moments (the issue's first suggestion).
* ``logistic, private rows`` (ridge 1e-4, 1e-5): the same objective as the release's logistic
  rule, E[logsumexp(W u + b)] - <W, S / N> - <b, pi> + ridge ||W||^2 / 2, with the expectation
  over the private rows instead of the public ones: multinomial logistic regression on the
  private rows (non-private).
* ``logistic, marginal of n private rows``: the expectation over the first n private rows
  only (their labels unread), the class sums of all: how the ceiling grows with the marginal's
  sample (the release's rule has the 9000 public rows').
* ``release eps E`` (3 draws): the class-means release at the config's count weight and noise
  calibrated to (E, 1e-5), its logistic rule.
* ``release + 2 corrections eps E`` (3 draws): the same budget split in half between the release
  and two further Gaussian releases of M_t = sum_i softmax(W_t u_i + b_t) [u_i, beta] at the
  rule's iterate (each record adds a vector of norm <= sqrt(1 + beta^2), beta = 0.3), each
  followed by the rule refitted with its public-marginal gradient corrected by M_t / N (the
  noise projected off the softmax's invariant direction; ridge 1e-4). Every release is a
  Gaussian mechanism of noise z_i times its sensitivity, so the composition's RDP is
  alpha / (2 z^2) with 1 / z^2 = sum 1 / z_i^2 -- exactly the single release's at the
  calibrated noise: the same (E, 1e-5). A measurement, not a shipped mechanism.

Run on demand, never as a test (about 5 minutes on 2 cores with the feature cache warm):

    .venv/bin/python benchmarks/release_ceiling_fmnist.py --cache runs/.feature-cache \\
        --out benchmarks/results/release_ceiling_fmnist.json

Every choice here looked at the held-out images' labels (ridges, split, beta, steps): the rows
are measurements of limits, not tuned results.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import numpy as np

DIMS, COUNT_WEIGHT, BETA, DELTA = 512, 0.3, 0.3, 1e-5
PRIVATE, DRAWS = 50_000, 3


def fit_objective(u, moments, prior, *, ridge, start=None):
    """argmin_W,b mean_u logsumexp(W u + b) - <W, moments> - <b, prior> + ridge ||W||^2 / 2."""
    from scipy.optimize import minimize
    from scipy.special import logsumexp, softmax

    m, d = moments.shape

    def objective(theta):
        w, b = theta[: m * d].reshape(m, d), theta[m * d :]
        z = u @ w.T + b
        p = softmax(z, axis=1)
        value = logsumexp(z, axis=1).mean() - np.sum(w * moments) - b @ prior
        grad = p.T @ u / len(u) - moments + ridge * w
        return value + 0.5 * ridge * np.sum(w * w), np.concatenate(
            [grad.ravel(), p.mean(0) - prior]
        )

    x0 = np.zeros(m * d + m) if start is None else start
    options = {"maxiter": 3000, "maxcor": 30}
    return minimize(objective, x0, jac=True, method="L-BFGS-B", options=options).x


def accuracy_of(theta, u, y, m):
    d = u.shape[1]
    return float(np.mean((u @ theta[: m * d].reshape(m, d).T + theta[m * d :]).argmax(1) == y))


def embeddings(cache_dir, dims=DIMS):
    """(public, private, labels, held-out, labels) over the config's front-end at ``dims``."""
    from pate.teachers import feature_cache
    from pate.teachers.data import load_pate_data
    from pate.teachers.public_embedding import PublicFrontEnd

    data = load_pate_data("fashion-mnist")
    cache = None if cache_dir is None else feature_cache.FeatureCache(pathlib.Path(cache_dir))
    front, public = PublicFrontEnd.fit_transform(
        data.public.x, features="scatternet", dims=dims, cache=cache
    )
    train = front.embed(data.private.x, cache=cache)
    y = np.asarray(data.private.y)
    return public, train[:PRIVATE], y[:PRIVATE], train[PRIVATE:], y[PRIVATE:]


def measure(cache_dir=None) -> dict:
    from scipy.special import softmax

    from pate.analysis.class_means import calibrate_class_means_sigma
    from pate.core.labelling_rules import linear_discriminant, public_logistic
    from pate.core.mean_release import (
        class_sums,
        clipped_scaled,
        public_geometry,
        release_from_statistic,
    )

    public, private, y, held, y_held = embeddings(cache_dir)
    geometry = public_geometry(public)
    m = int(y.max()) + 1
    u_pub, u_priv, u_held = (
        clipped_scaled(np.asarray(a, np.float64), geometry) for a in (public, private, held)
    )
    sums = class_sums(private, y, num_classes=m, geometry=geometry, count_weight=COUNT_WEIGHT)
    rows = []

    def row(name, accuracy, **extra):
        rows.append({"rule": name, "accuracy_holdout": round(float(np.mean(accuracy)), 4), **extra})
        if np.size(accuracy) > 1:
            rows[-1]["std"] = round(float(np.std(accuracy, ddof=1)), 4)
        print(f"{name}: {rows[-1]['accuracy_holdout']:.4f}", file=sys.stderr, flush=True)

    exact = release_from_statistic(sums, geometry=geometry, sigma=1e-12, count_weight=COUNT_WEIGHT)
    row("release exact, logistic", np.mean(public_logistic(exact, public).predict(held) == y_held))
    row("release exact, lda", np.mean(linear_discriminant(exact, public).predict(held) == y_held))

    w_priv, w_held = geometry.whiten(private), geometry.whiten(held)  # LDA with private covariance
    means = np.stack([w_priv[y == j].mean(0) for j in range(m)])
    centred = w_priv - means[y]
    within = centred.T @ centred / len(y)
    weights = np.linalg.solve(within, means.T).T
    prior = np.bincount(y, minlength=m) / len(y)
    bias = np.log(prior) - 0.5 * np.einsum("jd,jd->j", weights, means)
    row(
        "lda, private within-class covariance",
        np.mean((w_held @ weights.T + bias).argmax(1) == y_held),
    )

    moments = np.eye(m)[y].T @ u_priv / len(y)
    for ridge in (1e-4, 1e-5):
        theta = fit_objective(u_priv, moments, prior, ridge=ridge)
        row(f"logistic, private rows, ridge {ridge:g}", accuracy_of(theta, u_held, y_held, m))
    for n in (9_000, 25_000):
        theta = fit_objective(u_priv[:n], moments, prior, ridge=1e-4)
        row(
            f"logistic, marginal of {n} private rows, ridge 0.0001",
            accuracy_of(theta, u_held, y_held, m),
        )

    for eps in (0.5, 1.0, 2.0, 4.0):
        sigma = calibrate_class_means_sigma(
            eps=eps, delta=DELTA, count_weight=COUNT_WEIGHT, conversion="tight"
        )
        z = sigma / np.sqrt(1 + COUNT_WEIGHT**2)  # noise over sensitivity
        plain, corrected = [], []
        for draw in range(DRAWS):
            rng = np.random.default_rng(1000 * draw + int(eps * 10))
            noisy = sums + sigma * rng.standard_normal(sums.shape)
            release = release_from_statistic(
                noisy, geometry=geometry, sigma=sigma, count_weight=COUNT_WEIGHT
            )
            plain.append(np.mean(public_logistic(release, public).predict(held) == y_held))
            if eps < 2:
                continue
            # half the budget to the release, a quarter to each correction (1/z^2 adds up)
            z0, zt = z * np.sqrt(2), z * 2
            noisy = sums + z0 * np.sqrt(1 + COUNT_WEIGHT**2) * rng.standard_normal(sums.shape)
            total = max(noisy[:, -1].sum() / COUNT_WEIGHT, 1.0)
            counts = np.maximum(noisy[:, -1] / COUNT_WEIGHT, 1.0)
            base_w, base_b = noisy[:, :-1] / total, counts / counts.sum()
            theta = fit_objective(u_pub, base_w, base_b, ridge=1e-4)
            d = u_pub.shape[1]
            for _ in range(2):
                w, b = theta[: m * d].reshape(m, d), theta[m * d :]
                p = softmax(u_priv @ w.T + b, axis=1)
                released = np.hstack([p.T @ u_priv, BETA * p.sum(0)[:, None]])
                released += zt * np.sqrt(1 + BETA**2) * rng.standard_normal(released.shape)
                p_pub = softmax(u_pub @ w.T + b, axis=1)
                fix_w = released[:, :-1] / total - p_pub.T @ u_pub / len(u_pub)
                fix_b = released[:, -1] / BETA / total - p_pub.mean(0)
                fix_w, fix_b = fix_w - fix_w.mean(0), fix_b - fix_b.mean()
                theta = fit_objective(
                    u_pub, base_w - fix_w, base_b - fix_b, ridge=1e-4, start=theta
                )
            corrected.append(accuracy_of(theta, u_held, y_held, m))
        row(f"release eps {eps:g}", plain, eps=eps, sigma=round(sigma, 4), draws=DRAWS)
        if corrected:
            row(f"release + 2 corrections eps {eps:g}", corrected, eps=eps, draws=DRAWS)
    return {"rows": rows}


PROTOCOL = (
    "private = first 50000 training images, scored on the last 10000; public = first 9000 test "
    "images"
)


def run_script(measure, *, doc: str, script: str, tuned_on: str, argv=None, **meta) -> int:
    """The command line of the held-out Fashion-MNIST measurements: ``--cache``, ``--out``;
    ``measure(cache)``'s results with their ``meta`` (commit, command, protocol, seconds,
    ``tuned_on`` and ``meta``), printed and written to ``--out``."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument(
        "--cache", default=None, help="a feature cache folder (runs/.feature-cache)"
    )
    parser.add_argument("--out", default=None, metavar="FILE.json")
    args = parser.parse_args(argv)
    here = pathlib.Path(__file__).resolve().parent
    for folder in (str(here), str(here.parent)):  # own_data beside this script; pate above it
        if folder not in sys.path:
            sys.path.insert(0, folder)
    start = time.perf_counter()
    results = measure(args.cache)
    import own_data  # benchmarks/, beside this script: its commit stamp

    results["meta"] = {
        "commit": own_data._commit(),
        "command": f"python benchmarks/{script} "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "protocol": PROTOCOL,
        **meta,
        "seconds": round(time.perf_counter() - start, 1),
        "tuned_on": tuned_on,
    }
    text = json.dumps(results, indent=1) + "\n"
    if args.out:
        pathlib.Path(args.out).write_text(text)
    print(text)
    return 0


def main(argv=None) -> int:
    return run_script(
        measure,
        doc=__doc__,
        script="release_ceiling_fmnist.py",
        tuned_on="every setting here (ridges, the budget split, beta, two corrections) looked at "
        "the held-out images",
        argv=argv,
    )


if __name__ == "__main__":
    sys.exit(main())
