"""Noisy class means: label public queries from one Gaussian release of per-class sums.

The "class-means" mechanism (:mod:`pate.mechanisms`; analysis: :mod:`pate.analysis.class_means`)
uses the private records themselves, like Private-kNN, but instead of a noisy vote per query it
releases once the per-class sums of their embeddings and the class counts with Gaussian noise, and
labels every public query from that release by linear discriminant analysis (LDA; Hastie,
Tibshirani & Friedman, "The Elements of Statistical Learning", 2nd ed., Section 4.3) with the
covariance estimated on the public split. One release labels all the queries: the number of
labels is no longer bounded by the budget, only their accuracy is (the noise on the means).
This module is part of the pate core layer (numpy and ``pate.analysis`` / ``pate.rng`` only).

Symbols
-------
public    (n, d) embeddings of ALL the public items (from a map fitted on public data only);
          the whitening statistics and the clipping radius are computed from them
queries   (q, d) embeddings of the public items to label (usually ``public`` itself)
private   (N, d) embeddings of the private records; labels (N,) their classes in [0, m)
s         per-axis standard deviations of ``public`` (plus ``WHITEN_FLOOR`` x their mean
          variance, so that no axis is divided by ~0); w(e) = e / s, the whitened embedding.
          The public embeddings are centred (``public_pca_embedding`` centres them on the public
          mean); their principal axes are uncorrelated, so in w-coordinates the public
          covariance is (close to) the identity and LDA is a nearest-class-mean rule
R         ``CLIP_QUANTILE`` quantile of the norms ||w(e)|| over the public rows
u         w(e) min(1, R / ||w(e)||) / R: the clipped, scaled embedding, ||u|| <= 1
S         (m, d + 1): row j = (sum of u over class j's private records, count of class j);
          released as S + N(0, sigma^2 I) (sensitivity sqrt(2): ``pate.analysis.class_means``)
mu_j      R * (noisy row sum of u) / max(noisy count, 1): the noisy class mean (w-coordinates)
pi_j      max(noisy count_j, 1) / sum_j max(noisy count_j, 1): the noisy class prior
score     score_j(w) = <mu_j, w> - ||mu_j||^2 / 2 + log pi_j (LDA with identity covariance);
          the label is argmax_j score_j(w(query)), ties to the lower class

Randomness: the noise is ``rng.standard_normal((m, d + 1))`` scaled by sigma, drawn once; its
draw depends only on (m, d), never on the data. Queries are not clipped (labelling them is
post-processing).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pate.analysis.validation import check_embeddings, check_int, check_labels, check_positive
from pate.rng import check_rng

__all__ = ["CLIP_QUANTILE", "WHITEN_FLOOR", "PublicGeometry", "public_geometry", "class_sums",
           "NoisyClassMeans", "noisy_class_means"]

#: Quantile of the public whitened norms used as the clipping radius R (a public quantity).
CLIP_QUANTILE = 0.9
#: Added to every axis' public variance, as a fraction of the mean variance (numerical floor).
WHITEN_FLOOR = 1e-3


@dataclasses.dataclass(frozen=True)
class PublicGeometry:
    """The public whitening ``scale`` (d,) and clipping ``radius`` R (module docstring)."""

    scale: np.ndarray
    radius: float

    def whiten(self, embeddings: np.ndarray) -> np.ndarray:
        return np.asarray(embeddings, dtype=np.float64) / self.scale


def public_geometry(public) -> PublicGeometry:
    """Whitening scale and clipping radius from the public embeddings only (>= 2 rows)."""
    pub = check_embeddings(public, "public")
    if pub.shape[0] < 2:
        raise ValueError(f"public needs at least 2 items to estimate its spread, got {pub.shape[0]}")
    var = pub.var(axis=0)
    floor = WHITEN_FLOOR * float(var.mean())
    if not floor > 0:
        raise ValueError("public embeddings are all identical: no spread to whiten with")
    scale = np.sqrt(var + floor)
    radius = float(np.quantile(np.linalg.norm(pub / scale, axis=1), CLIP_QUANTILE))
    if not radius > 0:
        raise ValueError(f"the {CLIP_QUANTILE:g} quantile of the public norms is 0: most public "
                         "embeddings are at the public mean; use another embedding")
    return PublicGeometry(scale=scale, radius=radius)


def _clipped(embeddings: np.ndarray, geometry: PublicGeometry) -> np.ndarray:
    """u = w min(1, R / ||w||) / R for every row, w = e / s, without overflow: e / s or ||w||^2
    can exceed the float range for a finite e (e.g. 1e308 with s < 1), so each row is first
    divided by its largest |value| (twice: before and after whitening) and the norm is carried
    in log space. Then ||u|| <= 1 for every finite row, and u = 0 for a zero row."""
    a = np.max(np.abs(embeddings), axis=1)
    a_safe = np.where(a > 0, a, 1.0)
    v = (embeddings / a_safe[:, None]) / geometry.scale       # |e / a| <= 1, s > 0: finite
    b = np.max(np.abs(v), axis=1)
    b_safe = np.where(b > 0, b, 1.0)
    v = v / b_safe[:, None]                                   # entries in [-1, 1], one is +-1
    n = np.linalg.norm(v, axis=1)                             # in [1, sqrt(d)] (or 0)
    n_safe = np.where(n > 0, n, 1.0)
    log_norm = np.log(a_safe) + np.log(b_safe) + np.log(n_safe)   # log ||w||
    factor = np.exp(np.minimum(log_norm - np.log(geometry.radius), 0.0))  # min(||w|| / R, 1)
    return np.where((n > 0)[:, None], v * (factor / n_safe)[:, None], 0.0)


def class_sums(private, labels, *, num_classes: int, geometry: PublicGeometry) -> np.ndarray:
    """The sensitive statistic S, (m, d + 1) float64 (module docstring): each row's clipped
    sum of u and, last, the class count. Every record adds a row vector of norm <= sqrt(2)."""
    m = check_int(num_classes, "num_classes", minimum=2)
    p = check_embeddings(private, "private")
    if p.shape[1] != geometry.scale.shape[0]:
        raise ValueError(f"private has {p.shape[1]} features but the public geometry "
                         f"{geometry.scale.shape[0]}")
    y = check_labels(labels, p.shape[0], m)
    u = _clipped(p, geometry)
    out = np.zeros((m, p.shape[1] + 1))
    np.add.at(out[:, :-1], y, u)
    out[:, -1] = np.bincount(y, minlength=m)
    return out


@dataclasses.dataclass(frozen=True)
class NoisyClassMeans:
    """The post-processed release: noisy class means ``means`` (m, d) in whitened coordinates,
    ``log_prior`` (m,), and the public ``geometry``; :meth:`scores` / :meth:`predict` label
    embeddings (post-processing, no privacy cost)."""

    means: np.ndarray
    log_prior: np.ndarray
    geometry: PublicGeometry

    def scores(self, embeddings) -> np.ndarray:
        e = check_embeddings(embeddings, "embeddings")
        if e.shape[1] != self.means.shape[1]:
            raise ValueError(f"embeddings have {e.shape[1]} features, the means {self.means.shape[1]}")
        w = self.geometry.whiten(e)
        return (w @ self.means.T - 0.5 * np.einsum("jd,jd->j", self.means, self.means)
                + self.log_prior)

    def predict(self, embeddings) -> np.ndarray:
        return np.argmax(self.scores(embeddings), axis=1).astype(np.int64)


def noisy_class_means(public, private, labels, *, sigma, num_classes, rng) -> NoisyClassMeans:
    """Release S + N(0, sigma^2 I) once and post-process it into the LDA rule (module docstring).

    public (n >= 2, d), private (N, d) finite embeddings; labels (N,) ints in [0, num_classes);
    sigma > 0; num_classes >= 2; rng a numpy Generator or pate.rng.SecureGenerator. Everything
    is validated before the noise is drawn; the draw depends only on (num_classes, d).
    """
    sigma = check_positive(sigma, "sigma")
    geometry = public_geometry(public)
    sums = class_sums(private, labels, num_classes=num_classes, geometry=geometry)
    rng = check_rng(rng)
    noisy = sums + sigma * np.asarray(rng.standard_normal(sums.shape), dtype=np.float64)
    counts = np.maximum(noisy[:, -1], 1.0)
    means = geometry.radius * noisy[:, :-1] / counts[:, None]
    log_prior = np.log(counts) - np.log(counts.sum())
    return NoisyClassMeans(means=means, log_prior=log_prior, geometry=geometry)
