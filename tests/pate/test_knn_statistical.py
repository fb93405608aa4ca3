"""Statistical DP test of Private-kNN (one query, the full mechanism: Poisson sample, kNN
histogram, Confident-GNMax step), in the style of test_dp_statistical.py.

Neighbours: D (records of class 0 at distances 1..5 from the query) and D + {x}, x of class 1 at
distance 0 (the nearest record, so whenever it is sampled it is the 1-nearest neighbour and moves
the histogram from e_0 to e_1). For every set S of outputs (-1 = not answered, 0, 1) the empirical
frequencies must satisfy Pr[M(D) in S] <= e^eps Pr[M(D') in S] + delta both ways, with (eps,
delta) the data-independent claim of ``pate.analysis.private_knn`` converted at delta; sampling
error is handled with Clopper-Pearson bounds. The same checker must reject the mechanism when it
runs with 10x less noise than claimed.
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy import stats

from pate import analysis, mechanisms
from pate.analysis.private_knn import private_knn_query_rdp
from pate.knn import knn_votes

DRAWS = 200_000
ALPHA = 1e-7
DELTA = 1e-5
ORDERS = analysis.DEFAULT_ORDERS
PARAMS = {"k": 1, "sampling_rate": 0.5, "threshold": 0.5, "sigma1": 2.0, "sigma2": 2.0}
RECORDS = np.arange(1.0, 6.0)[:, None]     # class 0 at distances 1..5 from the query at 0
X = np.array([[0.0]])                       # class 1, the nearest record


def _cp_lower(k, n):
    return 0.0 if k == 0 else stats.beta.ppf(ALPHA, k, n - k + 1)


def _cp_upper(k, n):
    return 1.0 if k == n else stats.beta.ppf(1 - ALPHA, k + 1, n - k)


def _violations(counts_a, counts_b, eps, delta):
    bad = []
    for r in range(1, counts_a.size + 1):
        for subset in itertools.combinations(range(counts_a.size), r):
            ka, kb = counts_a[list(subset)].sum(), counts_b[list(subset)].sum()
            for k1, k2 in ((ka, kb), (kb, ka)):
                if _cp_lower(k1, DRAWS) > np.exp(eps) * _cp_upper(k2, DRAWS) + delta:
                    bad.append(subset)
    return bad


def _run(with_x: bool, params: dict, seed: int) -> np.ndarray:
    """Counts of the outputs -1, 0, 1 over DRAWS independent runs of the one-query mechanism."""
    rng = np.random.default_rng(seed)
    private = np.vstack([X, RECORDS]) if with_x else RECORDS
    labels = np.array([1, 0, 0, 0, 0, 0]) if with_x else np.zeros(5, dtype=np.int64)
    queries = np.zeros((DRAWS, 1))           # the same query, DRAWS fresh samples
    votes = knn_votes(queries, private, labels, k=params["k"],
                      sampling_rate=params["sampling_rate"], num_classes=2, rng=rng)
    spec = mechanisms.get("private-knn")
    out, _, _ = spec.draw(votes, spec.validate(params), rng)
    return np.bincount(out + 1, minlength=3)


def _claimed_eps(params) -> float:
    rdp = private_knn_query_rdp(sampling_rate=params["sampling_rate"], sigma1=params["sigma1"],
                                sigma2=params["sigma2"], orders=ORDERS)
    return float(analysis.eps_from_rdp(rdp, orders=ORDERS, delta=DELTA)[0])


def test_neighbouring_outputs_within_claimed_bound():
    eps = _claimed_eps(PARAMS)
    assert 0.5 < eps < 6.0  # a claim the test can contradict
    counts_d, counts_dx = _run(False, PARAMS, 1), _run(True, PARAMS, 2)
    assert _violations(counts_d, counts_dx, eps, DELTA) == []
    assert np.any(np.abs(counts_d - counts_dx) > 5 * np.sqrt(DRAWS) / 10)  # they do differ


def test_checker_rejects_ten_times_too_little_noise():
    eps = _claimed_eps(PARAMS)
    weak = {**PARAMS, "sigma1": PARAMS["sigma1"] / 10, "sigma2": PARAMS["sigma2"] / 10}
    counts_d, counts_dx = _run(False, weak, 3), _run(True, weak, 4)
    assert _violations(counts_d, counts_dx, eps, DELTA) != []
