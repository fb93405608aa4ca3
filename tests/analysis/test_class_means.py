"""pate.analysis.class_means: the one Gaussian release of the noisy class sums.

* the RDP equals dp_accounting's RDP of GaussianDpEvent(sigma / sqrt(1 + kappa^2)) (a Gaussian
  mechanism of sensitivity Delta = sqrt(1 + kappa^2), kappa the count weight, has noise multiplier
  sigma / Delta) to 1e-9 relative on the default orders, for several kappa, and is never below it;
* the sensitivity is the largest change one record makes to the released matrix (checked on
  records, with the core's class_sums);
* the event: fields, one release whatever the number of queries, JSON round trip, composition;
* calibration meets the target (classic and tight conversions), is the smallest such sigma
  (to 1 %), composes with extra_rdp, and refuses the unreachable;
* validation names the argument.
"""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pate import analysis
from pate.analysis import class_means as cm
from pate.analysis.accountant import PrivacyEvent
from pate.analysis.orders import DEFAULT_ORDERS
from pate.analysis.rdp import eps_from_rdp

ORDERS = DEFAULT_ORDERS
SIGMAS = [0.05, 0.5, 1.0, math.sqrt(2.0), 2.5, 10.0, 40.0, 150.0, 1e4]
KAPPAS = [1.0, 0.3, 0.1, 0.01, 2.5]
#: sums and counts weighted alike (count weight 1): sensitivity sqrt(2), one GNMax answer's cost
ALIKE = {"count_weight": 1.0}


def _dp_accounting():
    return pytest.importorskip("dp_accounting", reason="dp_accounting is not installed")


def _reference(sigma, orders=ORDERS, count_weight=1.0):
    """dp_accounting's RDP of the Gaussian mechanism with noise multiplier
    sigma / sqrt(1 + count_weight^2) (sigma / sqrt(2) with sums and counts weighted alike)."""
    dp = _dp_accounting()
    logging.getLogger("absl").setLevel(logging.ERROR)
    acc = dp.rdp.RdpAccountant(list(map(float, orders)))
    acc.compose(dp.GaussianDpEvent(noise_multiplier=sigma / math.sqrt(1.0 + count_weight**2)))
    return np.asarray(acc._rdp, dtype=np.float64)


def _eps(rdp, delta, conversion):
    return float(eps_from_rdp(rdp, orders=ORDERS, delta=delta, conversion=conversion)[0])


# ------------------------------------------------------------------------------ the RDP


def test_sensitivity_and_closed_form():
    assert cm.class_means_sensitivity(count_weight=1.0) == math.sqrt(2.0)
    assert cm.class_means_sensitivity(count_weight=0.3) == pytest.approx(math.sqrt(1.09), rel=1e-15)
    for sigma in SIGMAS:
        ours = cm.class_means_rdp(**ALIKE, sigma=sigma, orders=ORDERS)
        assert ours.shape == ORDERS.shape and ours.dtype == np.float64
        np.testing.assert_allclose(ours, ORDERS / sigma**2, rtol=1e-15)  # one GNMax answer
        for kappa in KAPPAS:
            # Mironov 2017, Prop. 7: alpha Delta^2 / (2 sigma^2) with Delta^2 = 1 + kappa^2
            np.testing.assert_allclose(
                cm.class_means_rdp(count_weight=kappa, sigma=sigma, orders=ORDERS),
                ORDERS * (1 + kappa**2) / (2 * sigma**2),
                rtol=1e-14,
            )
    # a smaller count weight is a smaller cost at the same sigma, never below the sums' alone
    costs = [cm.class_means_rdp(sigma=2.0, count_weight=k)[0] for k in (2.5, 1.0, 0.3, 0.01)]
    assert costs == sorted(costs, reverse=True)
    assert costs[-1] > ORDERS[0] / (2 * 2.0**2)
    # the default orders are the default
    np.testing.assert_array_equal(
        cm.class_means_rdp(**ALIKE, sigma=3.0),
        cm.class_means_rdp(**ALIKE, sigma=3.0, orders=ORDERS),
    )


