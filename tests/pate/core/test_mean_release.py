"""pate.core.mean_release (noisy class means; the LDA and public-marginal logistic rules) and the
class-means mechanism spec.

* sensitivity: adding one record, whatever it is (huge-norm outliers, zero vectors), changes the
  released statistic S by one row of norm <= sqrt(1 + kappa^2), kappa the count weight (the
  mechanism's default here; its last entry is kappa, the record's weight in its class count);
* the geometry (whitening scale, clipping radius) is a function of the public embeddings only;
* the noise is one ``standard_normal((m, d + 1))`` draw scaled by sigma, whatever the data, and
  the release is exactly the documented post-processing of S + sigma Z;
* utility on separated clusters; SecureGenerator; validation before any draw;
* statistical DP tests on neighbouring datasets D, D + {x}, in the style of
  test_dp_statistical.py: (a) the release itself, projected on x's contribution, 200k draws;
  (b) the full mechanism (noisy_class_means, then the LDA score difference of a fixed query),
  10k draws. Both stay within the claimed (eps, delta) at the calibrated sigma, and the same
  checker rejects the mechanism run with sigma / 10;
* the public-marginal logistic rule: equal to scikit-learn's penalised logistic regression when
  the release is noise-free and the private records are the public rows, moment matching at
  its solution, post-processing only (no randomness, the release and public rows only), better
  than LDA where the classes are not Gaussian, validation;
* the registry spec.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from pate import analysis, mechanisms
from pate.analysis.class_means import (
    calibrate_class_means_sigma,
    class_means_event,
    class_means_rdp,
)
from pate.core.labelling_rules import (
    LINEAR_RULES,
    RULES,
    AffineRule,
    labelling_rule,
    linear_discriminant,
    public_logistic,
    recover_rule,
)
from pate.core.mean_release import (
    CLIP_QUANTILE,
    WHITEN_FLOOR,
    NoisyClassMeans,
    PublicGeometry,
    class_sums,
    clipped_scaled,
    noisy_class_means,
    public_geometry,
)
from pate.core.rng import SecureGenerator
from pate.core.tuned_defaults import LOGISTIC_RIDGE
from pate.mechanisms.class_means import COUNT_WEIGHT

ORDERS = analysis.DEFAULT_ORDERS
#: The mechanism's default count weight, and the sensitivity it gives (pate.analysis.class_means)
KAPPA = COUNT_WEIGHT.default
SENS = math.sqrt(1.0 + KAPPA**2)


def _clusters(seed, *, m=4, d=8, n_private=2000, n_public=1000, n_test=1000, sep=3.0):
    """Separated Gaussian clusters, centred on the public mean (like public_pca_embedding)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(m, d)) * sep

    def draw(n):
        y = rng.integers(0, m, n)
        return centers[y] + rng.normal(size=(n, d)), y

    public, _ = draw(n_public)
    mean = public.mean(axis=0)
    private, labels = draw(n_private)
    test, test_labels = draw(n_test)
    return public - mean, private - mean, labels, test - mean, test_labels


def _release(public, private, labels, *, sigma, num_classes, noise):
    """The documented post-processing of S + sigma * noise (module docstring of pate.core.mean_release)."""
    g = public_geometry(public)
    noisy = (
        class_sums(private, labels, count_weight=KAPPA, num_classes=num_classes, geometry=g)
        + sigma * noise
    )
    counts = np.maximum(noisy[:, -1] / KAPPA, 1.0)
    means = g.radius * noisy[:, :-1] / counts[:, None]
    return means, np.log(counts / counts.sum())


# ----------------------------------------------------------------------------- sensitivity


@st.composite
def _neighbours(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    m, d = draw(st.integers(2, 5)), draw(st.integers(1, 5))
    n_pub, n = draw(st.integers(2, 30)), draw(st.integers(0, 25))
    pub_scale = draw(st.sampled_from([1e-3, 1.0, 1e3]))
    kind = draw(st.sampled_from(["typical", "huge", "zero", "tiny", "axis-huge", "on-radius"]))
    rng = np.random.default_rng(seed)
    public = rng.normal(size=(n_pub, d)) * pub_scale * rng.uniform(0.1, 10.0, size=d)
    if np.all(public.var(axis=0) == 0):  # pragma: no cover - measure zero
        public[0, 0] += 1.0
    private = rng.normal(size=(n, d)) * pub_scale
    outliers = rng.random(n) < 0.2  # D holds outliers of its own
    private[outliers] *= 10.0 ** rng.uniform(2, 100, size=(outliers.sum(), 1))
    private[rng.random(n) < 0.1] = 0.0
    labels = rng.integers(0, m, n)
    direction = rng.normal(size=d)
    x = {
        "typical": direction * pub_scale,
        "huge": direction * 10.0 ** rng.uniform(3, 120),
        "zero": np.zeros(d),
        "tiny": direction * 1e-300,
        "axis-huge": np.eye(d)[rng.integers(d)] * -1e100,
        "on-radius": direction,
    }[kind]
    if kind == "on-radius":  # exactly at the public radius (in whitened units)
        g = public_geometry(public)
        x = direction / np.linalg.norm(direction / g.scale) * g.radius
    return public, private, labels, x, int(rng.integers(m)), int(rng.integers(n + 1)), m


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_neighbours())
def test_adding_one_record_changes_one_row_by_at_most_the_sensitivity(case):
    public, private, labels, x, y, position, m = case
    g = public_geometry(public)
    before = class_sums(private, labels, count_weight=KAPPA, num_classes=m, geometry=g)
    after = class_sums(
        np.insert(private, position, x, axis=0),
        np.insert(labels, position, y),
        count_weight=KAPPA,
        num_classes=m,
        geometry=g,
    )
    diff = after - before
    assert np.all(np.isfinite(before)) and np.all(np.isfinite(after))
    assert np.linalg.norm(diff) <= SENS + 1e-12
    changed = np.flatnonzero(np.any(diff != 0, axis=1))
    np.testing.assert_array_equal(changed, [y])  # exactly the new record's class row
    assert diff[y, -1] == pytest.approx(KAPPA, rel=1e-12)  # its weight in its class count
    u = diff[y, :-1]
    assert np.linalg.norm(u) <= 1 + 1e-12
    # the contribution is the clipped, scaled whitened embedding (up to the sums' rounding)
    w = x / g.scale
    nw = np.linalg.norm(w)
    expected = w / g.radius if nw <= g.radius else w / nw
    np.testing.assert_allclose(u, expected, rtol=1e-9, atol=1e-12 * max(1.0, len(labels)))


