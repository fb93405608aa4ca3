"""One neighbouring relation (issue #30): add or remove one record.

* every event states its relation; an event stored without one is refused, never given one, and
  the accountant refuses to compose two relations;
* every mechanism's data-independent bound is checked against an independent implementation,
  dp_accounting's RDP accountant under ``ADD_OR_REMOVE_ONE`` (its default): GNMax (one vote moves:
  a Gaussian of noise multiplier sigma / sqrt(2)), Confident GNMax (the threshold check: sigma1,
  sensitivity 1 of the max vote; the answer: sigma2 / sqrt(2)), LNMax (never below two Laplace
  counts of scale b), Private-kNN (the Poisson-sampled Gaussian) and class-means (a Gaussian of
  sensitivity sqrt(1 + kappa^2)); the sanitized (smooth-sensitivity) release has no counterpart
  there and is checked against the reference implementation by the golden tests;
* on records: with the keyed-hash partition, adding or removing one record changes the vote
  histogram of any query by one teacher's vote at most -- the change those bounds assume.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest

from pate import analysis
from pate.analysis import (
    ADD_REMOVE,
    RELATIONS,
    REPLACE_ONE,
    PrivacyEvent,
    RdpAccountant,
)
from pate.analysis.class_means import class_means_event
from pate.analysis.private_knn import private_knn_event, private_knn_noise_multiplier

ORDERS = np.concatenate([np.arange(2.0, 64.0), np.array([80.0, 128.0, 256.0])])


def _dp():
    dp = pytest.importorskip("dp_accounting", reason="dp_accounting is not installed")
    logging.getLogger("absl").setLevel(logging.ERROR)
    return dp


def _reference(*events):
    dp = _dp()
    acc = dp.rdp.RdpAccountant(
        list(map(float, ORDERS)), neighboring_relation=dp.NeighboringRelation.ADD_OR_REMOVE_ONE
    )
    for event in events:
        acc.compose(event)
    return np.asarray(acc._rdp, dtype=np.float64)


def _event(mechanism="gnmax", relation=ADD_REMOVE):
    rdp = ORDERS / 100.0
    return PrivacyEvent(mechanism, {"sigma": 10.0}, ORDERS, rdp, rdp, 3, 3, relation=relation)


# ------------------------------------------------------------------------------ the event field


def test_every_event_states_its_relation_and_round_trips():
    event = _event()
    assert event.relation == ADD_REMOVE and set(RELATIONS) == {ADD_REMOVE, REPLACE_ONE}
    assert PrivacyEvent.from_dict(event.to_dict()).relation == ADD_REMOVE
    assert event.on_orders(ORDERS[:5]).relation == ADD_REMOVE
    with pytest.raises(ValueError, match="relation must be one of"):
        _event(relation="replace-any")
    for builder in (
        analysis.gnmax_event(np.array([[5, 1]]), sigma=2.0, orders=ORDERS),
        analysis.lnmax_event(np.array([[5, 1]]), scale=2.0, orders=ORDERS),
        class_means_event(sigma=3.0, count_weight=0.3, queries=4, orders=ORDERS),
    ):
        assert builder.relation == ADD_REMOVE


def test_an_event_stored_without_a_relation_is_refused_never_guessed():
    old = _event().to_dict()
    del old["relation"]
    with pytest.raises(ValueError, match=r"needs the keys \['relation'\]"):
        PrivacyEvent.from_dict(old)


def test_the_accountant_refuses_to_compose_two_relations():
    acc = RdpAccountant(ORDERS).compose(_event(), _event("class-means"))
    assert acc.relation == ADD_REMOVE and RdpAccountant(ORDERS).relation is None
    with pytest.raises(ValueError, match="different neighbouring relations"):
        acc.compose(_event(relation=REPLACE_ONE))


# ------------------------------------------------------------------------------ dp_accounting


@pytest.mark.parametrize("sigma", [2.0, 10.0, 40.0, 150.0])
def test_gnmax_data_independent_is_dp_accountings_gaussian_of_one_moved_vote(sigma):
    dp = _dp()
    votes = np.array([[200, 50, 0], [100, 100, 50], [250, 0, 0]])
    ours = analysis.gnmax_rdp(votes, sigma=sigma, orders=ORDERS, data_dependent=False).sum(axis=0)
    ref = _reference(dp.SelfComposedDpEvent(dp.GaussianDpEvent(sigma / math.sqrt(2.0)), 3))
    np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=0)
    # the data-dependent bound is min(data-independent, ...): never above this
    dep = analysis.gnmax_rdp(votes, sigma=sigma, orders=ORDERS).sum(axis=0)
    assert np.all(dep <= ours * (1 + 1e-12))


@pytest.mark.parametrize("sigma1, sigma2", [(150.0, 40.0), (30.0, 30.0), (110.0, 20.0)])
def test_confident_gnmax_data_independent_is_two_gaussians_per_answer(sigma1, sigma2):
    dp = _dp()
    votes = np.array([[200, 50, 0], [100, 100, 50], [250, 0, 0], [90, 80, 80]])
    answered = np.array([True, False, True, False])
    ours = analysis.confident_gnmax_rdp(
        votes,
        threshold=150.0,
        sigma1=sigma1,
        sigma2=sigma2,
        orders=ORDERS,
        answered=answered,
        data_dependent=False,
    )
    ref = _reference(
        dp.SelfComposedDpEvent(dp.GaussianDpEvent(sigma1), 4),
        dp.SelfComposedDpEvent(dp.GaussianDpEvent(sigma2 / math.sqrt(2.0)), 2),
    )
    np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=0)


@pytest.mark.parametrize("scale", [0.5, 2.0, 10.0, 50.0])
def test_lnmax_is_never_below_two_laplace_counts(scale):
    """One vote moves: two counts change by one each, each with Laplace noise of scale b; the
    released argmax is post-processing of those noisy counts."""
    dp = _dp()
    votes = np.array([[200, 50, 0], [100, 100, 50]])
    ours = analysis.lnmax_rdp(votes, scale=scale, orders=ORDERS, data_dependent=False).sum(axis=0)
    ref = _reference(dp.SelfComposedDpEvent(dp.LaplaceDpEvent(scale), 4))
    assert np.all(ours >= ref * (1 - 1e-12))


@pytest.mark.parametrize(
    "gamma, sigma1, sigma2", [(0.1, 150.0, 40.0), (0.5, 60.0, 30.0), (1.0, 100.0, 50.0)]
)
def test_private_knn_is_the_poisson_sampled_gaussian(gamma, sigma1, sigma2):
    dp = _dp()
    event = private_knn_event(
        answered=np.array([True, False, True]),
        k=50,
        sampling_rate=gamma,
        threshold=30.0,
        sigma1=sigma1,
        sigma2=sigma2,
        orders=ORDERS,
    )
    assert event.relation == ADD_REMOVE
    z = private_knn_noise_multiplier(sigma1=sigma1, sigma2=sigma2)
    ref = _reference(
        dp.SelfComposedDpEvent(dp.PoissonSampledDpEvent(gamma, dp.GaussianDpEvent(z)), 3)
    )
    # never below (beyond dp_accounting's own rounding, ~1e-12 here: test_private_knn.py)
    assert np.all(event.rdp_data_independent >= ref * (1 - 1e-9) - 1e-14)
    np.testing.assert_allclose(event.rdp_data_independent, ref, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("kappa", [0.1, 0.3, 1.0])
def test_class_means_is_the_gaussian_of_sensitivity_sqrt_one_plus_kappa_squared(kappa):
    dp = _dp()
    event = class_means_event(sigma=4.245, count_weight=kappa, queries=9000, orders=ORDERS)
    ref = _reference(dp.GaussianDpEvent(4.245 / math.hypot(1.0, kappa)))
    np.testing.assert_allclose(event.rdp_data_independent, ref, rtol=1e-9, atol=0)
    assert event.relation == ADD_REMOVE


# ------------------------------------------------------------------------------ on records


def test_adding_or_removing_a_record_moves_at_most_one_vote():
    """Teachers trained on the keyed-hash shards of D and of D + {x}: on every query the vote
    histograms differ by one teacher's vote at most (L1 <= 2, L2 <= sqrt(2)), and the number of
    teachers is the same -- what the vote bounds above assume."""
    import warnings

    from sklearn.datasets import load_digits
    from sklearn.neighbors import NearestCentroid

    from pate.core.partition import teacher_of
    from pate.ledger import record_keys

    digits = load_digits()
    x, y = digits.data.astype(np.float32), digits.target
    private, queries = np.arange(1200), np.arange(1500, 1797)
    key, teachers = b"partition key of this test......", 12

    def votes(rows):
        shards = teacher_of(list(record_keys(x[rows], y[rows])), num_teachers=teachers, key=key)
        out = np.zeros((queries.size, 10), dtype=np.int64)
        for t in range(teachers):
            own = rows[shards == t]
            with warnings.catch_warnings():  # constant pixels within a class
                warnings.simplefilter("ignore", UserWarning)
                pred = NearestCentroid().fit(x[own], y[own]).predict(x[queries])
            out[np.arange(queries.size), pred] += 1
        return out

    base = votes(private)
    for changed in (np.append(private, 1300), np.delete(private, 5)):  # add one, remove one
        diff = votes(changed) - base
        assert np.all(np.abs(diff).sum(axis=1) <= 2)
        assert np.all(np.linalg.norm(diff, axis=1) <= math.sqrt(2) + 1e-12)
        assert np.all(diff.sum(axis=1) == 0)
