"""pate.analysis.private_knn: the sampled Gaussian mechanism's RDP and the Private-kNN cost.

* integer orders equal dp_accounting's RDP (PoissonSampledDpEvent(GaussianDpEvent)) to 1e-9
  relative (1e-14 absolute for values near 0, where dp_accounting's own log-space rounding
  dominates);
* fractional orders: dp_accounting 0.6.0 sums the *magnitudes* of the series terms (an upper
  bound, loose at small orders, and +inf where 1000 terms do not converge); ours keeps the signs:
  never above it, equal to it (1e-9) at orders >= 50 where the negative terms are negligible, and
  equal to a direct quadrature of A_alpha (to 1e-11), never below it, with the reverse direction
  B_alpha <= A_alpha ([MTZ19]);
* limits gamma = 1 and gamma -> 0, monotonicity in gamma and z, the Private-kNN composite, the
  event, calibration and validation.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import integrate

from pate import analysis
from pate.analysis import private_knn as pk
from pate.analysis.orders import DEFAULT_ORDERS

ORDERS = DEFAULT_ORDERS
INTEGER = np.array([float(o).is_integer() for o in ORDERS])
GRID_Q = [1e-3, 0.01, 0.05, 0.1, 0.5, 0.9, 0.999]
GRID_Z = [0.5, 1.0, 2.0, 5.0, 20.0, 50.0]


def _dp_accounting():
    return pytest.importorskip("dp_accounting", reason="dp_accounting is not installed")


def _reference(q, z, orders):
    dp = _dp_accounting()
    logging.getLogger("absl").setLevel(logging.ERROR)  # its non-convergence warnings
    acc = dp.rdp.RdpAccountant(list(map(float, orders)))
    acc.compose(dp.PoissonSampledDpEvent(q, dp.GaussianDpEvent(z)))
    return np.asarray(acc._rdp, dtype=np.float64)


def _quadrature(q, z, alpha, power):
    """log(E_{mu0}[(mu/mu0)^power]) / (alpha - 1) by direct integration of the A - 1 form."""

    def f(y):
        log_phi = -y * y / (2 * z * z) - math.log(z * math.sqrt(2 * math.pi))
        return math.exp(log_phi) * math.expm1(
            power * math.log1p(q * math.expm1((2 * y - 1) / (2 * z * z)))
        )

    value, _ = integrate.quad(
        f, -40 * z, alpha + 40 * z, points=[0.0, 0.5, alpha], epsabs=0, epsrel=1e-12, limit=1000
    )
    return math.log1p(value) / (alpha - 1)


def _sgm(q, z, orders=ORDERS):
    return pk.sampled_gaussian_rdp(sampling_rate=q, noise_multiplier=z, orders=orders)


@pytest.mark.parametrize("q", GRID_Q)
def test_integer_orders_equal_dp_accounting(q):
    for z in GRID_Z:
        ours, ref = _sgm(q, z)[INTEGER], _reference(q, z, ORDERS[INTEGER])
        np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=1e-14)
        assert np.all(ours >= ref * (1 - 1e-9) - 1e-14)  # never below (beyond its rounding)


@pytest.mark.parametrize(
    "q, z, alpha",
    [
        (0.001, 50.0, 80),
        (0.001, 20.0, 80),
        (0.01, 2.0, 33),
        (0.05, 20.0, 45),
        (0.3, 0.7, 6),
        (0.5, 0.5, 200),
    ],
)
def test_integer_orders_are_exact_upper_bounds(q, z, alpha):
    """Against the binomial sum in 50-digit arithmetic: ours is above it by at most the rounding
    margin (where dp_accounting's float sum is off by up to ~1e-8 relative near 0)."""
    mp = pytest.importorskip("mpmath", reason="mpmath is not installed")
    mp.mp.dps = 50
    qq, zz = mp.mpf(q), mp.mpf(z)
    exact = float(
        mp.log(
            mp.fsum(
                mp.binomial(alpha, j)
                * (1 - qq) ** (alpha - j)
                * qq**j
                * mp.e ** ((j * j - j) / (2 * zz * zz))
                for j in range(alpha + 1)
            )
        )
        / (alpha - 1)
    )
    ours = float(_sgm(q, z, [float(alpha)])[0])
    assert exact <= ours <= exact * (1 + 1e-12) + 2.0**-47 / (alpha - 1)


@pytest.mark.parametrize("q", GRID_Q)
def test_fractional_orders_against_dp_accounting(q):
    frac = ~INTEGER
    for z in GRID_Z:
        ours, ref = _sgm(q, z)[frac], _reference(q, z, ORDERS[frac])
        finite = np.isfinite(ref)
        assert np.all(ours[finite] <= ref[finite] * (1 + 1e-9) + 1e-14)
        large = finite & (ORDERS[frac] >= 50)
        np.testing.assert_allclose(ours[large], ref[large], rtol=1e-9, atol=1e-14)
        assert np.all(np.isfinite(ours))


@pytest.mark.parametrize(
    "q, z, alpha",
    [
        (0.1, 1.0, 1.5),
        (0.5, 1.0, 1.1),
        (0.05, 2.0, 3.7),
        (0.3, 5.0, 10.5),
        (0.01, 0.8, 2.5),
        (0.9, 2.0, 4.5),
        (0.5, 5.0, 2.0),
        (0.5, 0.5, 1.3),
        (0.02, 20.0, 7.0),
        (0.2, 3.0, 3.0),
    ],
)
@pytest.mark.filterwarnings("ignore::scipy.integrate.IntegrationWarning")
def test_equals_quadrature_and_dominates_the_reverse_divergence(q, z, alpha):
    ours = float(_sgm(q, z, [alpha])[0])
    forward = _quadrature(q, z, alpha, alpha)  # D_alpha(mu || mu0)
    reverse = _quadrature(q, z, alpha, 1.0 - alpha)  # D_alpha(mu0 || mu)
    assert ours == pytest.approx(forward, rel=1e-11)
    assert ours >= forward * (1 - 1e-13)
    assert reverse <= forward


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    q=st.floats(1e-4, 1.0),
    z=st.floats(0.5, 50.0),
    orders=st.lists(st.sampled_from(list(ORDERS)), min_size=1, max_size=4, unique=True),
)
def test_never_below_dp_accounting_where_it_is_exact(q, z, orders):
    orders = np.array(sorted(orders))
    ours, ref = _sgm(q, z, orders), _reference(q, z, orders)
    integer = np.array([float(o).is_integer() for o in orders])
    # Integer orders: dp_accounting's sum is exact; ours never falls below it.
    assert np.all(ours[integer] >= ref[integer] * (1 - 1e-9) - 1e-14)
    np.testing.assert_allclose(ours[integer], ref[integer], rtol=1e-9, atol=1e-14)
    # Fractional orders: dp_accounting's sum of magnitudes is an upper bound of the truth.
    finite = np.isfinite(ref) & ~integer
    assert np.all(ours[finite] <= ref[finite] * (1 + 1e-9) + 1e-14)
    assert np.all(np.isfinite(ours)) and np.all(ours >= 0)