def test_outlier_contribution_has_norm_exactly_one():
    rng = np.random.default_rng(0)
    public = rng.normal(size=(40, 3))
    g = public_geometry(public)
    for x in ([1e6, 0, 0], [-3e50, 2e50, 1e49], [0, 0, 1e120]):
        diff = class_sums([x], [1], count_weight=KAPPA, num_classes=2, geometry=g)
        assert np.linalg.norm(diff[1, :-1]) == pytest.approx(1.0, abs=1e-15)
        assert np.linalg.norm(diff) == pytest.approx(SENS, abs=1e-15)
        assert np.all(diff[0] == 0)
    zero = class_sums([[0.0, 0.0, 0.0]], [0], count_weight=KAPPA, num_classes=2, geometry=g)
    np.testing.assert_array_equal(zero, [[0, 0, 0, KAPPA], [0, 0, 0, 0]])


def test_far_outliers_are_clipped_onto_the_unit_sphere():
    # ||w|| > ~1.3e154 would overflow a plain norm (it squares); the record must still add the
    # unit vector w / ||w||, not 0
    rng = np.random.default_rng(1)
    g = public_geometry(rng.normal(size=(50, 3)))
    diff = class_sums([[1e200, 0.0, 0.0]], [1], count_weight=KAPPA, num_classes=2, geometry=g)
    np.testing.assert_allclose(diff[1], [1.0, 0.0, 0.0, KAPPA], atol=1e-12)


@pytest.mark.parametrize("value", [1e308, -1.7e308])
def test_sensitivity_holds_for_every_finite_embedding(value):
    # |e / scale| beyond the float range (1e308 with a public std of 0.01) once whitened to inf
    # and gave a NaN row: a release that would reveal the record
    rng = np.random.default_rng(2)
    g = public_geometry(rng.normal(size=(50, 3)) * 0.01)
    with np.errstate(all="raise"):  # no overflow on the way either
        diff = class_sums([[value, 0.0, 0.0]], [1], count_weight=KAPPA, num_classes=2, geometry=g)
    assert np.all(np.isfinite(diff))
    assert np.linalg.norm(diff) <= SENS + 1e-12


# ----------------------------------------------------------------------------- the geometry


def test_geometry_is_computed_from_the_public_embeddings_only():
    rng = np.random.default_rng(3)
    public = rng.normal(size=(200, 5)) * [1.0, 3.0, 0.2, 10.0, 0.5]
    g = public_geometry(public)
    var = public.var(axis=0)
    scale = np.sqrt(var + WHITEN_FLOOR * var.mean())
    np.testing.assert_allclose(g.scale, scale, rtol=1e-15)
    assert g.radius == pytest.approx(
        np.quantile(np.linalg.norm(public / scale, axis=1), CLIP_QUANTILE), rel=1e-15
    )
    releases = []
    for seed, n in ((4, 10), (5, 500), (6, 500)):
        prng = np.random.default_rng(seed)
        private = prng.normal(size=(n, 5)) * 10.0 ** prng.uniform(-3, 3)
        labels = prng.integers(0, 3, n)
        out = noisy_class_means(
            public,
            private,
            labels,
            sigma=1.0,
            count_weight=KAPPA,
            num_classes=3,
            rng=np.random.default_rng(0),
        )
        assert isinstance(out.geometry, PublicGeometry)
        np.testing.assert_array_equal(out.geometry.scale, g.scale)
        assert out.geometry.radius == g.radius
        releases.append(out.means)
    assert not np.allclose(releases[1], releases[2])  # the private data does matter elsewhere
    # and the public data does change the geometry
    other = public_geometry(public * 2.0)
    np.testing.assert_allclose(other.scale, 2.0 * g.scale, rtol=1e-14)
    assert other.radius == pytest.approx(g.radius, rel=1e-12)  # radius is in whitened units
    assert public_geometry(public[:100]).radius != g.radius


# ----------------------------------------------------------------------------- the noise draw


