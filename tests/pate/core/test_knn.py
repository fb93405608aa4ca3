"""pate.core.knn.knn_votes against a brute-force loop, and the private-knn mechanism spec."""

from __future__ import annotations

import numpy as np
import pytest

from pate import analysis, mechanisms
from pate.analysis.private_knn import private_knn_query_rdp
from pate.core.knn import knn_votes

ORDERS = analysis.DEFAULT_ORDERS


def _brute_force(queries, private, labels, k, num_classes, sampled):
    out = np.zeros((len(queries), num_classes), dtype=np.int64)
    for i, e in enumerate(queries):
        idx = [j for j in range(len(private)) if sampled[i, j]]
        # exact squared distance, ties by record index
        idx.sort(key=lambda j: (float(np.sum((private[j] - e) ** 2)), j))
        for j in idx[:k]:
            out[i, labels[j]] += 1
    return out


@pytest.mark.parametrize("integer_grid", [False, True])
@pytest.mark.parametrize("k, gamma", [(1, 0.5), (5, 0.3), (12, 0.05), (40, 1.0), (100, 0.7)])
def test_matches_brute_force(integer_grid, k, gamma):
    rng = np.random.default_rng(k)
    if integer_grid:  # many exact ties: the index tie-break matters, distances are exact
        private = rng.integers(-2, 3, size=(60, 3)).astype(float)
        queries = rng.integers(-2, 3, size=(25, 3)).astype(float)
    else:
        private, queries = rng.normal(size=(60, 4)), rng.normal(size=(25, 4))
    labels = rng.integers(0, 4, size=60)
    got = knn_votes(
        queries,
        private,
        labels,
        k=k,
        sampling_rate=gamma,
        num_classes=4,
        rng=np.random.default_rng(7),
        batch_size=4,
    )
    sampled = np.random.default_rng(7).random((25, 60)) < gamma  # the same stream
    want = _brute_force(queries, private, labels, k, 4, sampled)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got.sum(axis=1), np.minimum(k, sampled.sum(axis=1)))
    assert got.dtype == np.int64 and got.shape == (25, 4)


def test_determinism_and_batch_size_invariance():
    rng = np.random.default_rng(0)
    private, queries, labels = (
        rng.normal(size=(300, 8)),
        rng.normal(size=(50, 8)),
        rng.integers(0, 3, 300),
    )
    runs = [
        knn_votes(
            queries,
            private,
            labels,
            k=7,
            sampling_rate=0.2,
            num_classes=3,
            rng=np.random.default_rng(5),
            batch_size=b,
        )
        for b in (1, 7, 50, None)
    ]
    for other in runs[1:]:
        np.testing.assert_array_equal(runs[0], other)
    fresh = knn_votes(
        queries,
        private,
        labels,
        k=7,
        sampling_rate=0.2,
        num_classes=3,
        rng=np.random.default_rng(6),
    )
    assert not np.array_equal(runs[0], fresh)  # a fresh sample per query and per seed


def test_edge_cases():
    q, p = np.zeros((3, 2)), np.ones((4, 2))
    y = np.array([0, 1, 1, 0])
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(
        knn_votes(q, p, y, k=2, sampling_rate=0.0, num_classes=2, rng=rng),
        np.zeros((3, 2), dtype=np.int64),
    )
    # all tied: the two lowest indices
    np.testing.assert_array_equal(
        knn_votes(q, p, y, k=2, sampling_rate=1.0, num_classes=2, rng=rng), np.tile([1, 1], (3, 1))
    )
    assert knn_votes(
        np.zeros((0, 2)), p, y, k=2, sampling_rate=1.0, num_classes=2, rng=rng
    ).shape == (0, 2)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(k=0), ValueError, "k must be >= 1, got 0"),
        (dict(k=2.5), TypeError, "k must be an integer"),
        (dict(sampling_rate=1.2), ValueError, r"sampling_rate must lie in \[0, 1\], got 1.2"),
        (dict(num_classes=1), ValueError, "num_classes must be >= 2, got 1"),
        (
            dict(labels=np.array([0, 1, 2])),
            ValueError,
            "labels must be 1-D with one label per private record",
        ),
        (
            dict(labels=np.array([0, 1, 2, 5])),
            ValueError,
            r"labels must lie in \[0, num_classes=3\), got a label 5",
        ),
        (dict(queries=np.zeros((2, 3))), ValueError, "the same number of features, got 3 and 2"),
        (dict(private=np.full((4, 2), np.nan)), ValueError, "private must be finite"),
        (dict(rng=0), TypeError, "rng must be a numpy.random.Generator"),
        (dict(batch_size=0), ValueError, "batch_size must be >= 1, got 0"),
    ],
)
def test_validation_names_the_argument(kwargs, exc, match):
    args = dict(
        queries=np.zeros((2, 2)),
        private=np.ones((4, 2)),
        labels=np.array([0, 1, 2, 0]),
        k=2,
        sampling_rate=0.5,
        num_classes=3,
        rng=np.random.default_rng(0),
    )
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        knn_votes(args.pop("queries"), args.pop("private"), args.pop("labels"), **args)


