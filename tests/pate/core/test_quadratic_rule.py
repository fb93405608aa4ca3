"""The "qda" labelling rule of a class-means release over a table's quadratic features
(``pate.core.quadratic_rule.quadratic_discriminant``; front-end ``pate.teachers.public_embedding.QuadraticFeatures``):
its readback of each class's mean and covariance, cross-checked against scikit-learn's
QuadraticDiscriminantAnalysis (an independent implementation), its noise floor, and the
choice of front-end from the sizes."""

from __future__ import annotations

import numpy as np
import pytest

from pate.core.labelling_rules import LINEAR_RULES, labelling_rule, recover_rule, rule_features
from pate.core.mean_release import noisy_class_means
from pate.core.quadratic_rule import (
    QUADRATIC_MAX_WIDTH,
    QuadraticDiscriminant,
    quadratic_discriminant,
    quadratic_width,
)
from pate.core.tuned_defaults import QDA_RECORDS_PER_FEATURE, table_front_end
from pate.teachers import public_embedding
from pate.teachers.public_embedding import PublicFrontEnd

KAPPA = 0.3


def _gaussians(seed, *, n_public=3000, n_private=20000):
    """Three 4-d Gaussian classes with different means AND covariances, on awkward scales."""
    rng = np.random.default_rng(seed)
    means = np.array([[0, 0, 0, 0], [1.5, 0, 0, 0], [0, 1.5, 0, 0.5]], dtype=float)
    spreads = [
        np.diag([1.0, 1.0, 0.3, 1.0]),
        np.diag([0.4, 2.0, 1.0, 1.0]),
        np.array([[1.0, 0.8, 0, 0], [0.8, 1.0, 0, 0], [0, 0, 1.0, 0], [0, 0, 0, 0.2]]),
    ]

    def draw(n):
        y = rng.integers(0, 3, n)
        x = np.empty((n, 4))
        for j in range(3):
            x[y == j] = rng.multivariate_normal(means[j], spreads[j], int((y == j).sum()))
        return x * [100.0, 0.01, 1.0, 5.0] + 3.0, y

    return draw(n_public), draw(n_private)


def _release(public_x, private_x, private_y, *, sigma, seed=0, classes=3):
    front, e_public = PublicFrontEnd.fit_transform(public_x, features="quadratic", dims=None)
    release = noisy_class_means(
        e_public,
        front.embed(private_x),
        private_y,
        sigma=sigma,
        count_weight=KAPPA,
        num_classes=classes,
        rng=np.random.default_rng(seed),
    )
    return front, e_public, release


def test_quadratic_width_and_the_choice_of_front_end():
    assert [quadratic_width(f) for f in (1, 2, 10, 30)] == [2, 5, 65, 495]
    assert quadratic_width(90) == QUADRATIC_MAX_WIDTH
    # 5 records per class per quadratic feature: 10 columns (65 features) need 325 per class
    assert table_front_end(private_records=3 * 325, num_classes=3, columns=10) == "quadratic"
    assert table_front_end(private_records=3 * 324, num_classes=3, columns=10) == "kernel"
    assert QDA_RECORDS_PER_FEATURE == 5
    # few columns: the kernel rule (moons-like, 4 columns), whatever the records
    assert table_front_end(private_records=10**6, num_classes=2, columns=4) == "kernel"
    assert table_front_end(private_records=10**6, num_classes=2, columns=8) == "quadratic"
    # breast-cancer-like (30 columns, 455 records) and digits-like tables keep the kernel
    assert table_front_end(private_records=455, num_classes=2, columns=30) == "kernel"
    assert table_front_end(private_records=1438, num_classes=10, columns=64) == "kernel"
    # beyond the widest quadratic map: the columns and the "lda" rule, with 20 records per class
    # for each column (else the kernel)
    assert table_front_end(private_records=10**9, num_classes=2, columns=91) == "none"
    assert table_front_end(private_records=2 * 20 * 91, num_classes=2, columns=91) == "none"
    assert table_front_end(private_records=2 * 20 * 91 - 2, num_classes=2, columns=91) == "kernel"
    # the hospital of benchmarks/messy_tables.py: 38 encoded columns, 6400 records, 3 classes
    assert table_front_end(private_records=6400, num_classes=3, columns=38) == "none"
    assert table_front_end(private_records=10**6, num_classes=2, columns=19) == "quadratic"
    with pytest.raises(ValueError, match="columns"):
        quadratic_width(0)