@pytest.mark.parametrize("kappa", KAPPAS)
@pytest.mark.parametrize("sigma", SIGMAS)
def test_equals_dp_accounting_gaussian(sigma, kappa):
    ours = cm.class_means_rdp(count_weight=kappa, sigma=sigma, orders=ORDERS)
    ref = _reference(sigma, count_weight=kappa)
    np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=0)
    assert np.all(ours >= ref * (1 - 1e-12))


@pytest.mark.parametrize("kappa", KAPPAS)
def test_sensitivity_is_what_one_record_changes(kappa):
    """The derivation's Delta on records: adding one record to D changes the (core's) released
    matrix S by at most sqrt(1 + kappa^2) in Frobenius norm, with equality for a record clipped to
    the radius (an outlier), and less for one inside it."""
    from pate.core.mean_release import class_sums, public_geometry

    rng = np.random.default_rng(int(kappa * 1000))
    public = rng.normal(size=(200, 6))
    private, labels = rng.normal(size=(50, 6)), rng.integers(0, 3, 50)
    g = public_geometry(public)
    before = class_sums(private, labels, num_classes=3, geometry=g, count_weight=kappa)
    bound = cm.class_means_sensitivity(count_weight=kappa)
    for x, y in ((rng.normal(size=6) * 1e3, 2), (np.zeros(6), 0), (public[0] * 1e-3, 1)):
        after = class_sums(
            np.vstack([private, x]),
            np.append(labels, y),
            num_classes=3,
            geometry=g,
            count_weight=kappa,
        )
        change = float(np.linalg.norm(after - before))
        assert change <= bound * (1 + 1e-12)
        if np.linalg.norm(x) > 1.0:
            assert change == pytest.approx(bound, rel=1e-12)  # the worst case is reached
        else:
            assert change < bound


def test_equals_dp_accounting_composition_of_two_releases():
    """Two releases (e.g. a re-run) compose additively, as in dp_accounting."""
    dp = _dp_accounting()
    acc = dp.rdp.RdpAccountant(list(map(float, ORDERS)))
    event = dp.GaussianDpEvent(noise_multiplier=3.0 / math.sqrt(2.0))
    acc.compose(event)
    acc.compose(event)
    ours = analysis.RdpAccountant().compose(
        cm.class_means_event(**ALIKE, sigma=3.0, queries=5),
        cm.class_means_event(**ALIKE, sigma=3.0, queries=7),
    )
    np.testing.assert_allclose(ours.rdp(False), np.asarray(acc._rdp), rtol=1e-9)
    assert ours.queries == 12 and ours.answered == 12
    for delta in (1e-5, 1e-8):
        assert float(ours.epsilon(delta=delta, data_dependent=False)[0]) == pytest.approx(
            _eps(np.asarray(acc._rdp), delta, "classic"), rel=1e-9
        )
        assert float(ours.epsilon(delta=delta)[0]) == float(
            ours.epsilon(delta=delta, data_dependent=False)[0]
        )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sigma=st.floats(0.01, 1e5, allow_nan=False, allow_infinity=False),
    kappa=st.floats(1e-3, 10.0, allow_nan=False, allow_infinity=False),
    orders=st.lists(st.sampled_from(list(ORDERS)), min_size=1, max_size=6, unique=True),
)
def test_never_below_dp_accounting(sigma, kappa, orders):
    orders = np.array(sorted(orders))
    ours = cm.class_means_rdp(count_weight=kappa, sigma=sigma, orders=orders)
    ref = _reference(sigma, orders, count_weight=kappa)
    assert np.all(ours >= ref * (1 - 1e-12))
    np.testing.assert_allclose(ours, ref, rtol=1e-9)
    assert np.all(np.isfinite(ours)) and np.all(ours > 0)


