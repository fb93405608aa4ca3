"""benchmarks/votes_fmnist.py: its vote counts, its shards and the teacher that starts from the
released rule (a ridge towards it: the rule itself as the ridge grows, logistic regression as
it vanishes)."""

from __future__ import annotations

import numpy as np


def test_vote_counts_count_each_teachers_answer_once(load_benchmark):
    votes = load_benchmark("votes_fmnist")
    counts = votes.vote_counts([[0, 2, 1], [0, 1, 1], [2, 1, 1]], 3)
    np.testing.assert_array_equal(counts, [[2, 0, 1], [0, 2, 1], [0, 3, 0]])


def test_shards_are_disjoint_and_cover_every_record(load_benchmark):
    parts = load_benchmark("votes_fmnist").shards(103, 10)
    assert len(parts) == 10
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(103))


def _data():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 400)
    u = rng.normal(size=(400, 4)) * 0.3 + np.eye(4)[y] * 0.5
    return u, y


def test_a_strong_ridge_keeps_the_released_rule(load_benchmark):
    votes = load_benchmark("votes_fmnist")
    u, y = _data()
    rule = np.arange(12.0).reshape(3, 4) / 10
    weights, _ = votes.prior_logistic(u, y, rule, np.zeros(3), lam=1e6)
    np.testing.assert_allclose(weights, rule, atol=1e-4)


def test_a_weak_ridge_is_logistic_regression_towards_the_rule(load_benchmark):
    """lam / 2 ||W - W0||^2 with W0 = 0 is scikit-learn's ridge with C = 1 / (n lam)."""
    from sklearn.linear_model import LogisticRegression

    votes = load_benchmark("votes_fmnist")
    u, y = _data()
    weights, bias = votes.prior_logistic(u, y, np.zeros((3, 4)), np.zeros(3), lam=1e-2)
    reference = LogisticRegression(C=1 / (len(y) * 1e-2), tol=1e-10, max_iter=10_000).fit(u, y)
    np.testing.assert_allclose(weights, reference.coef_, atol=1e-3)
    np.testing.assert_allclose(
        bias - bias.mean(), reference.intercept_ - reference.intercept_.mean(), atol=1e-3
    )