def test_without_noise_the_rule_is_sklearns_qda():
    """With negligible noise the readback gives each class's mean and covariance of the
    (clipped) rows, and the labels agree with scikit-learn's QuadraticDiscriminantAnalysis
    trained on the same private rows with their labels (clipping biases the moments of the
    10 % of rows beyond the clip radius: agreement, not identity)."""
    from sklearn.discriminant_analysis import QuadraticDiscriminantAnalysis

    (public_x, public_y), (private_x, private_y) = _gaussians(0)
    front, e_public, release = _release(public_x, private_x, private_y, sigma=1e-6)
    rule = labelling_rule(release, e_public, "qda")
    assert isinstance(rule, QuadraticDiscriminant) and rule.means.shape == (3, 4)
    z = front.embed(private_x)[:, :4].astype(np.float64)
    reference = QuadraticDiscriminantAnalysis().fit(z, private_y)
    z_public = e_public[:, :4]
    ours, theirs = rule.predict(e_public), reference.predict(z_public)
    assert np.mean(ours == theirs) > 0.95
    assert np.mean(ours == public_y) > np.mean(theirs == public_y) - 0.03
    # the class means are those of the rows (clipping shrinks the far ones a little)
    for j in range(3):
        np.testing.assert_allclose(rule.means[j], z[private_y == j].mean(axis=0), atol=0.1)


