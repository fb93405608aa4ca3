"""``pate.core.release_check``: data fission of a class-means release, the mismatch of a rule's
public labels with the release and what it should be, the choice between the qda rule's two
readings, and the warning when no reading reproduces the release."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from pate.analysis.errors import InputError
from pate.core.labelling_rules import AffineRule, rule_features
from pate.core.mean_release import NoisyClassMeans, noisy_class_means
from pate.core.quadratic_rule import QuadraticDiscriminant, quadratic_discriminant
from pate.core.release_check import (
    CHECK_DRAWS,
    RuleCheck,
    checked_rule,
    expected_mismatch,
    fission,
    mismatch,
)
from pate.core.tuned_defaults import MISMATCH_WARNING
from pate.teachers.public_embedding import PublicFrontEnd

KAPPA = 0.3


def _release(public_x, private_x, private_y, *, sigma, classes, seed=0):
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
    return e_public.astype(np.float64), release


def _shells(seed, n=14000, noise_columns=6):
    """3 nested shells in 4 columns beside pure-noise columns, on awkward scales."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4 + noise_columns))
    radius = np.linalg.norm(x[:, :4], axis=1)
    y = np.digitize(radius, np.quantile(radius, [1 / 3, 2 / 3]))
    x = x * np.logspace(-1, 2, x.shape[1])
    return (x[:2000], y[:2000]), (x[2000:], y[2000:])


def test_fission_halves_are_independent_given_the_statistic():
    """Y1 = Y + Z and Y2 = Y - Z: each N(S, 2 sigma^2), uncorrelated with each other (the
    reason the check compares a rule read from one half with the other)."""
    sigma, statistic = 1.5, np.zeros((200, 50))
    noisy = statistic + sigma * np.random.default_rng(0).standard_normal(statistic.shape)
    splits = fission(noisy, sigma=sigma, draws=2, seed=11)
    assert len(splits) == 2
    first, second = splits[0]
    a, b = (first - statistic).ravel(), (second - statistic).ravel()
    assert abs(np.var(a) / (2 * sigma**2) - 1) < 0.05 and abs(np.var(b) / (2 * sigma**2) - 1) < 0.05
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.03
    np.testing.assert_allclose(first + second, 2 * noisy, rtol=0, atol=1e-12)
    # public randomness from a fixed seed: the same splits every time
    again = fission(noisy, sigma=sigma, draws=2, seed=11)
    np.testing.assert_array_equal(again[1][0], splits[1][0])


def test_true_labels_show_the_mismatch_noise_and_sampling_explain():
    """expected_mismatch is what the true public labels give against a fission half (within
    a factor that leaves MISMATCH_WARNING well clear); shuffled labels give far more."""
    (public_x, public_y), (private_x, private_y) = _shells(0)
    e_public, release = _release(public_x, private_x, private_y, sigma=2.6, classes=3)
    u = rule_features(e_public, release.geometry, "logistic")
    total = float(release.counts.sum())
    expected = expected_mismatch(u, num_classes=3, sigma=release.sigma, total=total)
    splits = fission(release.statistic, sigma=release.sigma)
    true = np.mean([mismatch(s, u, public_y, total=total) for _, s in splits])
    shuffled = np.random.default_rng(1).permutation(public_y)
    wrong = np.mean([mismatch(s, u, shuffled, total=total) for _, s in splits])
    assert 0.5 < true / expected < 1.3, true / expected
    assert wrong / expected > 1.5 * MISMATCH_WARNING, wrong / expected


def test_shells_beside_noise_columns_choose_the_shrunk_moments():
    """Nested shells in 4 of 10 columns: the moments shrunk by their noise level label better
    than as released, and the check, reading only the release and the public rows, picks them
    (for every one of three releases)."""
    (public_x, public_y), (private_x, private_y) = _shells(2)
    for seed in range(3):
        e_public, release = _release(
            public_x, private_x, private_y, sigma=2.6, classes=3, seed=seed
        )
        plain = quadratic_discriminant(release, e_public).predict(e_public)
        shrunk = quadratic_discriminant(release, e_public, shrink=True).predict(e_public)
        labeller, check = checked_rule(release, e_public, "qda")
        assert np.mean(shrunk == public_y) > np.mean(plain == public_y) + 0.01
        assert check.chosen == "qda-shrunk" and set(check.ratios) == {"qda", "qda-shrunk"}
        np.testing.assert_array_equal(labeller.predict(e_public), shrunk)
        assert not check.weak and check.ratio < check.ratios["qda"]