def test_limits():
    for z in (0.5, 3.0, 40.0):
        np.testing.assert_array_equal(_sgm(1.0, z), ORDERS / (2 * z * z))
        np.testing.assert_array_equal(_sgm(0.0, z), np.zeros(ORDERS.size))
        # gamma -> 1 tends to the Gaussian; gamma -> 0 to 0 (like gamma^2 alpha / (2 z^2) for
        # small orders and large z)
        np.testing.assert_allclose(_sgm(1 - 1e-9, z), ORDERS / (2 * z * z), rtol=1e-6)
        if z >= 3.0:
            assert np.all(_sgm(1e-8, z, ORDERS[ORDERS <= 4]) <= 1e-12)
        assert np.all(_sgm(1e-10, z) <= _sgm(1e-6, z))
    small = np.array([2.0, 3.0])
    np.testing.assert_allclose(
        _sgm(1e-4, 50.0, small), 1e-8 * small / (2 * 50.0**2), rtol=1e-3, atol=1e-14
    )


def test_monotone_in_sampling_rate_and_noise():
    qs = [0.001, 0.01, 0.05, 0.2, 0.5, 0.9, 1.0]
    for z in (0.7, 2.0, 10.0):
        curves = np.array([_sgm(q, z) for q in qs])
        assert np.all(np.diff(curves, axis=0) >= -1e-15)
    for q in (0.01, 0.3):
        curves = np.array([_sgm(q, z) for z in (0.5, 1.0, 2.0, 8.0, 30.0)])
        assert np.all(np.diff(curves, axis=0) <= 1e-15)
    assert np.all(np.diff(_sgm(0.05, 2.0)) >= -1e-15)  # non-decreasing in the order


