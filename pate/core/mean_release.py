"""Noisy class means: label public queries from one Gaussian release of per-class sums.

The "class-means" mechanism (:mod:`pate.mechanisms`; analysis: :mod:`pate.analysis.class_means`)
uses the private records themselves, like Private-kNN, but instead of a noisy vote per query it
releases once the per-class sums of their embeddings and the class counts with Gaussian noise, and
labels every public query from that release by linear discriminant analysis (LDA; Hastie,
Tibshirani & Friedman, "The Elements of Statistical Learning", 2nd ed., Section 4.3) with the
covariance estimated on the public split, or by the public-marginal logistic rule (below). One
release labels all the queries: the number of labels is no longer bounded by the budget, only
their accuracy is (the noise on the means).
This module is part of the pate core layer (numpy, scipy and ``pate.analysis`` / ``pate.core.rng``
only).

More: docs/own_data.md, "pate.core.mean_release".
"""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt

from pate.analysis.arrays import FloatArray, IntArray
from pate.analysis.errors import InputError
from pate.analysis.mapped import release_read
from pate.analysis.validation import check_embeddings, check_int, check_labels, check_positive
from pate.core.rng import Rng, check_rng

__all__ = [
    "CLIP_QUANTILE",
    "WHITEN_FLOOR",
    "SUM_ROWS",
    "PublicGeometry",
    "public_geometry",
    "clipped_scaled",
    "class_sums",
    "embeddings_of_width",
    "labels_of_scores",
    "NoisyClassMeans",
    "noisy_class_means",
    "release_from_statistic",
]

#: Quantile of the public whitened norms used as the clipping radius R (a public quantity).
CLIP_QUANTILE = 0.9
#: Added to every axis' public variance, as a fraction of the mean variance (numerical floor).
WHITEN_FLOOR = 1e-3
#: Private rows clipped and summed at a time by :func:`class_sums` (its float64 temporaries).
SUM_ROWS = 4096


@dataclasses.dataclass(frozen=True)
class PublicGeometry:
    """The public whitening ``scale`` (d,) and clipping ``radius`` R (docs/own_data.md)."""

    scale: np.ndarray
    radius: float

    def whiten(self, embeddings: np.ndarray) -> FloatArray:
        whitened: FloatArray = np.asarray(embeddings, dtype=np.float64) / self.scale
        return whitened


def public_geometry(public: npt.ArrayLike) -> PublicGeometry:
    """Whitening scale and clipping radius from the public embeddings only (>= 2 rows)."""
    pub = check_embeddings(public, "public")
    if pub.shape[0] < 2:
        raise InputError(
            f"public needs at least 2 items to estimate its spread, got {pub.shape[0]}"
        )
    var = pub.var(axis=0)
    floor = WHITEN_FLOOR * float(var.mean())
    if not floor > 0:
        raise InputError("public embeddings are all identical: no spread to whiten with")
    scale = np.sqrt(var + floor)
    radius = float(np.quantile(np.linalg.norm(pub / scale, axis=1), CLIP_QUANTILE))
    if not radius > 0:
        raise InputError(
            f"the {CLIP_QUANTILE:g} quantile of the public norms is 0: most public "
            "embeddings are at the public mean; use another embedding"
        )
    return PublicGeometry(scale=scale, radius=radius)


def clipped_scaled(embeddings: np.ndarray, geometry: PublicGeometry) -> np.ndarray:
    """u = w min(1, R / ||w||) / R for every row, w = e / s, without overflow: e / s or ||w||^2
    can exceed the float range for a finite e (e.g. 1e308 with s < 1), so each row is first
    divided by its largest |value| (twice: before and after whitening) and the norm is carried
    in log space. Then ||u|| <= 1 for every finite row, and u = 0 for a zero row."""
    a = np.max(np.abs(embeddings), axis=1)
    a_safe = np.where(a > 0, a, 1.0)
    v = (embeddings / a_safe[:, None]) / geometry.scale  # |e / a| <= 1, s > 0: finite
    b = np.max(np.abs(v), axis=1)
    b_safe = np.where(b > 0, b, 1.0)
    v = v / b_safe[:, None]  # entries in [-1, 1], one is +-1
    n = np.linalg.norm(v, axis=1)  # in [1, sqrt(d)] (or 0)
    n_safe = np.where(n > 0, n, 1.0)
    log_norm = np.log(a_safe) + np.log(b_safe) + np.log(n_safe)  # log ||w||
    factor = np.exp(np.minimum(log_norm - np.log(geometry.radius), 0.0))  # min(||w|| / R, 1)
    clipped: FloatArray = np.where((n > 0)[:, None], v * (factor / n_safe)[:, None], 0.0)
    return clipped


