"""Bad input gets a clear ValueError/TypeError naming the argument, before any work."""

from __future__ import annotations

import numpy as np
import pytest

from pate import analysis

GOOD = np.array([[5, 3, 2], [10, 0, 0]])
ORD = analysis.DEFAULT_ORDERS


@pytest.mark.parametrize(
    "votes, error, match",
    [
        (np.array([[1.5, 8.5, 0.0]]), ValueError, "integer"),
        (np.array([[-1, 11, 0]]), ValueError, "non-negative"),
        (np.array([[5, 5, 0], [6, 5, 0]]), ValueError, "sum to the number of teachers"),
        (np.array([5, 3, 2]), ValueError, "2-D"),
        (np.array([[10], [10]]), ValueError, "at least 2 classes"),
        ("votes.npy", TypeError, "votes"),
        (np.array([["a", "b"]]), TypeError, "votes"),
        (np.array([[np.nan, 1.0]]), ValueError, "integer"),
    ],
)
@pytest.mark.parametrize(
    "fn",
    [
        lambda v: analysis.gnmax_rdp(v, sigma=10, orders=ORD),
        lambda v: analysis.threshold_rdp(v, threshold=5, sigma=10, orders=ORD),
        lambda v: analysis.lnmax_rdp(v, scale=10, orders=ORD),
        lambda v: analysis.confident_gnmax_rdp(v, threshold=5, sigma1=10, sigma2=10, orders=ORD),
        lambda v: analysis.gnmax_log_q(v, sigma=1),
    ],
)
def test_bad_votes(votes, error, match, fn):
    with pytest.raises(error, match=match) as info:
        fn(votes)
    assert "votes" in str(info.value)


def test_float_votes_with_integral_values_are_accepted():
    np.testing.assert_array_equal(
        analysis.gnmax_log_q(GOOD.astype(float), sigma=3), analysis.gnmax_log_q(GOOD, sigma=3)
    )


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(sigma=0), "sigma"),
        (dict(sigma=-1), "sigma"),
        (dict(sigma=float("nan")), "sigma"),
        (dict(sigma=float("inf")), "sigma"),
        (dict(sigma="1"), "sigma"),
        (dict(sigma=True), "sigma"),
    ],
)
def test_bad_sigma(kwargs, name):
    with pytest.raises((ValueError, TypeError), match=name):
        analysis.gnmax_rdp(GOOD, orders=ORD, **kwargs)


def test_bad_scale_threshold_sigmas():
    with pytest.raises(ValueError, match="scale"):
        analysis.lnmax_rdp(GOOD, scale=0, orders=ORD)
    with pytest.raises(ValueError, match="threshold"):
        analysis.threshold_rdp(GOOD, threshold=-1, sigma=1, orders=ORD)
    with pytest.raises(ValueError, match="sigma2"):
        analysis.confident_gnmax_rdp(GOOD, threshold=1, sigma1=1, sigma2=0, orders=ORD)
    with pytest.raises(ValueError, match="sigma"):
        analysis.confident_gnmax_rdp(GOOD, threshold=1, sigma1=-2, sigma2=1, orders=ORD)


@pytest.mark.parametrize(
    "orders, match",
    [
        ([1.0, 2.0], "> 1"),
        ([0.5], "> 1"),
        ([], "non-empty"),
        ([[2.0, 3.0]], "1-D"),
        ([2.0, float("inf")], "finite"),
        ("abc", "orders"),
    ],
)
def test_bad_orders(orders, match):
    with pytest.raises((ValueError, TypeError), match=match):
        analysis.gnmax_rdp(GOOD, sigma=1, orders=orders)


@pytest.mark.parametrize("delta", [0, 1, -0.1, 1.5, float("nan")])
def test_bad_delta(delta):
    with pytest.raises(ValueError, match="delta"):
        analysis.eps_from_rdp(np.ones(ORD.size), orders=ORD, delta=delta)


def test_bad_rdp_and_conversion():
    with pytest.raises(ValueError, match="one value per order"):
        analysis.eps_from_rdp(np.ones(3), orders=ORD, delta=1e-5)
    with pytest.raises(ValueError, match="non-negative"):
        analysis.eps_from_rdp(-np.ones(ORD.size), orders=ORD, delta=1e-5)
    with pytest.raises(ValueError, match="conversion"):
        analysis.eps_from_rdp(np.ones(ORD.size), orders=ORD, delta=1e-5, conversion="fast")


@pytest.mark.parametrize(
    "answered, error",
    [
        (np.array([True]), ValueError),
        (np.array([True, False, True]), ValueError),
        (np.array([[True, False]]), ValueError),
        (np.array([0.5, 1.0]), TypeError),
    ],
)
def test_bad_answered_mask(answered, error):
    with pytest.raises(error, match="answered"):
        analysis.confident_gnmax_rdp(
            GOOD, threshold=1, sigma1=1, sigma2=1, orders=ORD, answered=answered
        )


def test_bad_baseline():
    with pytest.raises(ValueError, match="baseline"):
        analysis.threshold_rdp(GOOD, threshold=1, sigma=1, orders=ORD, baseline=np.zeros((2, 2)))


def test_local_sensitivity_arguments():
    with pytest.raises(ValueError, match="num_teachers"):
        analysis.local_sensitivity_gnmax(GOOD, num_teachers=11, sigma=5, order=5)
    with pytest.raises(ValueError, match="order"):
        analysis.local_sensitivity_gnmax(GOOD, num_teachers=10, sigma=5, order=1)
    with pytest.raises(ValueError, match="beta"):
        analysis.smooth_sensitivity(np.ones(3), beta=-1)
    with pytest.raises(ValueError, match="1/\\(2 beta\\)"):
        analysis.gnss_rdp(beta=0.1, sigma_ss=1, order=6)


def test_lnmax_with_tiny_scale_does_not_overflow():
    rdp = analysis.lnmax_rdp(GOOD, scale=1e-4, orders=ORD)
    assert np.all(np.isfinite(rdp)) and np.all(rdp <= 2e4)
