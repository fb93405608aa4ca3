"""Property tests of the privacy arithmetic (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pate import analysis

ORDERS = analysis.DEFAULT_ORDERS
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def vote_matrices(draw, max_queries=12):
    seed = draw(st.integers(0, 2**32 - 1))
    teachers = draw(st.integers(1, 300))
    classes = draw(st.integers(2, 12))
    queries = draw(st.integers(1, max_queries))
    rng = np.random.default_rng(seed)
    concentration = draw(st.sampled_from([0.05, 0.3, 1.0, 5.0]))
    probs = rng.dirichlet(np.full(classes, concentration), size=queries)
    return np.stack([rng.multinomial(teachers, p) for p in probs])


sigmas = st.floats(0.5, 300.0)


@SETTINGS
@given(votes=vote_matrices(), sigma=sigmas)
def test_gnmax_data_dependent_never_exceeds_data_independent(votes, sigma):
    dep = analysis.gnmax_rdp(votes, sigma=sigma, orders=ORDERS)
    ind = analysis.gnmax_rdp(votes, sigma=sigma, orders=ORDERS, data_dependent=False)
    assert np.all(dep >= 0)
    assert np.all(dep <= ind)


@SETTINGS
@given(votes=vote_matrices(), sigma=sigmas, threshold=st.floats(0, 400))
def test_threshold_data_dependent_never_exceeds_data_independent(votes, sigma, threshold):
    dep = analysis.threshold_rdp(votes, threshold=threshold, sigma=sigma, orders=ORDERS)
    ind = analysis.threshold_rdp(
        votes, threshold=threshold, sigma=sigma, orders=ORDERS, data_dependent=False
    )
    assert np.all(dep >= 0)
    assert np.all(dep <= ind)


@SETTINGS
@given(votes=vote_matrices(), scale=st.floats(0.5, 200.0))
def test_lnmax_data_dependent_never_exceeds_data_independent(votes, scale):
    dep = analysis.lnmax_rdp(votes, scale=scale, orders=ORDERS)
    ind = analysis.lnmax_rdp(votes, scale=scale, orders=ORDERS, data_dependent=False)
    assert np.all(dep >= 0)
    assert np.all(dep <= ind * (1 + 1e-12))
    assert np.all(ind <= 2.0 / scale * (1 + 1e-12))  # pure 2/scale-DP caps every order


@SETTINGS
@given(votes=vote_matrices(), sigma=sigmas, threshold=st.floats(0, 400))
def test_rdp_non_decreasing_in_order(votes, sigma, threshold):
    for rdp in (
        analysis.gnmax_rdp(votes, sigma=sigma, orders=ORDERS),
        analysis.threshold_rdp(votes, threshold=threshold, sigma=sigma, orders=ORDERS),
        analysis.lnmax_rdp(votes, scale=sigma, orders=ORDERS),
    ):
        # (differences of subnormal values ~1e-320 are rounding, not a decrease)
        assert np.all(np.diff(rdp, axis=1) >= -1e-12 * np.abs(rdp[:, 1:]) - 1e-300)


@SETTINGS
@given(votes=vote_matrices(max_queries=8), sigma=sigmas, threshold=st.floats(0, 400))
def test_vectorized_equals_per_row(votes, sigma, threshold):
    fns = [
        lambda v: analysis.gnmax_log_q(v, sigma=sigma),
        lambda v: analysis.gnmax_rdp(v, sigma=sigma, orders=ORDERS),
        lambda v: analysis.threshold_log_pr_answered(v, threshold=threshold, sigma=sigma),
        lambda v: analysis.threshold_rdp(v, threshold=threshold, sigma=sigma, orders=ORDERS),
        lambda v: analysis.lnmax_log_q(v, scale=sigma),
        lambda v: analysis.lnmax_rdp(v, scale=sigma, orders=ORDERS),
    ]
    for fn in fns:
        whole = fn(votes)
        rows = np.concatenate([fn(votes[i : i + 1]) for i in range(votes.shape[0])])
        np.testing.assert_array_equal(whole, rows)


@SETTINGS
@given(votes=vote_matrices(max_queries=6), sigma=st.floats(5.0, 200.0), order=st.floats(1.5, 60.0))
def test_local_sensitivity_vectorized_equals_per_row(votes, sigma, order):
    teachers = int(votes[0].sum())
    whole = analysis.local_sensitivity_gnmax(votes, num_teachers=teachers, sigma=sigma, order=order)
    for i in range(votes.shape[0]):
        row = analysis.local_sensitivity_gnmax(
            votes[i : i + 1], num_teachers=teachers, sigma=sigma, order=order
        )
        np.testing.assert_allclose(whole[i], row[0], rtol=1e-12, atol=0)
    assert np.all(whole >= 0)
    assert np.all(analysis.smooth_sensitivity(whole, beta=0.1 / order) >= whole[:, 0])


@SETTINGS
@given(
    votes=vote_matrices(),
    sigma=sigmas,
    deltas=st.lists(st.floats(1e-12, 0.5), min_size=2, max_size=5),
)
def test_eps_non_increasing_in_delta_and_tight_below_classic(votes, sigma, deltas):
    rdp = analysis.gnmax_rdp(votes, sigma=sigma, orders=ORDERS).sum(axis=0)
    deltas = sorted(deltas)
    eps = [analysis.eps_from_rdp(rdp, orders=ORDERS, delta=d)[0] for d in deltas]
    assert all(a >= b for a, b in zip(eps, eps[1:]))
    for d in deltas:
        classic = analysis.eps_from_rdp(rdp, orders=ORDERS, delta=d)[0]
        tight = analysis.eps_from_rdp(rdp, orders=ORDERS, delta=d, conversion="tight")[0]
        assert 0 <= tight <= classic


@SETTINGS
@given(votes=vote_matrices(max_queries=30), sigma=sigmas)
def test_eps_monotone_in_queries(votes, sigma):
    for dd in (True, False):
        per_query = analysis.gnmax_rdp(votes, sigma=sigma, orders=ORDERS, data_dependent=dd)
        eps, _ = analysis.eps_from_rdp(np.cumsum(per_query, axis=0), orders=ORDERS, delta=1e-5)
        assert np.all(np.diff(eps) >= -1e-12)


@SETTINGS
@given(
    votes=vote_matrices(max_queries=30),
    sigma1=sigmas,
    sigma2=sigmas,
    threshold=st.floats(0, 400),
    seed=st.integers(0, 2**32 - 1),
)
def test_confident_gnmax_realised_cost_grows_with_answers(votes, sigma1, sigma2, threshold, seed):
    rng = np.random.default_rng(seed)
    small = rng.random(votes.shape[0]) < 0.5
    large = small | (rng.random(votes.shape[0]) < 0.5)
    kw = dict(threshold=threshold, sigma1=sigma1, sigma2=sigma2, orders=ORDERS)
    a = analysis.confident_gnmax_rdp(votes, answered=small, **kw)
    b = analysis.confident_gnmax_rdp(votes, answered=large, **kw)
    assert np.all(a <= b + 1e-15)
    ind = analysis.confident_gnmax_rdp(votes, answered=large, data_dependent=False, **kw)
    assert np.all(b <= ind * (1 + 1e-12))
    expected_ind = votes.shape[0] * ORDERS / (2 * sigma1**2) + large.sum() * ORDERS / sigma2**2
    np.testing.assert_allclose(ind, expected_ind, rtol=1e-12)


@SETTINGS
@given(eps=st.floats(0.05, 20.0), delta=st.floats(1e-10, 1e-2), queries=st.integers(1, 20000))
def test_calibration_never_overshoots_and_is_tight(eps, delta, queries):
    sigma = analysis.calibrate_gnmax_sigma(eps=eps, delta=delta, num_queries=queries)
    got = analysis.eps_from_rdp(queries * ORDERS / sigma**2, orders=ORDERS, delta=delta)[0]
    assert got <= eps
    smaller = sigma * (1 - 1e-9)
    assert analysis.eps_from_rdp(queries * ORDERS / smaller**2, orders=ORDERS, delta=delta)[0] > eps

    scale = analysis.calibrate_lnmax_scale(eps=eps, delta=delta, num_queries=queries)
    pure = 2 / scale
    rdp = queries * np.minimum(0.5 * pure**2 * ORDERS, pure)
    assert analysis.eps_from_rdp(rdp, orders=ORDERS, delta=delta)[0] <= eps

    answered = max(1, queries // 3)
    s1, s2 = analysis.calibrate_confident_gnmax(
        eps=eps, delta=delta, num_queries=queries, max_answered=answered
    )
    rdp = queries * ORDERS / (2 * s1**2) + answered * ORDERS / s2**2
    assert analysis.eps_from_rdp(rdp, orders=ORDERS, delta=delta)[0] <= eps


def test_calibration_refuses_an_unreachable_target():
    with pytest.raises(ValueError, match="unreachable"):
        analysis.calibrate_gnmax_sigma(eps=0.001, delta=1e-5, num_queries=10)