def test_the_rule_separates_nested_shells_where_lda_cannot():
    """The reason for the quadratic front-end: classes that differ in spread, not in mean."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(12000, 6))
    radius = np.linalg.norm(x[:, :3], axis=1)
    y = np.digitize(radius, np.quantile(radius, [1 / 3, 2 / 3]))
    x = x * [1.0, 10.0, 0.1, 1.0, 1e3, 1.0]
    public_x, public_y, private_x, private_y = x[:2000], y[:2000], x[2000:], y[2000:]
    _, e_public, release = _release(public_x, private_x, private_y, sigma=2.6)
    qda = np.mean(labelling_rule(release, e_public, "qda").predict(e_public) == public_y)
    # the nearest noisy mean of the columns themselves (the linear front-end): near chance
    front, raw_public = PublicFrontEnd.fit_transform(public_x, features="none", dims=6)
    linear = noisy_class_means(
        raw_public,
        front.embed(private_x),
        private_y,
        sigma=2.6,
        count_weight=KAPPA,
        num_classes=3,
        rng=np.random.default_rng(0),
    )
    lda = np.mean(linear.predict(raw_public) == public_y)
    assert lda < 0.5 < 0.85 < qda, (lda, qda)


def test_eigenvalues_below_the_noise_level_are_raised_to_it():
    """The noise floor 2 sqrt(F) R sigma tau / n_j: more noise, a higher floor on every class's
    variances; the scores stay finite and the rule keeps its accuracy above chance."""
    (public_x, public_y), (private_x, private_y) = _gaussians(2, n_private=3000)
    floors = []
    for sigma in (1e-6, 5.0, 50.0):
        _, e_public, release = _release(public_x, private_x, private_y, sigma=sigma, seed=3)
        rule = quadratic_discriminant(release, e_public)
        tau = float(np.sqrt(np.mean(release.geometry.scale[4:] ** 2)))
        expected = 2.0 * 2.0 * release.geometry.radius * sigma * tau / release.counts
        assert np.all(rule.variances >= expected[:, None] * (1 - 1e-12))
        assert np.all(np.isfinite(rule.scores(e_public)))
        floors.append(rule.variances.min())
    assert floors[2] > 3 * floors[0]  # much noise: every variance raised well above the true ones
    _, e_public, release = _release(public_x, private_x, private_y, sigma=5.0, seed=3)
    assert np.mean(quadratic_discriminant(release, e_public).predict(e_public) == public_y) > 0.6


def test_the_rule_is_post_processing_and_refuses_other_embeddings():
    (public_x, _), (private_x, private_y) = _gaussians(3, n_public=500, n_private=2000)
    _, e_public, release = _release(public_x, private_x, private_y, sigma=1.0, seed=4)
    a = quadratic_discriminant(release, e_public)
    b = quadratic_discriminant(release, e_public.copy())
    np.testing.assert_array_equal(a.scores(e_public), b.scores(e_public))
    np.testing.assert_array_equal(np.argmax(a.scores(e_public), axis=1), a.predict(e_public))
    with pytest.raises(ValueError, match="features"):
        a.scores(e_public[:, :10])
    # a rule that is not affine in the embedding cannot be recovered from its scores
    assert "qda" not in LINEAR_RULES
    with pytest.raises(ValueError, match="rule must be one of"):
        rule_features(e_public, release.geometry, "qda")
    with pytest.raises(ValueError, match="rule must be one of"):
        recover_rule(e_public, a.scores(e_public), rule="qda")


def test_the_quadratic_front_end_reads_public_rows_only():
    """z is centred on the public mean of the clipped, standardised columns (the public z have
    mean exactly 0), phi = [z, z_i z_k (i <= k)], and the embedding is phi minus its public
    mean: the same for every chunk size, refused for images and for too many columns."""

    rng = np.random.default_rng(5)
    public = rng.normal(size=(300, 3)) * [1.0, 100.0, 0.01] + 50.0
    public[0, 1] = 1e9  # a wild value: clipped
    quad = public_embedding.QuadraticFeatures.fit(public)
    phi = quad.transform(public)
    assert phi.shape == (300, 9)
    np.testing.assert_allclose(phi[:, :3].mean(axis=0), 0.0, atol=1e-12)
    z = phi[:, :3]
    np.testing.assert_allclose(
        phi[:, 3:], np.stack([z[:, i] * z[:, k] for i, k in zip(*np.triu_indices(3))], axis=1)
    )
    assert np.abs(z).max() <= 2 * public_embedding.KERNEL_CLIP
    front, embedded = public_embedding.PublicFrontEnd.fit_transform(
        public, features="quadratic", dims=None
    )
    np.testing.assert_allclose(embedded.mean(axis=0), 0.0, atol=1e-4)
    private = rng.normal(size=(50, 3))
    one_block = front.embed(private)
    old = public_embedding.KERNEL_CHUNK
    try:
        public_embedding.KERNEL_CHUNK = 7
        np.testing.assert_allclose(front.embed(private), one_block, atol=1e-6)
    finally:
        public_embedding.KERNEL_CHUNK = old
    with pytest.raises(ValueError, match="maps tables"):
        public_embedding.PublicFrontEnd.fit_transform(
            rng.random((20, 1, 8, 8)), features="quadratic", dims=None
        )
    with pytest.raises(ValueError, match='set \\[knn\\] features = "kernel"'):
        public_embedding.QuadraticFeatures.fit(rng.normal(size=(10, 91)))


def test_the_quadratic_front_end_maps_every_column_to_public_normal_scores():
    """A skewed column (lognormal), an integer code and a constant column: the public z of each
    non-constant column has mean 0 and spread ~1, the map is monotone, equal inputs share one
    score, and values beyond the public range get the end scores (a wild value is bounded)."""
    from scipy import stats

    rng = np.random.default_rng(6)
    public = np.column_stack(
        [rng.lognormal(sigma=2.0, size=2000), rng.integers(0, 4, 2000), np.full(2000, 7.0)]
    )
    quad = public_embedding.QuadraticFeatures.fit(public)
    z = quad.transform(public)[:, :3]
    np.testing.assert_allclose(z.mean(axis=0), 0.0, atol=1e-12)
    assert 0.95 < z[:, 0].std() < 1.05 and abs(stats.skew(z[:, 0])) < 0.05
    assert abs(stats.skew(public[:, 0])) > 5
    order = np.argsort(public[:, 0])
    assert np.all(np.diff(z[order, 0]) >= 0)
    for code in range(4):
        assert np.ptp(z[public[:, 1] == code, 1]) == 0
    assert np.all(np.abs(z[:, 2]) < 1e-12)
    far = quad.transform(np.array([[1e12, 99.0, 7.0], [-1e12, -99.0, 7.0]]))[:, :3]
    assert np.all(np.abs(far) <= np.abs(z).max(axis=0) + 1e-12)
    with pytest.raises(ValueError, match="finite"):
        public_embedding.QuadraticFeatures.fit(np.array([[1.0, np.nan], [2.0, 3.0]]))