def test_gaussian_classes_keep_the_moments_as_released():
    """Classes that differ in many moments (every column informative, many records): shrinking
    loses signal, and the check keeps the moments as released."""
    rng = np.random.default_rng(4)
    n, f = 30000, 8
    y = rng.integers(0, 3, n)
    scales = np.array([np.linspace(0.5, 1.5, f), np.linspace(1.5, 0.5, f), np.ones(f)])
    x = rng.normal(size=(n, f)) * scales[y] + 0.4 * np.eye(3, f)[y] * np.arange(1, f + 1) / f
    e_public, release = _release(x[:4000], x[4000:], y[4000:], sigma=1.0, classes=3)
    labeller, check = checked_rule(release, e_public, "qda")
    assert check.chosen == "qda", check.ratios
    np.testing.assert_array_equal(
        labeller.predict(e_public), quadratic_discriminant(release, e_public).predict(e_public)
    )


def test_a_release_no_reading_reproduces_is_warned_about(caplog):
    """Labels made by a fine checkerboard of two columns: every class has the public moments,
    no Gaussian reading reproduces the class sums, and the check says so in plain words."""
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, size=(16000, 8))
    y = ((np.floor(4 * x[:, 0]) + np.floor(4 * x[:, 1])) % 2).astype(np.int64)
    y = np.where(x[:, 2] > 0.6, 2, y)  # and a third class the moments do see
    e_public, release = _release(x[:3000], x[3000:], y[3000:], sigma=1.0, classes=3)
    with caplog.at_level(logging.WARNING, logger="pate.core.release_check"):
        _, check = checked_rule(release, e_public, "qda")
    assert check.weak and check.ratio > MISMATCH_WARNING, check.ratios
    text = " ".join(r.getMessage() for r in caplog.records)
    assert "not reproduced by the labelling rule" in text and "teachers" in text
    assert check.to_dict()["mismatch_ratios"][check.chosen] == round(check.ratio, 4)


def test_what_is_checked_and_what_is_not():
    (public_x, public_y), (private_x, private_y) = _shells(6, n=5000)
    e_public, release = _release(public_x, private_x, private_y, sigma=2.0, classes=3)
    labeller, check = checked_rule(release, e_public, "lda")
    assert isinstance(labeller, AffineRule) and labeller.rule == "lda"
    assert isinstance(check, RuleCheck) and check.chosen == "lda"
    labeller, check = checked_rule(release, e_public, "logistic")
    assert isinstance(labeller, AffineRule) and check is None
    bare = NoisyClassMeans(
        means=release.means,
        log_prior=release.log_prior,
        geometry=release.geometry,
        counts=release.counts,
        sigma=release.sigma,
    )  # built from the means alone: nothing to split
    labeller, check = checked_rule(bare, e_public, "qda")
    assert isinstance(labeller, QuadraticDiscriminant) and check is None
    with pytest.raises(ValueError, match="rule must be one of"):
        checked_rule(release, e_public, "nearest")
    assert CHECK_DRAWS >= 1


def test_shrinking_with_overwhelming_noise_gives_every_class_the_public_moments():
    """Noise far above every deviation: all of them are cut to 0, so every class has the public
    mean and covariance and the rule answers the largest noisy prior everywhere."""
    (public_x, _), (private_x, private_y) = _shells(7, n=5000)
    e_public, release = _release(public_x, private_x, private_y, sigma=1e4, classes=3)
    rule = quadratic_discriminant(release, e_public, shrink=True)
    np.testing.assert_allclose(rule.means, 0.0)
    assert np.all(rule.variances == rule.variances[:, :1])  # every eigenvalue at the floor
    assert np.all(rule.predict(e_public) == int(np.argmax(release.log_prior)))


# ------------------------------------------------------------------ how far apart the classes are


def _gaussian_release(counts, *, sigma, distance=3.0, d=8, seed=0):
    """A release of classes drawn around means ``distance`` from the origin (class 0), each on
    an axis of its own (unit noise), ``counts`` records each; public rows from the same
    mixture."""
    from pate.core.mean_release import noisy_class_means

    rng = np.random.default_rng(seed)
    centres = np.zeros((len(counts), d))
    centres[np.arange(1, len(counts)), np.arange(len(counts) - 1)] = distance
    y = np.repeat(np.arange(len(counts)), counts)
    x = centres[y] + rng.normal(size=(len(y), d))
    public = centres[rng.integers(0, len(counts), 2000)] + rng.normal(size=(2000, d))
    return noisy_class_means(
        public, x, y, sigma=sigma, count_weight=KAPPA, num_classes=len(counts), rng=rng
    )


