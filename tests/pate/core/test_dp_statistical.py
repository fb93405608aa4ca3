"""Statistical differential-privacy tests of the aggregators (and of Private-kNN, at the end).

For neighbouring vote vectors (one teacher moves its vote from class a to class b) the
empirical output distributions over many noise draws must satisfy, for every set S of outputs,

    Pr[M(v) in S] <= e^eps Pr[M(v') in S] + delta    (and with v, v' swapped),

where (eps, delta) is the guarantee claimed by ``pate.analysis`` for one query (data-independent
RDP converted at delta; LNMax: pure 2/scale). Sampling error is handled with one-sided
Clopper-Pearson bounds (the test fails only if the *lower* bound of the left side exceeds the
bound computed from the *upper* confidence bound of the right side). The same checker must reject
a mechanism whose noise is 10x smaller than claimed, so the test has power.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from pate import analysis, mechanisms
from pate.analysis.private_knn import private_knn_query_rdp
from pate.core.aggregators import aggregate, interactive_gnmax
from pate.core.knn import knn_votes

DRAWS = 200_000
ALPHA = 1e-7  # per bound; with a fixed seed the test is deterministic anyway
ORDERS = analysis.DEFAULT_ORDERS
DELTA = 1e-5


def _histogram(labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Counts of outputs -1, 0, ..., num_classes-1."""
    return np.bincount(labels + 1, minlength=num_classes + 1)


def _cp_lower(k, n):
    return 0.0 if k == 0 else stats.beta.ppf(ALPHA, k, n - k + 1)


def _cp_upper(k, n):
    return 1.0 if k == n else stats.beta.ppf(1 - ALPHA, k + 1, n - k)


def _violations(counts_a, counts_b, eps, delta):
    """Sets of outputs on which the empirical distributions contradict (eps, delta)-DP."""
    bad = []
    outputs = range(counts_a.size)
    for r in range(1, counts_a.size + 1):
        for subset in itertools.combinations(outputs, r):
            ka, kb = counts_a[list(subset)].sum(), counts_b[list(subset)].sum()
            for k1, k2 in ((ka, kb), (kb, ka)):
                if _cp_lower(k1, DRAWS) > np.exp(eps) * _cp_upper(k2, DRAWS) + delta:
                    bad.append(subset)
    return bad


def _eps_at_delta(rdp):
    eps, _ = analysis.eps_from_rdp(rdp, orders=ORDERS, delta=DELTA)
    return float(eps)


def _run(mechanism, votes, seed, **params):
    tiled = np.tile(np.asarray(votes)[None, :], (DRAWS, 1))
    rng = np.random.default_rng(seed)
    params["orders"] = [2.0]  # the cost of 200k identical queries is not what is tested here
    if mechanism == "interactive-gnmax":
        student = np.tile(np.asarray(params.pop("student"))[None, :], (DRAWS, 1))
        return interactive_gnmax(tiled, student_probabilities=student, rng=rng, **params).labels
    return aggregate(mechanism, tiled, rng=rng, **params).labels


# Neighbouring pairs near a decision boundary, where the output distribution moves most.
PAIRS = [
    (np.array([5, 5, 0]), np.array([4, 6, 0])),
    (np.array([6, 4, 0]), np.array([5, 4, 1])),
]


def _claimed_eps(mechanism, votes, params):
    one = np.asarray(votes)[None, :]
    if mechanism == "lnmax":
        return 2.0 / params["scale"], 0.0  # pure DP ([P17])
    if mechanism == "gnmax":
        return _eps_at_delta(
            analysis.gnmax_rdp(one, sigma=params["sigma"], orders=ORDERS, data_dependent=False)[0]
        ), DELTA
    # Threshold check for the query + GNMax step (worst case: answered).
    rdp = analysis.confident_gnmax_rdp(
        one,
        threshold=params["threshold"],
        sigma1=params["sigma1"],
        sigma2=params["sigma2"],
        orders=ORDERS,
        answered=np.array([True]),
        data_dependent=False,
    )
    return _eps_at_delta(rdp), DELTA


CASES = [
    ("lnmax", dict(scale=2.0)),
    ("gnmax", dict(sigma=2.0)),
    ("confident-gnmax", dict(threshold=6.0, sigma1=2.0, sigma2=2.0)),
    (
        "interactive-gnmax",
        dict(
            threshold=3.0, sigma1=2.0, sigma2=2.0, student_confidence=0.5, student=[0.1, 0.3, 0.6]
        ),
    ),
]