# --------------------------------------------------------------------------- the mechanism spec

PARAMS = {"k": 50, "sampling_rate": 0.05, "threshold": 30.0, "sigma1": 10.0, "sigma2": 5.0}


def test_spec_charges_every_asked_query_the_sampled_gaussian():
    spec = mechanisms.get("private-knn")
    assert spec.kind is mechanisms.SAMPLE and spec.kind.reads_private_records
    assert not mechanisms.get("confident-gnmax").kind.reads_private_records
    assert spec.release_params(PARAMS) is None and not spec.always_answers
    rng = np.random.default_rng(0)
    votes = np.stack([rng.multinomial(int(n), [0.7, 0.2, 0.1]) for n in rng.integers(20, 51, 200)])
    labels, answered, source = spec.draw(votes, PARAMS, np.random.default_rng(1))
    assert 0 < answered.sum() < 200 and np.all((labels >= 0) == answered)
    one = private_knn_query_rdp(sampling_rate=0.05, sigma1=10.0, sigma2=5.0, orders=ORDERS)
    event = spec.event(votes, PARAMS, answered=answered, orders=ORDERS)
    np.testing.assert_allclose(event.rdp, 200 * one, rtol=1e-14)
    np.testing.assert_array_equal(event.rdp, event.rdp_data_independent)
    for dd in (True, False):
        per = spec.per_query_rdp(votes, PARAMS, answered=answered, orders=ORDERS, data_dependent=dd)
        np.testing.assert_allclose(per, np.broadcast_to(one, per.shape), rtol=1e-15)
        np.testing.assert_allclose(
            spec.expected_rdp(votes, PARAMS, orders=ORDERS, data_dependent=dd),
            200 * one,
            rtol=1e-14,
        )
    np.testing.assert_array_equal(spec.worst_case_query_rdp(PARAMS, orders=ORDERS), one)
    pr = spec.pr_answered(votes, PARAMS)
    assert pr.shape == (200,) and np.all((pr > 0) & (pr < 1))


def test_spec_validation_and_calibration():
    spec = mechanisms.get("private-knn")
    clean = spec.validate({**PARAMS, "k": 300.0}, prefix="--")
    assert clean["k"] == 300 and type(clean["k"]) is int
    with pytest.raises(ValueError, match="--k must be a whole number >= 1, got 2.5"):
        spec.validate({**PARAMS, "k": 2.5}, prefix="--")
    with pytest.raises(ValueError, match="--sampling-rate must lie in"):
        spec.validate({**PARAMS, "sampling_rate": 2}, prefix="--")
    out = spec.calibrate(
        {**PARAMS, "sigma2": "auto"}, target_eps=2.0, delta=1e-5, num_queries=500, orders=ORDERS
    )
    eps = analysis.eps_from_rdp(
        500
        * private_knn_query_rdp(
            sampling_rate=0.05, sigma1=10.0, sigma2=out["sigma2"], orders=ORDERS
        ),
        orders=ORDERS,
        delta=1e-5,
    )[0]
    assert eps <= 2.0 and out["sigma1"] == 10.0
    with pytest.raises(ValueError, match="private-knn can calibrate sigma2, not sigma1"):
        spec.calibrate(
            {**PARAMS, "sigma1": "auto", "sigma2": "auto"},
            target_eps=2.0,
            delta=1e-5,
            num_queries=500,
            orders=ORDERS,
        )