def test_monotone():
    curves = np.array([cm.class_means_rdp(**ALIKE, sigma=s, orders=ORDERS) for s in SIGMAS])
    assert np.all(np.diff(curves, axis=0) < 0)  # more noise, less cost
    assert np.all(np.diff(curves, axis=1) > 0)  # larger order, larger RDP
    # quadratic in 1 / sigma
    np.testing.assert_allclose(
        cm.class_means_rdp(**ALIKE, sigma=2.0) * 4,
        cm.class_means_rdp(**ALIKE, sigma=1.0),
        rtol=1e-15,
    )


# ------------------------------------------------------------------------------ the event


def test_event_fields():
    event = cm.class_means_event(**ALIKE, sigma=4.0, queries=123, orders=ORDERS)
    rdp = cm.class_means_rdp(**ALIKE, sigma=4.0, orders=ORDERS)
    assert isinstance(event, PrivacyEvent)
    assert event.mechanism == "class-means"
    assert event.params == {"sigma": 4.0, "count_weight": 1.0}
    assert type(event.params["sigma"]) is float and type(event.params["count_weight"]) is float
    assert event.queries == 123 and event.answered == 123
    np.testing.assert_array_equal(event.orders, ORDERS)
    np.testing.assert_array_equal(event.rdp, rdp)
    np.testing.assert_array_equal(event.rdp_data_independent, rdp)
    # an int sigma is recorded as a float (JSON-stable)
    assert cm.class_means_event(count_weight=1, sigma=4, queries=1).params == {
        "sigma": 4.0,
        "count_weight": 1.0,
    }


@pytest.mark.parametrize("queries", [0, 1, 10, 9000, 10**7])
def test_event_cost_does_not_depend_on_queries(queries):
    event = cm.class_means_event(**ALIKE, sigma=2.0, queries=queries)
    ref = cm.class_means_event(**ALIKE, sigma=2.0, queries=10)
    np.testing.assert_array_equal(event.rdp, ref.rdp)
    np.testing.assert_array_equal(event.rdp_data_independent, ref.rdp_data_independent)
    assert event.queries == event.answered == queries


def test_ten_and_nine_thousand_queries_cost_the_same_epsilon():
    e10 = analysis.RdpAccountant().compose(cm.class_means_event(**ALIKE, sigma=4.0, queries=10))
    e9000 = analysis.RdpAccountant().compose(cm.class_means_event(**ALIKE, sigma=4.0, queries=9000))
    np.testing.assert_array_equal(e10.rdp(False), e9000.rdp(False))
    np.testing.assert_array_equal(e10.rdp(True), e9000.rdp(True))
    eps = _eps(e10.rdp(False), 1e-5, "classic")
    assert eps == _eps(e9000.rdp(False), 1e-5, "classic")
    assert 1.0 < eps < 3.0  # sigma=4 is a real, finite release


def test_event_json_round_trip():
    event = cm.class_means_event(**ALIKE, sigma=math.pi, queries=777, orders=ORDERS)
    text = json.dumps(event.to_dict())
    back = PrivacyEvent.from_dict(json.loads(text))
    assert back.mechanism == event.mechanism and back.params == event.params
    assert back.queries == event.queries and back.answered == event.answered
    for field in ("orders", "rdp", "rdp_data_independent"):
        np.testing.assert_array_equal(getattr(back, field), getattr(event, field))  # exact
    assert json.dumps(back.to_dict()) == text


def test_event_on_custom_orders():
    orders = [1.5, 2.0, 32.0]
    event = cm.class_means_event(**ALIKE, sigma=3.0, queries=4, orders=orders)
    np.testing.assert_array_equal(event.orders, orders)
    np.testing.assert_allclose(event.rdp, np.array(orders) / 9.0, rtol=1e-15)


# ------------------------------------------------------------------------------ calibration


