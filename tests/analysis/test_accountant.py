"""PrivacyEvent / RdpAccountant: exact, immutable composition."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pate import analysis
from pate.analysis import PrivacyEvent, RdpAccountant


@pytest.fixture
def votes():
    rng = np.random.default_rng(7)
    return np.stack([rng.multinomial(100, rng.dirichlet(np.full(10, 0.3))) for _ in range(50)])


def test_events_compose_exactly(votes):
    answered = np.arange(50) % 3 == 0
    first = analysis.confident_gnmax_event(
        votes[:25], threshold=60, sigma1=30, sigma2=15, answered=answered[:25]
    )
    second = analysis.confident_gnmax_event(
        votes[25:], threshold=60, sigma1=30, sigma2=15, answered=answered[25:]
    )
    empty = RdpAccountant()
    acc = empty.compose(first).compose(second)
    assert empty.events == () and len(acc.events) == 2  # compose never mutates
    whole = analysis.confident_gnmax_rdp(
        votes, threshold=60, sigma1=30, sigma2=15, orders=analysis.DEFAULT_ORDERS, answered=answered
    )
    np.testing.assert_allclose(acc.rdp(), whole, rtol=1e-13)
    assert acc.queries == 50 and acc.answered == int(answered.sum())
    eps, order = acc.epsilon(delta=1e-5)
    assert (eps, order) == analysis.eps_from_rdp(acc.rdp(), orders=acc.orders, delta=1e-5)
    eps_ind, _ = acc.epsilon(delta=1e-5, data_dependent=False)
    assert eps <= eps_ind


def test_event_round_trip_and_immutability(votes):
    event = analysis.gnmax_event(votes, sigma=20)
    again = PrivacyEvent.from_dict(json.loads(json.dumps(event.to_dict())))
    np.testing.assert_array_equal(again.rdp, event.rdp)
    np.testing.assert_array_equal(again.rdp_data_independent, event.rdp_data_independent)
    assert again.params == {"sigma": 20.0} and again.queries == again.answered == 50
    with pytest.raises(ValueError):
        event.rdp[0] = 0.0
    with pytest.raises(AttributeError):
        event.queries = 3


def test_event_validation():
    o = np.array([2.0, 3.0])
    with pytest.raises(ValueError, match="answered"):
        PrivacyEvent("gnmax", {}, o, [0.1, 0.2], [0.1, 0.2], queries=1, answered=2)
    with pytest.raises(ValueError, match="non-negative"):
        PrivacyEvent("gnmax", {}, o, [-0.1, 0.2], [0.1, 0.2], queries=1, answered=1)
    with pytest.raises(ValueError, match="one value per order"):
        PrivacyEvent("gnmax", {}, o, [0.1], [0.1, 0.2], queries=1, answered=1)
    with pytest.raises(TypeError):
        PrivacyEvent("gnmax", {"x": object()}, o, [0.1, 0.2], [0.1, 0.2], queries=1, answered=1)


def test_accountant_refuses_events_on_another_grid(votes):
    event = analysis.gnmax_event(votes, sigma=20, orders=[2.0, 4.0, 8.0])
    with pytest.raises(ValueError, match="orders"):
        RdpAccountant().compose(event)
    restricted = analysis.gnmax_event(votes, sigma=20).on_orders([2.0, 11.0])
    acc = RdpAccountant([2.0, 11.0]).compose(restricted)
    np.testing.assert_allclose(
        acc.rdp(), analysis.gnmax_rdp(votes, sigma=20, orders=[2.0, 11.0]).sum(0)
    )
    with pytest.raises(ValueError, match="not among"):
        analysis.gnmax_event(votes, sigma=20).on_orders([2.05])


def test_lnmax_event(votes):
    event = analysis.lnmax_event(votes, scale=20)
    assert event.mechanism == "lnmax"
    assert np.all(event.rdp <= event.rdp_data_independent + 1e-15)


def test_answer_cap_at_eps1_stated_in_docs_benchmarks():
    """docs/benchmarks.md: with 1000 teachers, sigma1 = 300, sigma2 = 150, eps = 1 (tight
    conversion, delta = 1e-5) holds at most 611 Confident-GNMax answers even if every asked
    query is answered (1086 with sigma2 = 200, 1220 with 212; sigma1 = 2 sigma2), and the
    packaged fashion-mnist-eps1 run's 958 asked / 567 answered spend 0.9995."""
    from pate.analysis.orders import DEFAULT_ORDERS
    from pate.analysis.rdp import confident_gnmax_rdp, eps_from_rdp

    def eps(asked, answered, sigma2):
        votes = np.zeros((asked, 10))
        votes[:, 0] = 1000
        mask = np.arange(asked) < answered
        rdp = confident_gnmax_rdp(
            votes,
            threshold=600,
            sigma1=2 * sigma2,
            sigma2=sigma2,
            orders=DEFAULT_ORDERS,
            answered=mask,
            data_dependent=False,
        )
        return eps_from_rdp(rdp, orders=DEFAULT_ORDERS, delta=1e-5, conversion="tight")[0]

    assert eps(958, 567, 150) == pytest.approx(0.9995, abs=5e-5)
    for sigma2, cap in ((150, 611), (200, 1086), (212, 1220)):
        assert eps(cap, cap, sigma2) <= 1.0 < eps(cap + 1, cap + 1, sigma2), sigma2
