"""benchmarks/release_ceiling_fmnist.py: its logistic objective over the private rows is
scikit-learn's multinomial logistic regression (the row that measures the non-private ceiling)."""

from __future__ import annotations

import numpy as np
import pytest


def test_the_objective_over_labelled_rows_is_logistic_regression(load_benchmark):
    """mean logsumexp(W u + b) - <W, S / N> - <b, pi> + ridge ||W||^2 / 2 is the mean cross
    entropy plus the ridge: the same W as LogisticRegression(C = 1 / (N ridge)), b up to the
    softmax's common shift."""
    from sklearn.linear_model import LogisticRegression

    ceiling = load_benchmark("release_ceiling_fmnist")
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 600)
    u = rng.normal(size=(600, 4)) * 0.3 + np.eye(4)[y] * 0.4
    moments = np.eye(3)[y].T @ u / len(y)
    prior = np.bincount(y) / len(y)
    theta = ceiling.fit_objective(u, moments, prior, ridge=1e-2)
    reference = LogisticRegression(C=1 / (len(y) * 1e-2), tol=1e-10, max_iter=10_000).fit(u, y)
    weights, bias = theta[:12].reshape(3, 4), theta[12:]
    np.testing.assert_allclose(weights, reference.coef_, atol=2e-4)
    np.testing.assert_allclose(
        bias - bias.mean(), reference.intercept_ - reference.intercept_.mean(), atol=2e-4
    )
    assert ceiling.accuracy_of(theta, u, y, 3) == pytest.approx(reference.score(u, y))


def test_the_scripts_write_their_results_with_what_produced_them(load_benchmark, tmp_path):
    """run_script (the command line of the three held-out measurements): the results, then
    their meta (commit, command, protocol, seconds, what the settings looked at)."""
    import json

    ceiling = load_benchmark("release_ceiling_fmnist")
    out = tmp_path / "r.json"
    code = ceiling.run_script(
        lambda cache: {"rows": [{"cache": cache}]},
        doc="first line\nmore",
        script="x.py",
        tuned_on="nothing",
        argv=["--cache", "c", "--out", str(out)],
        extra="kept",
    )
    written = json.loads(out.read_text())
    assert code == 0 and written["rows"] == [{"cache": "c"}]
    meta = written["meta"]
    assert meta["command"] == f"python benchmarks/x.py --cache c --out {out}"
    assert meta["protocol"] == ceiling.PROTOCOL and meta["extra"] == "kept"
    assert meta["tuned_on"] == "nothing" and meta["seconds"] >= 0 and meta["commit"]