@pytest.mark.parametrize("kappa", [1.0, 0.3, 0.05])
@pytest.mark.parametrize("conversion", ["classic", "tight"])
@pytest.mark.parametrize("eps, delta", [(0.5, 1e-5), (1.0, 1e-5), (4.0, 1e-6), (10.0, 1e-3)])
def test_calibration_meets_the_target_and_is_smallest(conversion, eps, delta, kappa):
    sigma = cm.calibrate_class_means_sigma(
        count_weight=kappa, eps=eps, delta=delta, orders=ORDERS, conversion=conversion
    )
    cost = lambda s: _eps(
        cm.class_means_rdp(count_weight=kappa, sigma=s, orders=ORDERS),  # noqa: E731
        delta,
        conversion,
    )
    assert cost(sigma) <= eps
    assert cost(sigma * 0.99) > eps
    assert cost(sigma * (1 - 1e-9)) > eps * (1 - 1e-6)  # tight to the bisection


def test_a_smaller_count_weight_needs_less_noise_for_the_same_eps():
    """The same cost (the same sigma / Delta): sigma scales with sqrt(1 + kappa^2)."""
    one = cm.calibrate_class_means_sigma(eps=1.0, delta=1e-5, count_weight=1.0)
    for kappa in (0.3, 0.1):
        sigma = cm.calibrate_class_means_sigma(eps=1.0, delta=1e-5, count_weight=kappa)
        assert sigma == pytest.approx(one * math.sqrt((1 + kappa**2) / 2), rel=1e-12)
        np.testing.assert_allclose(
            cm.class_means_rdp(sigma=sigma, count_weight=kappa),
            cm.class_means_rdp(sigma=one, count_weight=1.0),
            rtol=1e-12,
        )


def test_tight_conversion_needs_less_noise():
    classic = cm.calibrate_class_means_sigma(**ALIKE, eps=1.0, delta=1e-5, conversion="classic")
    tight = cm.calibrate_class_means_sigma(**ALIKE, eps=1.0, delta=1e-5, conversion="tight")
    assert tight < classic
    # classic by default
    assert cm.calibrate_class_means_sigma(**ALIKE, eps=1.0, delta=1e-5) == classic


@pytest.mark.parametrize("conversion", ["classic", "tight"])
def test_calibration_composes_with_extra_rdp(conversion):
    extra = cm.class_means_rdp(**ALIKE, sigma=6.0, orders=ORDERS)  # e.g. an earlier release
    alone = cm.calibrate_class_means_sigma(**ALIKE, eps=2.0, delta=1e-5, conversion=conversion)
    sigma = cm.calibrate_class_means_sigma(
        **ALIKE, eps=2.0, delta=1e-5, conversion=conversion, extra_rdp=extra
    )
    assert sigma > alone
    cost = lambda s: _eps(
        cm.class_means_rdp(**ALIKE, sigma=s, orders=ORDERS) + extra, 1e-5, conversion
    )  # noqa: E731
    assert cost(sigma) <= 2.0 < cost(sigma * 0.99)
    # the release alone, at the calibrated sigma, leaves room for the extra cost
    assert _eps(cm.class_means_rdp(**ALIKE, sigma=sigma, orders=ORDERS), 1e-5, conversion) < 2.0
    # zero extra is no extra
    assert (
        cm.calibrate_class_means_sigma(
            **ALIKE, eps=2.0, delta=1e-5, conversion=conversion, extra_rdp=np.zeros(ORDERS.size)
        )
        == alone
    )


def test_calibration_refuses_the_unreachable():
    big = cm.class_means_rdp(**ALIKE, sigma=0.5, orders=ORDERS)  # already far above eps=1
    with pytest.raises(ValueError, match="eps=1.0 is unreachable"):
        cm.calibrate_class_means_sigma(**ALIKE, eps=1.0, delta=1e-5, extra_rdp=big)
    with pytest.raises(ValueError, match="extra_rdp must have one value per order"):
        cm.calibrate_class_means_sigma(**ALIKE, eps=1.0, delta=1e-5, extra_rdp=[0.0, 0.0])