def test_class_separation_matches_its_formula():
    """ratio_j = min_k sqrt(max(||mu_j - mu_k||^2 - noise_j - noise_k, 0) / max(noise_j,
    noise_k)), noise_j = d (R sigma / n_j)^2, computed here by hand from the release's fields."""
    from pate.core.release_check import class_separation

    release = _gaussian_release([400, 300, 50], sigma=2.0)
    found = class_separation(release)
    m, d = release.means.shape
    noise = d * (release.geometry.radius * release.sigma / release.counts) ** 2
    for j in range(m):
        others = [k for k in range(m) if k != j]
        ratios = [
            np.sqrt(
                max(np.sum((release.means[j] - release.means[k]) ** 2) - noise[j] - noise[k], 0)
                / max(noise[j], noise[k])
            )
            for k in others
        ]
        best = int(np.argmin(ratios))
        assert found.nearest[j] == others[best]
        assert found.ratios[j] == pytest.approx(ratios[best], rel=1e-12)
        k = others[best]
        squared = np.sum((release.means[j] - release.means[k]) ** 2) - noise[j] - noise[k]
        assert found.distances[j] == pytest.approx(np.sqrt(max(squared, 0)), rel=1e-12)
    assert found.counts == tuple(int(round(c)) for c in release.counts)


def test_a_rare_class_under_heavy_noise_is_named_and_common_ones_are_not():
    """The same classes: with little noise every class is placed; with much noise the class of
    30 records is not (its noisy mean wanders as far as the distance to its neighbour), while
    the classes of 3000 still are (the pair of the middle class and the rare one is blamed on
    the rare one); the warning names it by its declared name."""
    from pate.core.release_check import CANNOT_PLACE, ClassSeparation, class_separation

    quiet = class_separation(_gaussian_release([3000, 3000, 30], sigma=0.05))
    assert quiet.unplaced == () and quiet.warning_text() == ""
    loud = class_separation(_gaussian_release([3000, 3000, 30], sigma=8.0))
    assert loud.unplaced == (2,)
    assert loud.ratios[2] < 2 and loud.counts[2] < loud.counts[loud.nearest[2]]
    text = loud.warning_text(["paid", "pending", "denied"])
    assert text.startswith(CANNOT_PLACE) and "'denied' (" in text
    assert "'paid' (" not in text and "'pending' (" not in text  # named as neighbours at most
    assert "class 2" in loud.warning_text()  # no names: the index
    assert ClassSeparation.from_dict(loud.to_dict()).unplaced == loud.unplaced
    with pytest.raises(InputError, match="four lists"):
        ClassSeparation.from_dict({"nearest": 1, "distances": [], "noise": [], "noisy_counts": []})


def test_classes_that_overlap_are_not_blamed_on_the_noise():
    """Means 0.3 apart (in public standard deviations) under noise of about the same size: the
    rare class's ratio is low, but no rule separates such classes even without noise, so
    nothing is named; under noise above one standard deviation the release cannot tell, and
    the class is named."""
    from pate.core.release_check import class_separation

    close = class_separation(_gaussian_release([3000, 3000, 300], sigma=5.0, distance=0.3))
    assert close.ratios[2] < 2 and close.distances[2] < 1 and close.noise[2] < 1
    assert close.unplaced == ()
    loud = class_separation(_gaussian_release([3000, 3000, 300], sigma=40.0, distance=0.3))
    assert loud.noise[2] > 1 and loud.unplaced == (2,)


def test_class_separation_reads_the_release_only():
    """Post-processing: two releases with the same noisy statistic give the same separation,
    whatever private rows produced them (only the release's fields are read)."""
    from pate.core.mean_release import release_from_statistic
    from pate.core.release_check import class_separation

    release = _gaussian_release([500, 500, 80], sigma=1.0)
    again = release_from_statistic(
        release.statistic.copy(),
        geometry=release.geometry,
        sigma=release.sigma,
        count_weight=release.count_weight,
    )
    assert class_separation(again) == class_separation(release)