@pytest.mark.parametrize("mechanism, params", CASES, ids=[c[0] for c in CASES])
def test_neighbouring_outputs_within_claimed_bound(mechanism, params):
    for i, (v, w) in enumerate(PAIRS):
        assert np.abs(v - w).sum() == 2 and v.sum() == w.sum()  # one teacher changed its vote
        eps, delta = _claimed_eps(mechanism, v, params)
        counts_v = _histogram(_run(mechanism, v, 100 + i, **dict(params)), 3)
        counts_w = _histogram(_run(mechanism, w, 200 + i, **dict(params)), 3)
        assert _violations(counts_v, counts_w, eps, delta) == []
        # The distributions really differ (the test is not comparing identical things).
        assert np.any(np.abs(counts_v - counts_w) > 5 * np.sqrt(DRAWS) / 10)


@pytest.mark.parametrize("mechanism, params", CASES, ids=[c[0] for c in CASES])
def test_checker_rejects_ten_times_too_little_noise(mechanism, params):
    """Power: the claimed eps of the stated noise, but the mechanism runs with noise / 10."""
    v, w = PAIRS[0] if mechanism != "confident-gnmax" else PAIRS[1]
    eps, delta = _claimed_eps(mechanism, v, params)
    weak = {
        k: (x / 10 if k in ("scale", "sigma", "sigma1", "sigma2") else x) for k, x in params.items()
    }
    counts_v = _histogram(_run(mechanism, v, 1, **dict(weak)), 3)
    counts_w = _histogram(_run(mechanism, w, 2, **dict(weak)), 3)
    assert _violations(counts_v, counts_w, eps, delta) != []


def test_lnmax_pure_bound_is_nearly_tight():
    """LNMax's pure (2/scale) bound is attained up to a modest factor on a tied pair."""
    scale = 2.0
    v, w = PAIRS[0]
    pv = _histogram(_run("lnmax", v, 7, scale=scale), 3) / DRAWS
    pw = _histogram(_run("lnmax", w, 8, scale=scale), 3) / DRAWS
    log_ratio = np.max(np.abs(np.log(pv[1:3] / pw[1:3])))
    assert 0.25 * (2 / scale) < log_ratio <= 2 / scale


# ------------------------------------------------------------------------------ Private-kNN
# One query of the full mechanism (Poisson sample, kNN histogram, Confident-GNMax step).
# Neighbours: D (records of class 0 at distances 1..5 from the query) and D + {x}, x of class 1
# at distance 0 (the nearest record: whenever it is sampled it is the 1-nearest neighbour and
# moves the histogram from e_0 to e_1); the claim is pate.analysis.private_knn's data-independent
# RDP converted at delta.

KNN_PARAMS = {"k": 1, "sampling_rate": 0.5, "threshold": 0.5, "sigma1": 2.0, "sigma2": 2.0}
KNN_RECORDS = np.arange(1.0, 6.0)[:, None]  # class 0 at distances 1..5 from the query at 0
KNN_X = np.array([[0.0]])  # class 1, the nearest record


def _knn_run(with_x: bool, params: dict, seed: int) -> np.ndarray:
    """Counts of the outputs -1, 0, 1 over DRAWS independent runs of the one-query mechanism."""
    rng = np.random.default_rng(seed)
    private = np.vstack([KNN_X, KNN_RECORDS]) if with_x else KNN_RECORDS
    labels = np.array([1, 0, 0, 0, 0, 0]) if with_x else np.zeros(5, dtype=np.int64)
    queries = np.zeros((DRAWS, 1))  # the same query, DRAWS fresh samples
    votes = knn_votes(
        queries,
        private,
        labels,
        k=params["k"],
        sampling_rate=params["sampling_rate"],
        num_classes=2,
        rng=rng,
    )
    spec = mechanisms.get("private-knn")
    out, _, _ = spec.draw(votes, spec.validate(params), rng)
    return np.bincount(out + 1, minlength=3)


def _knn_claimed_eps(params) -> float:
    rdp = private_knn_query_rdp(
        sampling_rate=params["sampling_rate"],
        sigma1=params["sigma1"],
        sigma2=params["sigma2"],
        orders=ORDERS,
    )
    return float(analysis.eps_from_rdp(rdp, orders=ORDERS, delta=DELTA)[0])


def test_private_knn_neighbouring_outputs_within_claimed_bound():
    eps = _knn_claimed_eps(KNN_PARAMS)
    assert 0.5 < eps < 6.0  # a claim the test can contradict
    counts_d, counts_dx = _knn_run(False, KNN_PARAMS, 1), _knn_run(True, KNN_PARAMS, 2)
    assert _violations(counts_d, counts_dx, eps, DELTA) == []
    assert np.any(np.abs(counts_d - counts_dx) > 5 * np.sqrt(DRAWS) / 10)  # they do differ


def test_private_knn_checker_rejects_ten_times_too_little_noise():
    eps = _knn_claimed_eps(KNN_PARAMS)
    weak = {**KNN_PARAMS, "sigma1": KNN_PARAMS["sigma1"] / 10, "sigma2": KNN_PARAMS["sigma2"] / 10}
    counts_d, counts_dx = _knn_run(False, weak, 3), _knn_run(True, weak, 4)
    assert _violations(counts_d, counts_dx, eps, DELTA) != []