# ------------------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    "sigma, exc, match",
    [
        (0.0, ValueError, "sigma must be > 0, got 0.0"),
        (-1.0, ValueError, r"sigma must be > 0, got -1.0"),
        (float("nan"), ValueError, "sigma must be finite"),
        (float("inf"), ValueError, "sigma must be finite"),
        ("2.0", TypeError, "sigma must be a real number"),
        (True, TypeError, "sigma must be a real number"),
        (None, TypeError, "sigma must be a real number"),
    ],
)
def test_bad_sigma_names_the_argument(sigma, exc, match):
    with pytest.raises(exc, match=match):
        cm.class_means_rdp(**ALIKE, sigma=sigma, orders=ORDERS)
    with pytest.raises(exc, match=match):
        cm.class_means_event(**ALIKE, sigma=sigma, queries=3, orders=ORDERS)


@pytest.mark.parametrize(
    "kappa, exc, match",
    [
        (0.0, ValueError, "count_weight must be > 0, got 0.0"),
        (-0.3, ValueError, "count_weight must be > 0, got -0.3"),
        (float("nan"), ValueError, "count_weight must be finite"),
        ("0.3", TypeError, "count_weight must be a real number"),
        (None, TypeError, "count_weight must be a real number"),
    ],
)
def test_bad_count_weight_names_the_argument(kappa, exc, match):
    with pytest.raises(exc, match=match):
        cm.class_means_rdp(sigma=1.0, count_weight=kappa, orders=ORDERS)
    with pytest.raises(exc, match=match):
        cm.class_means_event(sigma=1.0, count_weight=kappa, queries=3, orders=ORDERS)
    with pytest.raises(exc, match=match):
        cm.calibrate_class_means_sigma(eps=1.0, delta=1e-5, count_weight=kappa)
    with pytest.raises(exc, match=match):
        cm.class_means_sensitivity(count_weight=kappa)
    with pytest.raises(TypeError, match="count_weight"):
        cm.class_means_rdp(sigma=1.0)  # no default in the analysis: the caller says which


@pytest.mark.parametrize(
    "queries, exc, match",
    [
        (-1, ValueError, "queries must be >= 0, got -1"),
        (2.5, TypeError, "queries must be an integer"),
        (True, TypeError, "queries must be an integer"),
        ("10", TypeError, "queries must be an integer"),
    ],
)
def test_bad_queries_names_the_argument(queries, exc, match):
    with pytest.raises(exc, match=match):
        cm.class_means_event(**ALIKE, sigma=1.0, queries=queries, orders=ORDERS)


def test_other_validation():
    with pytest.raises(ValueError, match="orders must all be > 1"):
        cm.class_means_rdp(**ALIKE, sigma=1.0, orders=[1.0, 2.0])
    with pytest.raises(ValueError, match="orders must be a non-empty 1-D array"):
        cm.class_means_event(**ALIKE, sigma=1.0, queries=1, orders=[])
    with pytest.raises(ValueError, match="eps must be > 0, got 0.0"):
        cm.calibrate_class_means_sigma(**ALIKE, eps=0.0, delta=1e-5)
    with pytest.raises(ValueError, match="delta must lie strictly between 0 and 1"):
        cm.calibrate_class_means_sigma(**ALIKE, eps=1.0, delta=1.0)
    with pytest.raises(ValueError, match="conversion"):
        cm.calibrate_class_means_sigma(**ALIKE, eps=1.0, delta=1e-5, conversion="loose")
    with pytest.raises(TypeError):
        cm.class_means_rdp(1.0, ORDERS)  # keyword-only
    with pytest.raises(TypeError):
        cm.class_means_event(1.0, 3)  # keyword-only