def test_release_is_the_documented_post_processing_of_one_draw():
    rng = np.random.default_rng(7)
    public = rng.normal(size=(60, 4))
    m, d, sigma = 3, 4, 0.7
    datasets = [
        (rng.normal(size=(80, d)) * 5, rng.integers(0, 2, 80)),  # class 2 empty
        (rng.normal(size=(80, d)) * 0.1, rng.integers(0, 3, 80)),
        (np.zeros((0, d)), np.zeros(0, dtype=np.int64)),
    ]
    noises = []
    for private, labels in datasets:
        gen = np.random.default_rng(11)
        out = noisy_class_means(
            public, private, labels, sigma=sigma, count_weight=KAPPA, num_classes=m, rng=gen
        )
        ref = np.random.default_rng(11)
        z = ref.standard_normal((m, d + 1))
        # exactly one (m, d + 1) draw: the generators are in the same state afterwards
        assert gen.bit_generator.state == ref.bit_generator.state
        means, log_prior = _release(public, private, labels, sigma=sigma, num_classes=m, noise=z)
        np.testing.assert_allclose(out.means, means, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(out.log_prior, log_prior, rtol=1e-12, atol=1e-12)
        assert out.means.shape == (m, d) and out.log_prior.shape == (m,)
        assert np.exp(out.log_prior).sum() == pytest.approx(1.0, rel=1e-12)
        # recover the released noise on the count-free part: R * (S + sigma z) / counts
        S = class_sums(private, labels, count_weight=KAPPA, num_classes=m, geometry=out.geometry)
        counts = np.maximum((S[:, -1] + sigma * z[:, -1]) / KAPPA, 1.0)
        noises.append(out.means * counts[:, None] / out.geometry.radius - S[:, :-1])
    for other in noises[1:]:  # the same noise, whatever the private data
        np.testing.assert_allclose(other, noises[0], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(
        noises[0],
        sigma * np.random.default_rng(11).standard_normal((m, d + 1))[:, :-1],
        rtol=1e-9,
        atol=1e-12,
    )


def test_consecutive_releases_use_consecutive_blocks_of_one_stream():
    """k releases from one generator = one batched (k, m, d + 1) draw (used by the
    vectorised statistical test below)."""
    rng = np.random.default_rng(8)
    public, private, labels = (
        rng.normal(size=(30, 2)),
        rng.normal(size=(20, 2)),
        rng.integers(0, 3, 20),
    )
    gen = np.random.default_rng(21)
    outs = [
        noisy_class_means(
            public, private, labels, sigma=2.0, count_weight=KAPPA, num_classes=3, rng=gen
        )
        for _ in range(4)
    ]
    batch = np.random.default_rng(21).standard_normal((4, 3, 3))
    for out, z in zip(outs, batch):
        means, log_prior = _release(public, private, labels, sigma=2.0, num_classes=3, noise=z)
        np.testing.assert_allclose(out.means, means, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(out.log_prior, log_prior, rtol=1e-12, atol=1e-12)
    assert not np.allclose(outs[0].means, outs[1].means)


def test_noise_scales_with_sigma():
    public, private, labels, _, _ = _clusters(9, n_private=400)
    exact = []
    for sigma in (1e-9, 1e-3):
        out = noisy_class_means(
            public,
            private,
            labels,
            sigma=sigma,
            count_weight=KAPPA,
            num_classes=4,
            rng=np.random.default_rng(0),
        )
        exact.append(out.means)
    g = public_geometry(public)
    S = class_sums(private, labels, count_weight=KAPPA, num_classes=4, geometry=g)
    true_means = g.radius * S[:, :-1] / (S[:, -1:] / KAPPA)
    err = [np.abs(e - true_means).max() for e in exact]
    assert err[0] < 1e-9 and 1e-7 < err[1] < 1e-3
    assert err[1] / err[0] == pytest.approx(1e6, rel=1e-3)  # linear in sigma, same draw


# ----------------------------------------------------------------------------- utility, rng


def test_utility_on_separated_clusters():
    public, private, labels, test, test_labels = _clusters(10)
    good = noisy_class_means(
        public,
        private,
        labels,
        sigma=1.0,
        count_weight=KAPPA,
        num_classes=4,
        rng=np.random.default_rng(0),
    )
    assert isinstance(good, NoisyClassMeans)
    pred = good.predict(test)
    assert pred.dtype == np.int64 and pred.shape == (1000,)
    assert np.mean(pred == test_labels) >= 0.95
    scores = good.scores(test)
    assert scores.shape == (1000, 4)
    np.testing.assert_array_equal(np.argmax(scores, axis=1), pred)
    # with an enormous sigma the release is noise: near chance (4 classes), on average
    accs = [
        np.mean(
            noisy_class_means(
                public,
                private,
                labels,
                sigma=1e6,
                count_weight=KAPPA,
                num_classes=4,
                rng=np.random.default_rng(s),
            ).predict(test)
            == test_labels
        )
        for s in range(8)
    ]
    assert np.mean(accs) < 0.5 and max(accs) < 0.8


def test_secure_generator():
    public, private, labels, test, test_labels = _clusters(12, n_private=1000, n_test=300)
    runs = [
        noisy_class_means(
            public,
            private,
            labels,
            sigma=1.0,
            count_weight=KAPPA,
            num_classes=4,
            rng=SecureGenerator(),
        )
        for _ in range(2)
    ]
    for out in runs:
        assert np.all(np.isfinite(out.means)) and np.all(np.isfinite(out.log_prior))
        assert np.mean(out.predict(test) == test_labels) >= 0.95
    assert not np.array_equal(runs[0].means, runs[1].means)  # fresh OS entropy each time


# ----------------------------------------------------------------------------- validation


class _Drawn(Exception):
    pass


class _NoDraw(np.random.Generator):
    """A numpy Generator that fails the test if any randomness is drawn from it."""

    def _fail(self, *args, **kwargs):
        raise _Drawn("randomness was drawn")

    standard_normal = normal = random = integers = laplace = exponential = uniform = _fail
    choice = permutation = shuffle = permuted = binomial = multinomial = _fail


def test_the_no_draw_generator_has_teeth():
    gen = _NoDraw(np.random.PCG64(0))
    with pytest.raises(_Drawn):
        noisy_class_means(
            np.eye(3), np.eye(3), [0, 1, 0], sigma=1.0, count_weight=KAPPA, num_classes=2, rng=gen
        )


VALID = dict(
    public=np.arange(12.0).reshape(6, 2) % 5,
    private=np.ones((4, 2)),
    labels=np.array([0, 1, 2, 0]),
    sigma=1.0,
    count_weight=0.3,
    num_classes=3,
)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (
            dict(private=np.ones((4, 3))),
            ValueError,
            "private has 3 features but the public geometry 2",
        ),
        (
            dict(public=np.ones((6, 3)) * np.arange(6)[:, None]),
            ValueError,
            "private has 2 features but the public geometry 3",
        ),
        (
            dict(labels=np.array([0, 1, 2, 3])),
            ValueError,
            r"labels must lie in \[0, num_classes=3\), got a label 3",
        ),
        (
            dict(labels=np.array([0, -1, 2, 0])),
            ValueError,
            r"labels must lie in \[0, num_classes=3\), got a label -1",
        ),
        (
            dict(labels=np.array([0, 1, 2])),
            ValueError,
            "labels must be 1-D with one label per private record",
        ),
        (dict(labels=np.array([0.0, 1.0, 2.0, 0.0])), TypeError, "labels must be integers"),
        (dict(private=np.array([[1.0, np.nan]] * 4)), ValueError, "private must be finite"),
        (dict(private=np.array([[1.0, np.inf]] * 4)), ValueError, "private must be finite"),
        (
            dict(public=np.array([[0.0, 1.0], [np.inf, 2.0], [1.0, 0.0]])),
            ValueError,
            "public must be finite",
        ),
        (dict(public=np.ones((1, 2))), ValueError, "public needs at least 2 items"),
        (dict(public=np.ones((5, 2))), ValueError, "public embeddings are all identical"),
        (dict(public=np.ones(5)), ValueError, "public must be 2-D"),
        (dict(private="abc"), TypeError, "private must be a 2-D array"),
        (dict(sigma=0.0), ValueError, "sigma must be > 0, got 0.0"),
        (dict(sigma=-2.0), ValueError, "sigma must be > 0, got -2.0"),
        (dict(sigma=float("nan")), ValueError, "sigma must be finite"),
        (dict(count_weight=0.0), ValueError, "count_weight must be > 0, got 0.0"),
        (dict(count_weight=-1.0), ValueError, "count_weight must be > 0, got -1.0"),
        (dict(count_weight="0.3"), TypeError, "count_weight must be a real number"),
        (
            dict(num_classes=1, labels=np.zeros(4, dtype=int)),
            ValueError,
            "num_classes must be >= 2, got 1",
        ),
    ],
)
def test_validation_raises_before_any_draw(kwargs, exc, match):
    args = {**VALID, **kwargs}
    gen = _NoDraw(np.random.PCG64(0))
    state = gen.bit_generator.state
    with pytest.raises(exc, match=match):
        noisy_class_means(
            args.pop("public"), args.pop("private"), args.pop("labels"), rng=gen, **args
        )
    assert gen.bit_generator.state == state


def test_rng_and_prediction_validation():
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator"):
        noisy_class_means(
            VALID["public"],
            VALID["private"],
            VALID["labels"],
            sigma=1.0,
            count_weight=KAPPA,
            num_classes=3,
            rng=0,
        )
    out = noisy_class_means(
        VALID["public"],
        VALID["private"],
        VALID["labels"],
        sigma=1.0,
        count_weight=KAPPA,
        num_classes=3,
        rng=np.random.default_rng(0),
    )
    with pytest.raises(ValueError):
        out.predict(np.ones((2, 3)))
    with pytest.raises(ValueError, match="embeddings must be 2-D"):
        out.predict(np.ones(2))
    with pytest.raises(ValueError, match="embeddings must be finite"):
        out.scores(np.array([[np.nan, 0.0]]))
    with pytest.raises(TypeError):
        noisy_class_means(
            VALID["public"], VALID["private"], VALID["labels"], 1.0, 3, np.random.default_rng(0)
        )  # keyword-only


@pytest.mark.parametrize("features", [1, 3])
def test_prediction_refuses_the_wrong_number_of_features(features):
    out = noisy_class_means(
        VALID["public"],
        VALID["private"],
        VALID["labels"],
        sigma=1.0,
        count_weight=KAPPA,
        num_classes=3,
        rng=np.random.default_rng(0),
    )
    with pytest.raises(ValueError, match=f"embeddings have {features} features, the means 2"):
        out.predict(np.ones((2, features)))


# ----------------------------------------------------------------------------- statistical DP
# Neighbours D and D + {x}: x a far outlier (its contribution has the full norm SENS). The
# claim is pate.analysis.class_means's RDP at the calibrated sigma, converted at DELTA. Sampling
# error: one-sided Clopper-Pearson bounds at ALPHA (test_dp_statistical.py); seeds are fixed.

ALPHA = 1e-7
DELTA = 1e-5
TARGET_EPS = 2.0


def _cp_lower(k, n):
    k = np.asarray(k)
    return np.where(k == 0, 0.0, stats.beta.ppf(ALPHA, np.maximum(k, 1), n - k + 1))


def _cp_upper(k, n):
    k = np.asarray(k)
    return np.where(k == n, 1.0, stats.beta.ppf(1 - ALPHA, k + 1, np.maximum(n - k, 1)))


def _violations(counts_a, counts_b, eps, delta):
    """Sets of outputs (bins) on which the empirical distributions contradict (eps, delta)-DP."""
    na, nb = counts_a.sum(), counts_b.sum()
    subsets = np.array(list(itertools.product([0, 1], repeat=counts_a.size)))[1:]
    ka, kb = subsets @ counts_a, subsets @ counts_b
    bad = (_cp_lower(ka, na) > np.exp(eps) * _cp_upper(kb, nb) + delta) | (
        _cp_lower(kb, nb) > np.exp(eps) * _cp_upper(ka, na) + delta
    )
    return [tuple(np.flatnonzero(s)) for s in subsets[bad]]


def _claimed(sigma):
    rdp = class_means_rdp(count_weight=KAPPA, sigma=sigma, orders=ORDERS)
    return float(analysis.eps_from_rdp(rdp, orders=ORDERS, delta=DELTA)[0])


SIGMA = calibrate_class_means_sigma(count_weight=KAPPA, eps=TARGET_EPS, delta=DELTA, orders=ORDERS)

# (a) The release S + sigma Z itself, projected on x's contribution c = S(D + x) - S(D).
RELEASE_DRAWS = 200_000


def _release_neighbours():
    rng = np.random.default_rng(30)
    public = rng.normal(size=(100, 4))
    private = rng.normal(size=(50, 4)) * [1, 1, 1, 1e3]  # some clipped, some not
    labels = rng.integers(0, 3, 50)
    x = np.array([-1e9, 5e8, 0.0, 2e8])
    g = public_geometry(public)
    s_d = class_sums(private, labels, count_weight=KAPPA, num_classes=3, geometry=g)
    s_dx = class_sums(
        np.vstack([private, x]), np.append(labels, 2), count_weight=KAPPA, num_classes=3, geometry=g
    )
    return s_d, s_dx


def _projected_release(s, s_d, c, sigma, seed):
    z = np.random.default_rng(seed).standard_normal((RELEASE_DRAWS, *s.shape))
    stat = np.einsum("nij,ij->n", s + sigma * z - s_d, c) / np.linalg.norm(c)
    # fixed bins, set by the claimed SIGMA (not the run's sigma) and the shift SENS
    edges = np.array(
        [-np.inf, -3 * SIGMA, -SIGMA, 0.0, SENS / 2, SENS, SIGMA, 3 * SIGMA, 5 * SIGMA, np.inf]
    )
    return np.histogram(stat, bins=edges)[0]


def test_release_within_claimed_bound_and_checker_has_power():
    s_d, s_dx = _release_neighbours()
    c = s_dx - s_d
    assert np.linalg.norm(c) == pytest.approx(SENS, abs=1e-12)  # the worst case
    eps = _claimed(SIGMA)
    assert eps <= TARGET_EPS and eps == pytest.approx(TARGET_EPS, rel=1e-6)
    counts_d = _projected_release(s_d, s_d, c, SIGMA, 1)
    counts_dx = _projected_release(s_dx, s_d, c, SIGMA, 2)
    assert counts_d.sum() == counts_dx.sum() == RELEASE_DRAWS
    assert _violations(counts_d, counts_dx, eps, DELTA) == []
    assert np.any(np.abs(counts_d - counts_dx) > 5 * np.sqrt(RELEASE_DRAWS) / 10)  # they differ
    weak_d = _projected_release(s_d, s_d, c, SIGMA / 10, 3)
    weak_dx = _projected_release(s_dx, s_d, c, SIGMA / 10, 4)
    assert _violations(weak_d, weak_dx, eps, DELTA) != []


# (b) The full mechanism: noisy_class_means on D or D + {x}, then the LDA score difference
# s_1 - s_0 of one fixed public query (post-processing), binned.
MECHANISM_DRAWS = 10_000
PUBLIC_1D = np.linspace(-1.0, 1.0, 41)[:, None]
D_1D = np.array([[1e6]] * 3 + [[-1e6]] * 3)  # class 0 at +R, class 1 at -R (clipped)
LABELS_1D = np.array([0, 0, 0, 1, 1, 1])
X_1D, Y_1D = np.array([[1e6]]), 1  # a class-1 record far on class 0's side
SCORE_EDGES = np.array([-np.inf, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, np.inf])


def _mechanism_counts(with_x, sigma, seed):
    private = np.vstack([D_1D, X_1D]) if with_x else D_1D
    labels = np.append(LABELS_1D, Y_1D) if with_x else LABELS_1D
    query = 0.25 * public_geometry(PUBLIC_1D).scale[None, :]
    rng = np.random.default_rng(seed)
    stat = np.empty(MECHANISM_DRAWS)
    for i in range(MECHANISM_DRAWS):
        out = noisy_class_means(
            PUBLIC_1D, private, labels, sigma=sigma, count_weight=KAPPA, num_classes=2, rng=rng
        )
        s = out.scores(query)[0]
        stat[i] = s[1] - s[0]
    return np.histogram(stat, bins=SCORE_EDGES)[0]


def test_mechanism_within_claimed_bound_and_checker_has_power():
    eps = _claimed(SIGMA)
    counts_d, counts_dx = _mechanism_counts(False, SIGMA, 5), _mechanism_counts(True, SIGMA, 6)
    assert _violations(counts_d, counts_dx, eps, DELTA) == []
    assert np.any(np.abs(counts_d - counts_dx) > 5 * np.sqrt(MECHANISM_DRAWS) / 10)
    weak_d = _mechanism_counts(False, SIGMA / 10, 7)
    weak_dx = _mechanism_counts(True, SIGMA / 10, 8)
    assert _violations(weak_d, weak_dx, eps, DELTA) != []


# ----------------------------------------------------------------------------- logistic rule


def _softmax_of(labeller, u):
    z = u @ labeller.weights.T + labeller.bias
    z -= z.max(axis=1, keepdims=True)
    return np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)