def class_sums(
    private: npt.ArrayLike,
    labels: npt.ArrayLike,
    *,
    num_classes: int,
    geometry: PublicGeometry,
    count_weight: float,
) -> FloatArray:
    """The sensitive statistic S, (m, d + 1) float64 (docs/own_data.md): each row's clipped
    sum of u and, last, ``count_weight`` times the class count. Every record adds a row vector
    of norm <= sqrt(1 + count_weight**2)."""
    m = check_int(num_classes, "num_classes", minimum=2)
    kappa = check_positive(count_weight, "count_weight")
    p = private if isinstance(private, np.ndarray) else check_embeddings(private, "private")
    if p.ndim != 2:
        p = check_embeddings(p, "private")  # the typed error
    for i in range(0, p.shape[0], SUM_ROWS):  # every block checked before any is summed
        check_embeddings(p[i : i + SUM_ROWS], "private")
        release_read(p[i : i + SUM_ROWS])  # memory-mapped embeddings: not kept resident
    if p.shape[1] != geometry.scale.shape[0]:
        raise InputError(
            f"private has {p.shape[1]} features but the public geometry {geometry.scale.shape[0]}"
        )
    y = check_labels(labels, p.shape[0], m)
    out = np.zeros((m, p.shape[1] + 1))
    # a block of rows at a time (float64 temporaries of SUM_ROWS rows, not of every record);
    # np.add.at adds the rows in order, so the sums are those of one pass over all the rows
    for i in range(0, p.shape[0], SUM_ROWS):
        block = np.asarray(p[i : i + SUM_ROWS], dtype=np.float64)
        np.add.at(out[:, :-1], y[i : i + SUM_ROWS], clipped_scaled(block, geometry))
        release_read(p[i : i + SUM_ROWS])
    out[:, -1] = kappa * np.bincount(y, minlength=m)
    return out


def embeddings_of_width(embeddings: npt.ArrayLike, width: int, what: str) -> FloatArray:
    """Embeddings to label, validated against the ``width`` features of ``what`` labels them."""
    e = check_embeddings(embeddings, "embeddings")
    if e.shape[1] != width:
        raise InputError(f"embeddings have {e.shape[1]} features, {what} {width}")
    return e


def labels_of_scores(scores: np.ndarray) -> IntArray:
    """The label of every row of class ``scores``: the largest, ties to the lower class."""
    labels: IntArray = np.argmax(scores, axis=1).astype(np.int64)
    return labels


@dataclasses.dataclass(frozen=True)
class NoisyClassMeans:
    """The post-processed release: noisy class means ``means`` (m, d) in whitened coordinates,
    ``log_prior`` (m,), the public ``geometry``, the noisy class ``counts`` (m,) (each at least
    1) and the noise ``sigma`` of the release (public: the run's setting); :meth:`scores` /
    :meth:`predict` label embeddings (post-processing, no privacy cost)."""

    means: np.ndarray
    log_prior: np.ndarray
    geometry: PublicGeometry
    counts: np.ndarray
    sigma: float
    #: the released S + noise itself, (m, d + 1), and kappa (None: built from the means alone)
    statistic: np.ndarray | None = None
    count_weight: float | None = None

    def scores(self, embeddings: npt.ArrayLike) -> FloatArray:
        w = self.geometry.whiten(embeddings_of_width(embeddings, self.means.shape[1], "the means"))
        out: FloatArray = (
            w @ self.means.T - 0.5 * np.einsum("jd,jd->j", self.means, self.means) + self.log_prior
        )
        return out

    def predict(self, embeddings: npt.ArrayLike) -> IntArray:
        return labels_of_scores(self.scores(embeddings))


def noisy_class_means(
    public: npt.ArrayLike,
    private: npt.ArrayLike,
    labels: npt.ArrayLike,
    *,
    sigma: float,
    count_weight: float,
    num_classes: int,
    rng: Rng,
) -> NoisyClassMeans:
    """Release S + N(0, sigma^2 I) once and post-process it into the LDA rule (docs/own_data.md).

    public (n >= 2, d), private (N, d) finite embeddings; labels (N,) ints in [0, num_classes);
    sigma > 0; count_weight (kappa) > 0, the weight of the counts in S (the release costs
    ``pate.analysis.class_means.class_means_rdp(sigma=sigma, count_weight=count_weight)``);
    num_classes >= 2; rng a numpy Generator or pate.core.rng.SecureGenerator. Everything is validated
    before the noise is drawn; the draw depends only on (num_classes, d).
    """
    sigma = check_positive(sigma, "sigma")
    kappa = check_positive(count_weight, "count_weight")
    geometry = public_geometry(public)
    sums = class_sums(
        private, labels, num_classes=num_classes, geometry=geometry, count_weight=kappa
    )
    rng = check_rng(rng)
    noisy = sums + sigma * np.asarray(rng.standard_normal(sums.shape), dtype=np.float64)
    return release_from_statistic(noisy, geometry=geometry, sigma=sigma, count_weight=kappa)


def release_from_statistic(
    statistic: np.ndarray, *, geometry: PublicGeometry, sigma: float, count_weight: float
) -> NoisyClassMeans:
    """The post-processing of a noisy statistic (m, d + 1) (``S + N(0, sigma^2 I)``, or any
    public function of it) into noisy class means, counts (at least 1) and priors."""
    noisy = np.asarray(statistic, dtype=np.float64)
    counts = np.maximum(noisy[:, -1] / count_weight, 1.0)
    means = geometry.radius * noisy[:, :-1] / counts[:, None]
    log_prior = np.log(counts) - np.log(counts.sum())
    return NoisyClassMeans(
        means=means,
        log_prior=log_prior,
        geometry=geometry,
        counts=counts,
        sigma=sigma,
        statistic=noisy,
        count_weight=count_weight,
    )
