"""The "qda" labelling rule of a class-means release over a table's quadratic features
(:func:`quadratic_discriminant`; the front-end is :class:`pate.teachers.public_embedding.QuadraticFeatures`):
each class's Gaussian read back from the released sums of the columns and their products.
Post-processing of the release (:mod:`pate.core.mean_release`) and the public embeddings only."""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt

from pate.analysis.arrays import FloatArray, IntArray
from pate.analysis.errors import InputError
from pate.analysis.validation import check_embeddings, check_int
from pate.core.mean_release import NoisyClassMeans, embeddings_of_width, labels_of_scores

__all__ = [
    "QUADRATIC_MAX_WIDTH",
    "quadratic_width",
    "QuadraticDiscriminant",
    "quadratic_discriminant",
]

#: The most features the "quadratic" front-end makes (F + F (F + 1) / 2 for F columns: 90 columns).
QUADRATIC_MAX_WIDTH = 4185


def quadratic_width(columns: int) -> int:
    """How many features a table's quadratic front-end makes of ``columns`` columns
    (:class:`pate.teachers.public_embedding.QuadraticFeatures`): each column and each product of two
    (squares included), F + F (F + 1) / 2."""
    f = check_int(columns, "columns", minimum=1)
    return f + f * (f + 1) // 2


def _columns_of(width: int) -> int:
    """F such that quadratic_width(F) == width (a ValueError if none: not quadratic features)."""
    f = int(round((np.sqrt(9.0 + 8.0 * width) - 3.0) / 2.0))
    if f < 1 or quadratic_width(f) != width:
        raise InputError(
            f'the "qda" rule reads a release over a table\'s quadratic features '
            f'([knn] features = "quadratic"); embeddings of {width} features are '
            'not (use rule = "lda" or "logistic")'
        )
    return f


@dataclasses.dataclass(frozen=True)
class QuadraticDiscriminant:
    """The "qda" rule (:func:`quadratic_discriminant`): class ``means`` (m, F), the eigenvectors
    ``axes`` (m, F, F) and floored eigenvalues ``variances`` (m, F) of each class covariance,
    ``log_prior`` (m,). Scores of embeddings (N, F + F (F + 1) / 2) read their first F columns."""

    means: np.ndarray
    axes: np.ndarray
    variances: np.ndarray
    log_prior: np.ndarray

    def scores(self, embeddings: npt.ArrayLike) -> FloatArray:
        f = self.means.shape[1]
        e = embeddings_of_width(embeddings, quadratic_width(f), "the quadratic rule")
        z = e[:, :f]
        out: FloatArray = np.empty((len(z), len(self.means)))
        for j, (mean, axes, var) in enumerate(zip(self.means, self.axes, self.variances)):
            d = (z - mean) @ axes
            out[:, j] = (
                -0.5 * np.sum(np.log(var)) - 0.5 * np.sum(d * d / var, axis=1) + self.log_prior[j]
            )
        return out

    def predict(self, embeddings: npt.ArrayLike) -> IntArray:
        return labels_of_scores(self.scores(embeddings))


def quadratic_discriminant(
    release: NoisyClassMeans, public: npt.ArrayLike, *, shrink: bool = False
) -> QuadraticDiscriminant:
    """Quadratic discriminant analysis (Hastie, Tibshirani & Friedman 2009, Section 4.3) read
    from a class-means ``release`` over a table's quadratic features; post-processing of the
    release and the ``public`` embeddings only (no privacy cost).

    The class means and covariances read from the release, the eigenvalue floor at the noise
    level and ``shrink`` (soft-thresholding each coordinate of a class's mean embedding at its
    universal threshold, Donoho & Johnstone 1994): docs/own_data.md,
    "pate.core.quadratic_rule". :func:`pate.core.release_check.checked_rule` chooses between
    ``shrink`` and not from the release and the public rows (free)."""
    pub = check_embeddings(public, "public")
    width = release.means.shape[1]
    f = _columns_of(width)
    if pub.shape[1] != width:
        raise InputError(f"public has {pub.shape[1]} features, the release {width}")
    z_pub = pub[:, :f].astype(np.float64)
    public_cov = z_pub.T @ z_pub / len(z_pub)
    numeric_floor = 1e-6 * max(float(np.trace(public_cov)) / f, 1e-300)
    scale = release.geometry.scale
    tau_rms = float(np.sqrt(np.mean(scale[f:] ** 2)))
    upper = np.triu_indices(f)
    means, axes, variances = [], [], []
    threshold = np.sqrt(2.0 * np.log(width)) * release.geometry.radius * release.sigma * scale
    for j in range(release.means.shape[0]):
        e_mean = release.means[j] * scale
        if shrink:
            cut = threshold / release.counts[j]
            e_mean = np.sign(e_mean) * np.maximum(np.abs(e_mean) - cut, 0.0)
        mean = e_mean[:f]
        second = np.zeros((f, f))
        second[upper] = e_mean[f:]
        second = second + np.triu(second, 1).T
        covariance = second + public_cov - np.outer(mean, mean)
        noise = (
            2.0 * np.sqrt(f) * release.geometry.radius * release.sigma * tau_rms / release.counts[j]
        )
        var, vec = np.linalg.eigh(covariance)
        means.append(mean)
        axes.append(vec)
        variances.append(np.maximum(var, max(noise, numeric_floor)))
    return QuadraticDiscriminant(
        means=np.array(means),
        axes=np.array(axes),
        variances=np.array(variances),
        log_prior=release.log_prior.copy(),
    )