def test_private_knn_is_the_sampled_gaussian_at_the_joint_noise_multiplier():
    for s1, s2, q in [(100.0, 30.0, 0.05), (150.0, 50.0, 0.1), (3.0, 2.0, 0.5)]:
        z = 1.0 / math.sqrt(1 / s1**2 + 2 / s2**2)
        assert pk.private_knn_noise_multiplier(sigma1=s1, sigma2=s2) == pytest.approx(z, rel=1e-15)
        np.testing.assert_array_equal(
            pk.private_knn_query_rdp(sampling_rate=q, sigma1=s1, sigma2=s2, orders=ORDERS),
            _sgm(q, z),
        )


def test_event_charges_every_asked_query():
    answered = np.array([True, False, False, True, False])
    event = pk.private_knn_event(
        answered=answered,
        k=300,
        sampling_rate=0.05,
        threshold=200,
        sigma1=100,
        sigma2=30,
        orders=ORDERS,
    )
    one = pk.private_knn_query_rdp(sampling_rate=0.05, sigma1=100, sigma2=30, orders=ORDERS)
    assert event.mechanism == "private-knn" and event.queries == 5 and event.answered == 2
    np.testing.assert_allclose(event.rdp, 5 * one, rtol=1e-15)
    np.testing.assert_array_equal(event.rdp, event.rdp_data_independent)
    assert event.params == {
        "k": 300,
        "sampling_rate": 0.05,
        "threshold": 200.0,
        "sigma1": 100.0,
        "sigma2": 30.0,
    }
    composed = analysis.RdpAccountant().compose(event, event)
    np.testing.assert_allclose(composed.rdp(False), 10 * one, rtol=1e-14)


def test_calibration_meets_the_target_and_refuses_the_unreachable():
    kw = dict(delta=1e-5, num_queries=1000, sampling_rate=0.05, sigma1=100.0)
    sigma2 = pk.calibrate_private_knn_sigma2(eps=1.0, **kw)
    cost = lambda s2: analysis.eps_from_rdp(  # noqa: E731
        1000 * pk.private_knn_query_rdp(sampling_rate=0.05, sigma1=100.0, sigma2=s2, orders=ORDERS),
        orders=ORDERS,
        delta=1e-5,
    )[0]
    assert cost(sigma2) <= 1.0 < cost(sigma2 * (1 - 1e-9))
    with pytest.raises(ValueError, match="unreachable with sigma1=5.0"):
        pk.calibrate_private_knn_sigma2(eps=1.0, **{**kw, "sigma1": 5.0})


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (
            dict(sampling_rate=1.5, noise_multiplier=1.0, orders=[2.0]),
            ValueError,
            r"sampling_rate must lie in \[0, 1\], got 1.5",
        ),
        (
            dict(sampling_rate=0.1, noise_multiplier=0.0, orders=[2.0]),
            ValueError,
            "noise_multiplier must be > 0, got 0.0",
        ),
        (
            dict(sampling_rate=0.1, noise_multiplier=1.0, orders=[1.0]),
            ValueError,
            "orders must all be > 1",
        ),
        (
            dict(sampling_rate="0.1", noise_multiplier=1.0, orders=[2.0]),
            TypeError,
            "sampling_rate must be a real number",
        ),
    ],
)
def test_validation_names_the_argument(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        pk.sampled_gaussian_rdp(**kwargs)
    with pytest.raises(TypeError):
        pk.sampled_gaussian_rdp(0.1, 1.0, [2.0])  # keyword-only


def test_private_knn_validation():
    with pytest.raises(ValueError, match="sigma2 must be > 0, got -1.0"):
        pk.private_knn_query_rdp(sampling_rate=0.1, sigma1=1.0, sigma2=-1.0, orders=[2.0])
    with pytest.raises(ValueError, match="k must be >= 1, got 0"):
        pk.private_knn_event(
            answered=[True], k=0, sampling_rate=0.1, threshold=1, sigma1=1, sigma2=1
        )
    with pytest.raises(ValueError, match="histograms must hold non-negative integer counts"):
        pk.private_knn_log_pr_answered(np.array([[0.5, 1.0]]), threshold=1, sigma1=1)
