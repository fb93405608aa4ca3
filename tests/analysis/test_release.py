"""The sanitized release of the data-dependent epsilon (GNSS) with parameters fixed in advance."""

from __future__ import annotations

import numpy as np
import pytest

from pate import analysis

BENCH = dict(threshold=200, sigma1=150, sigma2=40)


@pytest.fixture(scope="module")
def run():
    rng = np.random.default_rng(3)
    n = 300
    top = rng.integers(150, 251, size=n)
    votes = np.zeros((n, 10), dtype=int)
    votes[:, 0] = top
    for i in range(n):
        votes[i, 1:] = rng.multinomial(250 - top[i], np.full(9, 1 / 9))
    noise = np.random.default_rng(4).normal(0, BENCH["sigma1"], n)
    answered = votes.max(axis=1) + noise >= BENCH["threshold"]
    return votes, answered


def release(votes, answered, rng, **overrides):
    kw = dict(
        BENCH,
        answered=answered,
        order=8.0,
        beta=0.4 / 8.0,
        sigma_ss=5.0,
        delta=1e-5,
        num_teachers=250,
        rng=rng,
    )
    kw.update(overrides)
    return analysis.release_sanitized_epsilon(votes, **kw)


def test_release_is_centred_on_the_realised_cost_plus_the_release_cost(run):
    votes, answered = run
    out = release(votes, answered, np.random.default_rng(0))
    assert out["fallback"] is None and out["answered"] == answered.sum()
    realised = analysis.confident_gnmax_rdp(votes, orders=[8.0], answered=answered, **BENCH)[0]
    assert out["rdp_gnss"] == pytest.approx(analysis.gnss_rdp(beta=0.05, sigma_ss=5.0, order=8.0))
    centre = realised + out["rdp_gnss"] + np.log(1e5) / 7.0
    draws = np.array(
        [release(votes, answered, np.random.default_rng(s))["eps_sanitized"] for s in range(200)]
    )
    assert abs(draws.mean() - centre) < 4 * out["noise_std"] / np.sqrt(200) + 1e-12
    assert draws.std() == pytest.approx(out["noise_std"], rel=0.2)
    assert out["eps_sanitized_upper_2std"] == pytest.approx(
        out["eps_sanitized"] + 2 * out["noise_std"]
    )
    # Same rng seed, same release; the data-independent figure is a function of counts only.
    assert release(votes, answered, np.random.default_rng(0)) == out
    assert out["eps_data_independent"] == pytest.approx(
        300 * 8.0 / (2 * 150**2) + answered.sum() * 8.0 / 40**2 + np.log(1e5) / 7.0
    )


def test_release_parameters_are_checked_before_any_draw(run):
    votes, answered = run

    class Exploding:
        def normal(self, *args):
            raise AssertionError("noise was drawn")

    with pytest.raises(ValueError, match="1/\\(2 beta\\)"):
        release(votes, answered, Exploding(), beta=0.1)
    with pytest.raises(ValueError, match="answered"):
        release(votes, answered[:-1], Exploding())
    with pytest.raises(ValueError, match="sigma_ss"):
        release(votes, answered, Exploding(), sigma_ss=0)
    with pytest.raises(TypeError, match="rng"):
        release(votes, answered, 42)


def test_release_falls_back_to_data_independent_when_nothing_is_data_dependent(run):
    votes, answered = run
    # Huge noise: the data-dependent bounds never beat the data-independent ones at this order.
    out = release(votes, answered, np.random.default_rng(0), sigma1=1500.0, sigma2=400.0)
    assert out["fallback"].startswith("the data-dependent bounds never beat")
    assert out["eps_sanitized"] == out["eps_data_independent"] == out["eps_sanitized_upper_2std"]


def test_release_falls_back_when_conditions_c5_c6_fail(run):
    votes, answered = run
    assert analysis.check_conditions(sigma=2.0, num_classes=10, order=8.0) == (True, False)
    out = release(votes, answered, np.random.default_rng(0), sigma2=2.0)
    assert out["fallback"].startswith("conditions C5/C6")
    assert out["eps_sanitized"] == out["eps_data_independent"]


def test_tight_conversion_lowers_the_release_by_exactly_the_conversion_difference(run):
    votes, answered = run
    classic = release(votes, answered, np.random.default_rng(0))
    tight = release(votes, answered, np.random.default_rng(0), conversion="tight")
    diff = analysis.conversion_term(order=8.0, delta=1e-5) - analysis.conversion_term(
        order=8.0, delta=1e-5, conversion="tight"
    )
    assert diff == pytest.approx(np.log(8.0) / 7.0 - np.log1p(-1 / 8.0), rel=1e-12) and diff > 0
    for key in ("eps_sanitized", "eps_sanitized_upper_2std", "eps_data_independent"):
        assert tight[key] == pytest.approx(classic[key] - diff, rel=1e-12)
    with pytest.raises(ValueError, match="conversion"):
        release(votes, answered, np.random.default_rng(0), conversion="loose")


def test_conversion_term_matches_eps_from_rdp_at_one_order():
    for conversion in ("classic", "tight"):
        eps, _ = analysis.eps_from_rdp([0.5], orders=[12.0], delta=1e-6, conversion=conversion)
        term = analysis.conversion_term(order=12.0, delta=1e-6, conversion=conversion)
        assert eps == pytest.approx(0.5 + term, rel=1e-12)
    with pytest.raises(ValueError, match="order"):
        analysis.conversion_term(order=1.0, delta=1e-5)