@pytest.mark.parametrize("ridge", [1e-3, 3e-2])
def test_logistic_rule_is_sklearns_logistic_regression_without_noise(ridge):
    """With sigma ~ 0 and the public rows as the private records, F is the ridge-penalised
    multinomial log-likelihood of those rows: scikit-learn's LogisticRegression with
    C = 1 / (ridge n) on the clipped, scaled rows u (an independent implementation)."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(30)
    m, d, n = 3, 4, 600
    labels = rng.integers(0, m, n)
    public = rng.normal(size=(n, d)) * [1.0, 2.0, 0.5, 1.0] + 1.5 * np.eye(m, d)[labels]
    release = noisy_class_means(
        public,
        public,
        labels,
        sigma=1e-12,
        count_weight=KAPPA,
        num_classes=m,
        rng=np.random.default_rng(0),
    )
    ours = public_logistic(release, public, ridge=ridge)
    u = clipped_scaled(public, release.geometry)
    ref = LogisticRegression(C=1.0 / (ridge * n), tol=1e-12, max_iter=10_000).fit(u, labels)
    np.testing.assert_allclose(ours.weights, ref.coef_, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_softmax_of(ours, u), ref.predict_proba(u), atol=1e-7)
    np.testing.assert_array_equal(ours.predict(public), ref.predict(u))


def test_logistic_rule_matches_the_released_moments():
    public, private, labels, _, _ = _clusters(31, n_private=3000)
    release = noisy_class_means(
        public,
        private,
        labels,
        sigma=2.0,
        count_weight=KAPPA,
        num_classes=4,
        rng=np.random.default_rng(1),
    )
    rule = public_logistic(release, public)
    u = clipped_scaled(public, release.geometry)
    p = _softmax_of(rule, u)
    prior = np.exp(release.log_prior)
    moments = prior[:, None] * release.means / release.geometry.radius
    np.testing.assert_allclose(p.mean(axis=0), prior, atol=1e-8)
    np.testing.assert_allclose(p.T @ u / len(u) + LOGISTIC_RIDGE * rule.weights, moments, atol=1e-8)


def test_logistic_rule_is_post_processing():
    """It reads the release and the public rows only, and draws nothing: two releases with the
    same fields give the same rule, whatever private data made them."""
    public, private, labels, test, _ = _clusters(32, n_private=500)
    release = noisy_class_means(
        public,
        private,
        labels,
        sigma=1.0,
        count_weight=KAPPA,
        num_classes=4,
        rng=np.random.default_rng(2),
    )
    copy = NoisyClassMeans(
        means=release.means.copy(),
        log_prior=release.log_prior.copy(),
        geometry=release.geometry,
        counts=release.counts.copy(),
        sigma=release.sigma,
    )
    a, b = public_logistic(release, public), public_logistic(copy, public)
    np.testing.assert_array_equal(a.weights, b.weights)
    np.testing.assert_array_equal(a.bias, b.bias)
    np.testing.assert_array_equal(a.predict(test), b.predict(test))
    assert isinstance(a, AffineRule) and a.scores(test).shape == (len(test), 4)
    np.testing.assert_array_equal(np.argmax(a.scores(test), axis=1), a.predict(test))


def test_logistic_rule_beats_lda_where_the_classes_are_correlated():
    """Two classes 1 apart on the first axis with a shared within-class correlation of 0.95:
    the per-axis whitening leaves the correlation, so the nearest noisy mean (LDA with the
    identity) splits on the first axis alone (~69 %), while logistic regression learns the
    tilted boundary from the label-free public spread (Bayes rate ~94 %)."""
    rng = np.random.default_rng(33)
    cov = np.array([[1.0, 0.95], [0.95, 1.0]])

    def draw(n):
        y = rng.integers(0, 2, n)
        return rng.multivariate_normal([0.0, 0.0], cov, n) + np.where(
            y[:, None] == 0, -0.5, 0.5
        ) * [1, 0], y

    (public, public_y), (private, private_y) = draw(2000), draw(20000)
    release = noisy_class_means(
        public,
        private,
        private_y,
        sigma=1.0,
        count_weight=KAPPA,
        num_classes=2,
        rng=np.random.default_rng(3),
    )
    lda = np.mean(release.predict(public) == public_y)
    logistic = np.mean(public_logistic(release, public).predict(public) == public_y)
    assert lda < 0.75 and logistic > 0.9, (lda, logistic)


def test_labelling_rule():
    public, private, labels, test, test_labels = _clusters(34, n_private=800)
    release = noisy_class_means(
        public,
        private,
        labels,
        sigma=1.0,
        count_weight=KAPPA,
        num_classes=4,
        rng=np.random.default_rng(4),
    )
    assert RULES == ("lda", "logistic", "qda")
    lda = labelling_rule(release, public, "lda")
    assert isinstance(lda, AffineRule) and lda.rule == "lda"
    np.testing.assert_array_equal(lda.weights, linear_discriminant(release, public).weights)
    assert np.mean(lda.predict(test) == test_labels) >= 0.95
    rule = labelling_rule(release, public, "logistic")
    np.testing.assert_array_equal(rule.weights, public_logistic(release, public).weights)
    assert np.mean(rule.predict(test) == test_labels) >= 0.95
    with pytest.raises(ValueError, match="rule must be one of 'lda', 'logistic', 'qda'; got 'x'"):
        labelling_rule(release, public, "x")
    with pytest.raises(ValueError, match="quadratic features"):  # not a quadratic embedding
        labelling_rule(release, public, "qda")


def test_logistic_rule_validation():
    public, private, labels, _, _ = _clusters(35, n_private=200)
    release = noisy_class_means(
        public,
        private,
        labels,
        sigma=1.0,
        count_weight=KAPPA,
        num_classes=4,
        rng=np.random.default_rng(5),
    )
    for ridge in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="ridge"):
            public_logistic(release, public, ridge=ridge)
    with pytest.raises(ValueError, match="public has 3 features but the release 8"):
        public_logistic(release, public[:, :3])
    with pytest.raises(ValueError, match="public"):
        public_logistic(release, np.full_like(public, np.nan))
    with pytest.raises(TypeError, match="release must be a NoisyClassMeans"):
        public_logistic(release.means, public)
    rule = public_logistic(release, public)
    with pytest.raises(ValueError, match="embeddings have 2 features, the rule 8"):
        rule.predict(public[:, :2])


# ----------------------------------------------------------------------------- the spec


def test_spec_flags_and_worst_case():
    spec = mechanisms.get("class-means")
    assert spec.name == "class-means" and spec.param_names == ("sigma", "count_weight")
    sigma, count_weight = spec.params
    assert count_weight.default == 0.3 and not count_weight.required and sigma.required
    assert spec.kind.releases_once and spec.kind.reads_private_records and spec.always_answers
    assert not spec.needs_student and spec.release_params({"sigma": 1.0}) is None
    for s in (0.5, 3.0, 40.0):
        for kappa in (1.0, 0.3, 0.05):
            np.testing.assert_array_equal(
                spec.worst_case_query_rdp({"sigma": s, "count_weight": kappa}, orders=ORDERS),
                class_means_rdp(sigma=s, count_weight=kappa, orders=ORDERS),
            )
    # the default fills in, and the validated parameters always say which weight was used
    assert spec.validate({"sigma": 2}, prefix="--") == {"sigma": 2.0, "count_weight": 0.3}
    assert spec.validate({"sigma": 2, "count_weight": None}) == {"sigma": 2.0, "count_weight": 0.3}
    assert spec.validate({"sigma": 2, "count_weight": 1}) == {"sigma": 2.0, "count_weight": 1.0}
    with pytest.raises(ValueError, match="--sigma must be"):
        spec.validate({"sigma": -1.0}, prefix="--")
    with pytest.raises(ValueError, match=r"\[aggregator\] count_weight must be > 0, got 0.0"):
        spec.validate({"sigma": 1.0, "count_weight": 0.0}, prefix="[aggregator] ")
    with pytest.raises(
        TypeError, match="class-means needs sigma=...; its parameters are sigma, count_weight"
    ):
        spec.validate({"count_weight": 0.3})
    # unvalidated parameters without the weight are refused, never costed with a guess
    with pytest.raises(TypeError, match="without count_weight"):
        spec.worst_case_query_rdp({"sigma": 3.0}, orders=ORDERS)
    with pytest.raises(TypeError, match="without count_weight"):
        spec.event(np.zeros((2, 3)), {"sigma": 3.0}, answered=np.ones(2, bool), orders=ORDERS)


@pytest.mark.parametrize("kappa", [None, 1.0, 0.1])
@pytest.mark.parametrize("conversion", ["classic", "tight"])
def test_spec_calibration_does_not_depend_on_the_number_of_queries(conversion, kappa):
    spec = mechanisms.get("class-means")
    kw = dict(target_eps=1.5, delta=1e-5, orders=ORDERS, conversion=conversion)
    auto = {"sigma": "auto", **({} if kappa is None else {"count_weight": kappa})}
    weight = KAPPA if kappa is None else kappa
    one = spec.calibrate(auto, num_queries=1, **kw)
    many = spec.calibrate(auto, num_queries=9000, **kw)
    assert one == many and one["count_weight"] == weight
    assert one["sigma"] == calibrate_class_means_sigma(
        eps=1.5, delta=1e-5, orders=ORDERS, count_weight=weight, conversion=conversion
    )
    eps = analysis.eps_from_rdp(
        class_means_rdp(sigma=one["sigma"], count_weight=weight, orders=ORDERS),
        orders=ORDERS,
        delta=1e-5,
        conversion=conversion,
    )[0]
    assert eps <= 1.5 and eps == pytest.approx(1.5, rel=1e-6)
    extra = class_means_rdp(sigma=8.0, count_weight=1.0, orders=ORDERS)
    with_extra = spec.calibrate(auto, num_queries=9000, extra_rdp=extra, **kw)
    assert with_extra["sigma"] > one["sigma"]
    assert spec.calibrate({"sigma": 3.0}, num_queries=9000, **kw) == {  # no auto
        "sigma": 3.0,
        "count_weight": KAPPA,
    }
    with pytest.raises(ValueError, match="can calibrate sigma, not count_weight"):
        spec.calibrate({"sigma": "auto", "count_weight": "auto"}, num_queries=1, **kw)


def test_spec_draw_refuses_votes():
    spec = mechanisms.get("class-means")
    with pytest.raises(TypeError, match="noisy_class_means"):
        spec.draw(
            np.zeros((3, 2), dtype=np.int64),
            {"sigma": 1.0, "count_weight": KAPPA},
            np.random.default_rng(0),
        )


@pytest.mark.parametrize("n", [1, 2, 50, 9000])
def test_spec_per_query_rdp_sums_to_the_event(n):
    spec = mechanisms.get("class-means")
    params = spec.validate({"sigma": 2.5})
    votes = np.zeros((n, 10), dtype=np.int64)
    answered = np.ones(n, dtype=bool)
    event = spec.event(votes, params, answered=answered, orders=ORDERS)
    one = class_means_event(sigma=2.5, count_weight=KAPPA, queries=n, orders=ORDERS)
    assert event.mechanism == "class-means" and event.queries == event.answered == n
    assert event.params == {"sigma": 2.5, "count_weight": KAPPA}
    np.testing.assert_array_equal(event.rdp, one.rdp)
    np.testing.assert_array_equal(event.rdp_data_independent, one.rdp_data_independent)
    for dd in (True, False):
        per = spec.per_query_rdp(votes, params, answered=answered, orders=ORDERS, data_dependent=dd)
        assert per.shape == (n, ORDERS.size)
        np.testing.assert_allclose(per.sum(axis=0), event.rdp, rtol=1e-15)
        np.testing.assert_array_equal(
            per[0], class_means_rdp(sigma=2.5, count_weight=KAPPA, orders=ORDERS)
        )
        assert np.all(per[1:] == 0)  # every further query is post-processing
        np.testing.assert_allclose(
            spec.expected_rdp(votes, params, orders=ORDERS, data_dependent=dd),
            event.rdp,
            rtol=1e-15,
        )
    np.testing.assert_array_equal(spec.pr_answered(votes, params), np.ones(n))


def test_spec_charges_nothing_when_nothing_is_asked():
    # the stage draws no release for zero queries; the spec's event and per-query costs agree
    spec = mechanisms.get("class-means")
    votes = np.zeros((0, 10))
    params = {"sigma": 3.0, "count_weight": 1.0}
    event = spec.event(votes, params, answered=np.zeros(0, bool), orders=[2.0, 8.0])
    assert event.queries == 0 and np.all(event.rdp_data_independent == 0)
    one = spec.event(np.zeros((1, 10)), params, answered=np.ones(1, bool), orders=[2.0, 8.0])
    np.testing.assert_allclose(one.rdp_data_independent, [2.0 / 9.0, 8.0 / 9.0], rtol=1e-15)
    light = spec.event(
        np.zeros((1, 10)),
        {"sigma": 3.0, "count_weight": 0.3},
        answered=np.ones(1, bool),
        orders=[2.0, 8.0],
    )
    np.testing.assert_allclose(
        light.rdp_data_independent, [2.0 * 1.09 / 18.0, 8.0 * 1.09 / 18.0], rtol=1e-14
    )


# -- recovering a published rule (the student times its rule: pate.student.rule_product)


@pytest.mark.parametrize("rule", LINEAR_RULES)
def test_a_rule_is_recovered_exactly_from_its_published_scores(rule):
    """From the scores of the labelled public rows (NaN rows: unlabelled) the recovered rule
    scores unseen embeddings, far ones beyond the clip included, as the rule itself does."""
    public, private, labels, test, _ = _clusters(3, n_public=300)
    release = noisy_class_means(
        public,
        private,
        labels,
        sigma=2.0,
        count_weight=KAPPA,
        num_classes=4,
        rng=np.random.default_rng(4),
    )
    labeller = labelling_rule(release, public, rule)
    scores = labeller.scores(public)
    scores[250:] = np.nan  # 250 labelled public rows
    recovered = recover_rule(public, scores, rule=rule)
    assert recovered.rule == rule
    np.testing.assert_array_equal(recovered.geometry.scale, public_geometry(public).scale)
    unseen = np.vstack([test[:100], 10 * test[:20]])
    np.testing.assert_allclose(
        recovered.scores(unseen), labeller.scores(unseen), rtol=1e-7, atol=1e-7
    )


@pytest.mark.parametrize("rule", LINEAR_RULES)
def test_a_rule_over_collinear_columns_is_recovered_on_their_span(rule):
    """A fourth column that is the sum of two others (as one-hot groups are collinear): the
    public rows span 4 of the 5 directions of [x, 1], every public row is labelled, and the
    recovered rule (minimum-norm coefficients) scores unseen rows with the same relation as the
    rule itself; with too few labelled rows it is still refused."""
    public, private, labels, test, _ = _clusters(3, n_public=300)

    def collinear(rows):
        return np.hstack([rows[:, :3], rows[:, :1] + rows[:, 1:2]])

    public, private, test = collinear(public), collinear(private), collinear(test)
    release = noisy_class_means(
        public, private, labels, sigma=2.0, count_weight=KAPPA, num_classes=4,
        rng=np.random.default_rng(4),
    )  # fmt: skip
    labeller = labelling_rule(release, public, rule)
    recovered = recover_rule(public, labeller.scores(public), rule=rule)
    unseen = np.vstack([test[:100], 10 * test[:20]])
    np.testing.assert_allclose(
        recovered.scores(unseen), labeller.scores(unseen), rtol=1e-6, atol=1e-6
    )
    few = labeller.scores(public)
    few[3:] = np.nan  # 3 labelled rows: rank 3 < 4, the public rows'
    with pytest.raises(ValueError, match=r"rank 3 < 4, the public rows'"):
        recover_rule(public, few, rule=rule)


def test_scores_that_are_not_such_a_rule_are_refused():
    public, private, labels, _, _ = _clusters(5, n_public=300)
    release = noisy_class_means(
        public,
        private,
        labels,
        sigma=2.0,
        count_weight=KAPPA,
        num_classes=4,
        rng=np.random.default_rng(6),
    )
    logistic = public_logistic(release, public).scores(public)
    # the logistic rule clips 10 % of the rows: not affine in the whitened embedding
    with pytest.raises(ValueError, match="not an affine lda rule"):
        recover_rule(public, logistic, rule="lda")
    with pytest.raises(ValueError, match="not an affine logistic rule"):
        recover_rule(public, np.random.default_rng(7).normal(size=logistic.shape), rule="logistic")
    few = logistic.copy()
    few[8:] = np.nan  # 8 labelled rows, 9 unknowns per class
    with pytest.raises(ValueError, match="do not determine a rule in 8 dims"):
        recover_rule(public, few, rule="logistic")
    with pytest.raises(ValueError, match="one row per public embedding"):
        recover_rule(public, logistic[:-1], rule="logistic")
    partial = logistic.copy()
    partial[0, 1] = np.nan
    with pytest.raises(ValueError, match="finite in every labelled row and NaN in the others"):
        recover_rule(public, partial, rule="logistic")
    with pytest.raises(ValueError, match="rule must be one of"):
        recover_rule(public, logistic, rule="qda")


def test_class_sums_a_block_at_a_time_are_the_sums_of_one_pass(monkeypatch):
    """Issue #33: the private rows are clipped and summed SUM_ROWS at a time; np.add.at adds
    them in order, so the sums are bit for bit those of all the rows at once, and the float64
    temporaries are a block's, not every record's."""
    import tracemalloc

    from pate.core import mean_release

    rng = np.random.default_rng(8)
    public = rng.standard_normal((200, 16))
    private = (rng.standard_normal((5000, 16)) * 3).astype(np.float32)
    labels = rng.integers(0, 4, 5000)
    geometry = mean_release.public_geometry(public)
    whole = np.zeros((4, 17))  # all the rows in one pass, as before the blocks
    np.add.at(
        whole[:, :-1], labels, mean_release.clipped_scaled(private.astype(np.float64), geometry)
    )
    whole[:, -1] = 0.3 * np.bincount(labels, minlength=4)
    monkeypatch.setattr(mean_release, "SUM_ROWS", 128)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        blocks = mean_release.class_sums(
            private, labels, num_classes=4, geometry=geometry, count_weight=0.3
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(blocks, whole)
    assert peak < private.nbytes  # one float64 copy of the rows alone would be twice this
    bad = private.copy()
    bad[4999, 3] = np.nan  # in the last block: refused before any block is summed
    with pytest.raises(ValueError, match="private must be finite"):
        mean_release.class_sums(bad, labels, num_classes=4, geometry=geometry, count_weight=0.3)


def test_linear_discriminant_reads_the_within_class_covariance_from_the_public_rows():
    """Two classes with one shared, strongly correlated covariance: the Bayes rule is linear but
    not the nearest mean. With little noise, linear_discriminant (public total covariance less
    the noisy means' spread) labels like scikit-learn's LDA fitted on the private rows and far
    better than the nearest noisy mean; a constant public column (no spread) cannot blow up its
    weights (the eigenvalue floor). Its scores are an exact "lda" rule: recover_rule finds it."""
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    rng = np.random.default_rng(50)
    cov = np.array([[1.0, 0.95, 0.0], [0.95, 1.0, 0.0], [0.0, 0.0, 1e-12]])
    shift = np.array([0.5, 0.0, 0.0])

    def draw(n):
        y = rng.integers(0, 2, n)
        return rng.multivariate_normal(np.zeros(3), cov, n) + y[:, None] * shift, y

    (public, _), (private, labels), (test, test_labels) = draw(4000), draw(20000), draw(4000)
    release = noisy_class_means(
        public, private, labels, sigma=0.01, count_weight=KAPPA, num_classes=2,
        rng=np.random.default_rng(1),
    )  # fmt: skip
    rule = linear_discriminant(release, public)
    ours = np.mean(rule.predict(test) == test_labels)
    reference = (
        LinearDiscriminantAnalysis().fit(private[:, :2], labels).score(test[:, :2], test_labels)
    )
    nearest = np.mean(release.predict(test) == test_labels)
    assert ours >= reference - 0.01 and ours >= nearest + 0.1, (ours, reference, nearest)
    assert np.all(np.isfinite(rule.weights)) and np.abs(rule.weights).max() < 1e3
    recovered = recover_rule(public, rule.scores(public), rule="lda")
    np.testing.assert_allclose(recovered.scores(test), rule.scores(test), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="at least 2"):
        linear_discriminant(release, public[:1])
