"""Noisy class means: label public queries from one Gaussian release of per-class sums.

The "class-means" mechanism (:mod:`pate.mechanisms`; analysis: :mod:`pate.analysis.class_means`)
uses the private records themselves, like Private-kNN, but instead of a noisy vote per query it
releases once the per-class sums of their embeddings and the class counts with Gaussian noise, and
labels every public query from that release by linear discriminant analysis (LDA; Hastie,
Tibshirani & Friedman, "The Elements of Statistical Learning", 2nd ed., Section 4.3) with the
covariance estimated on the public split, or by the public-marginal logistic rule (below). One
release labels all the queries: the number of labels is no longer bounded by the budget, only
their accuracy is (the noise on the means).
This module is part of the pate core layer (numpy, scipy and ``pate.analysis`` / ``pate.rng``
only).

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
kappa     ``count_weight`` > 0: the weight of a record's count in its contribution
S         (m, d + 1): row j = (sum of u over class j's private records, kappa x count of class
          j); released as S + N(0, sigma^2 I) (sensitivity sqrt(1 + kappa^2):
          ``pate.analysis.class_means``, which also says why a small kappa is better)
n_j       (noisy last entry of row j) / kappa: the noisy count of class j (noise std sigma / kappa)
mu_j      R * (noisy row sum of u) / max(n_j, 1): the noisy class mean (w-coordinates)
pi_j      max(n_j, 1) / sum_j max(n_j, 1): the noisy class prior
score     score_j(w) = <mu_j, w> - ||mu_j||^2 / 2 + log pi_j (LDA with identity covariance);
          the label is argmax_j score_j(w(query)), ties to the lower class

Randomness: the noise is ``rng.standard_normal((m, d + 1))`` scaled by sigma, drawn once; its
draw depends only on (m, d), never on the data. Queries are not clipped by the LDA rule (labelling
them is post-processing).

The public-marginal logistic rule (:func:`public_logistic`; a run's ``[knn] rule = "logistic"``)
-------------------------------------------------------------------------------------------
LDA assumes Gaussian classes with the public covariance. A multinomial logistic model
p(j | u) = softmax(W u + b)_j makes no assumption on the inputs, and its average log-likelihood on
the private records splits into a part that needs the labels and a part that does not:

    (1/N) sum_i log p(y_i | u_i) = sum_j (<W_j, S_j> + b_j n_j) / N  -  (1/N) sum_i lse(W u_i + b)

where S_j is the sum of u over class j and n_j its count (the rows of the released statistic),
and lse the log-sum-exp. The first part is a linear function of S; the second depends on the
private inputs only, not on their labels. PATE assumes the public and private inputs come from
one distribution, so the rule replaces it by its public average, and S, n by the noisy release:

    F(W, b) = (1/n) sum_{public u} lse(W u + b) - sum_j pi_j (<W_j, mu_j> / R + b_j)
              + (ridge / 2) ||W||^2

(pi_j mu_j / R = noisy S_j / sum of the noisy counts, so F reads the release only). F is convex
(lse is convex, the rest linear or quadratic); at its minimum the public model moments match the
released ones: (1/n) sum p(j | u) u = pi_j mu_j / R - ridge W_j and (1/n) sum p(j | u) = pi_j
(moment matching, the maximum-entropy view of logistic regression). Without noise and with the
public rows as the private records, F is exactly the ridge-penalised logistic regression of those
rows (the cross-check in the tests). Everything F reads is the release or public: the rule is
post-processing and costs nothing. Queries are mapped like the public rows it was fitted on
(whitened, clipped, divided by R). ``LOGISTIC_RIDGE`` was chosen in a development simulation
that looked at private data (docs/benchmarks.md lists it).
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
from scipy.optimize import minimize
from scipy.special import logsumexp, softmax

from pate.analysis.validation import (check_choice, check_embeddings, check_int, check_labels,
                                      check_positive)
from pate.rng import check_rng

__all__ = ["CLIP_QUANTILE", "WHITEN_FLOOR", "LOGISTIC_RIDGE", "PublicGeometry", "public_geometry",
           "class_sums", "NoisyClassMeans", "noisy_class_means", "LinearLabeller",
           "public_logistic", "RULES", "RULE_TEXT", "labelling_rule", "rule_features",
           "RecoveredRule", "recover_rule", "RECOVERY_TOLERANCE", "kernel_dims",
           "KERNEL_DIMS_EXPONENT", "KERNEL_DIMS_MIN", "KERNEL_DIMS_MAX"]

logger = logging.getLogger(__name__)

#: Quantile of the public whitened norms used as the clipping radius R (a public quantity).
CLIP_QUANTILE = 0.9
#: Added to every axis' public variance, as a fraction of the mean variance (numerical floor).
WHITEN_FLOOR = 1e-3
#: Ridge penalty of the public-marginal logistic rule, on W in u-coordinates (||u|| <= 1).
LOGISTIC_RIDGE = 1e-3
#: How close to a stationary point public_logistic's result must be (gradient norm relative to
#: 1 + the released moments' norm) before it warns.
GRADIENT_TOLERANCE = 1e-6
#: The largest relative residual with which :func:`recover_rule` accepts published scores.
RECOVERY_TOLERANCE = 1e-8
#: Private rows clipped and summed at a time by :func:`class_sums` (its float64 temporaries).
SUM_ROWS = 4096
#: The labelling rules of a class-means release (``[knn] rule``; :func:`labelling_rule`), with
#: how the privacy report words them.
RULE_TEXT = {
    "lda": "each query gets the class whose noisy mean is nearest in the public-whitened "
           "embedding, plus the log of its noisy prior (linear discriminant analysis)",
    "logistic": "each query is labelled by a logistic regression fitted to the release and to "
                "the public inputs alone (the public inputs stand in for the sensitive inputs' "
                f"distribution; ridge {LOGISTIC_RIDGE:g})",
}
RULES = tuple(RULE_TEXT)


#: The kernel front-end's PCA dimensions: (records per class / sigma) ** KERNEL_DIMS_EXPONENT,
#: between KERNEL_DIMS_MIN and KERNEL_DIMS_MAX (:func:`kernel_dims`).
KERNEL_DIMS_EXPONENT = 0.75
KERNEL_DIMS_MIN = 8
KERNEL_DIMS_MAX = 512


def kernel_dims(*, private_records: int, num_classes: int, sigma: float, public_items: int) -> int:
    """How many public principal axes of a table's kernel features (``[knn] features =
    "kernel"``) a class-means release with noise ``sigma`` can afford: round((n / sigma) **
    KERNEL_DIMS_EXPONENT) with n = private_records / num_classes the records of an average
    class, clamped to [KERNEL_DIMS_MIN, KERNEL_DIMS_MAX] and to the public items. Reads sizes and
    the noise only (no record), so the choice is free.

    Why this shape: a class mean is a sum of n clipped rows (norm <= 1) divided by n, released
    with noise sigma per coordinate, so the noise on it grows like sigma sqrt(d) / n in d
    dimensions while the kernel rule gains resolution with d at a decreasing rate (the public
    spectrum decays): more records per class or less noise afford more dimensions. The power
    law and its exponent are empirical, fitted to the best dimensions of development runs on
    the ``benchmarks/own_data.py`` tables at eps 2 (n / sigma = 65: 16 dims; 115: 32; 474: 64
    to 96; 960: 128; 1923: 384 to 512) -- docs/plan.md lists this as a choice that looked at
    those datasets -- not derived."""
    n = check_int(private_records, "private_records", minimum=1)
    m = check_int(num_classes, "num_classes", minimum=1)
    sigma = check_positive(sigma, "sigma")
    public = check_int(public_items, "public_items", minimum=1)
    dims = int(round(((n / m) / sigma) ** KERNEL_DIMS_EXPONENT))
    return max(1, min(max(dims, KERNEL_DIMS_MIN), KERNEL_DIMS_MAX, public))


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


def class_sums(private, labels, *, num_classes: int, geometry: PublicGeometry,
               count_weight: float) -> np.ndarray:
    """The sensitive statistic S, (m, d + 1) float64 (module docstring): each row's clipped
    sum of u and, last, ``count_weight`` times the class count. Every record adds a row vector
    of norm <= sqrt(1 + count_weight**2)."""
    m = check_int(num_classes, "num_classes", minimum=2)
    kappa = check_positive(count_weight, "count_weight")
    p = private if isinstance(private, np.ndarray) else check_embeddings(private, "private")
    if p.ndim != 2:
        p = check_embeddings(p, "private")  # the typed error
    for i in range(0, p.shape[0], SUM_ROWS):  # every block checked before any is summed
        check_embeddings(p[i:i + SUM_ROWS], "private")
    if p.shape[1] != geometry.scale.shape[0]:
        raise ValueError(f"private has {p.shape[1]} features but the public geometry "
                         f"{geometry.scale.shape[0]}")
    y = check_labels(labels, p.shape[0], m)
    out = np.zeros((m, p.shape[1] + 1))
    # a block of rows at a time (float64 temporaries of SUM_ROWS rows, not of every record);
    # np.add.at adds the rows in order, so the sums are those of one pass over all the rows
    for i in range(0, p.shape[0], SUM_ROWS):
        block = np.asarray(p[i:i + SUM_ROWS], dtype=np.float64)
        np.add.at(out[:, :-1], y[i:i + SUM_ROWS], _clipped(block, geometry))
    out[:, -1] = kappa * np.bincount(y, minlength=m)
    return out


def _checked(embeddings, width: int, what: str) -> np.ndarray:
    """Embeddings to label, validated against the ``width`` features of ``what`` labels them."""
    e = check_embeddings(embeddings, "embeddings")
    if e.shape[1] != width:
        raise ValueError(f"embeddings have {e.shape[1]} features, {what} {width}")
    return e


def _argmax(scores: np.ndarray) -> np.ndarray:
    """The label of every row of class ``scores``: the largest, ties to the lower class."""
    return np.argmax(scores, axis=1).astype(np.int64)


@dataclasses.dataclass(frozen=True)
class NoisyClassMeans:
    """The post-processed release: noisy class means ``means`` (m, d) in whitened coordinates,
    ``log_prior`` (m,), and the public ``geometry``; :meth:`scores` / :meth:`predict` label
    embeddings (post-processing, no privacy cost)."""

    means: np.ndarray
    log_prior: np.ndarray
    geometry: PublicGeometry

    def scores(self, embeddings) -> np.ndarray:
        w = self.geometry.whiten(_checked(embeddings, self.means.shape[1], "the means"))
        return (w @ self.means.T - 0.5 * np.einsum("jd,jd->j", self.means, self.means)
                + self.log_prior)

    def predict(self, embeddings) -> np.ndarray:
        return _argmax(self.scores(embeddings))


def noisy_class_means(public, private, labels, *, sigma, count_weight, num_classes,
                      rng) -> NoisyClassMeans:
    """Release S + N(0, sigma^2 I) once and post-process it into the LDA rule (module docstring).

    public (n >= 2, d), private (N, d) finite embeddings; labels (N,) ints in [0, num_classes);
    sigma > 0; count_weight (kappa) > 0, the weight of the counts in S (the release costs
    ``pate.analysis.class_means.class_means_rdp(sigma=sigma, count_weight=count_weight)``);
    num_classes >= 2; rng a numpy Generator or pate.rng.SecureGenerator. Everything is validated
    before the noise is drawn; the draw depends only on (num_classes, d).
    """
    sigma = check_positive(sigma, "sigma")
    kappa = check_positive(count_weight, "count_weight")
    geometry = public_geometry(public)
    sums = class_sums(private, labels, num_classes=num_classes, geometry=geometry,
                      count_weight=kappa)
    rng = check_rng(rng)
    noisy = sums + sigma * np.asarray(rng.standard_normal(sums.shape), dtype=np.float64)
    counts = np.maximum(noisy[:, -1] / kappa, 1.0)
    means = geometry.radius * noisy[:, :-1] / counts[:, None]
    log_prior = np.log(counts) - np.log(counts.sum())
    return NoisyClassMeans(means=means, log_prior=log_prior, geometry=geometry)


@dataclasses.dataclass(frozen=True)
class LinearLabeller:
    """The public-marginal logistic rule (module docstring): class scores
    ``u(e) @ weights.T + bias`` with u the clipped, scaled embedding of ``geometry``."""

    weights: np.ndarray
    bias: np.ndarray
    geometry: PublicGeometry

    def scores(self, embeddings) -> np.ndarray:
        e = _checked(embeddings, self.weights.shape[1], "the rule")
        return _clipped(e, self.geometry) @ self.weights.T + self.bias

    def predict(self, embeddings) -> np.ndarray:
        return _argmax(self.scores(embeddings))


def public_logistic(release: NoisyClassMeans, public, *,
                    ridge: float = LOGISTIC_RIDGE) -> LinearLabeller:
    """Fit the public-marginal logistic rule to a class-means ``release`` (module docstring).

    ``public`` (n >= 1, d): the public embeddings (the same map as the release's); ``ridge`` > 0.
    Reads the release and the public rows only (post-processing: no privacy cost). The convex
    objective F is minimised by L-BFGS from the LDA rule; the result is deterministic.
    """
    if not isinstance(release, NoisyClassMeans):
        raise TypeError(f"release must be a NoisyClassMeans (from noisy_class_means), got "
                        f"{type(release).__name__}")
    ridge = check_positive(ridge, "ridge")
    pub = check_embeddings(public, "public")
    m, d = release.means.shape
    if pub.shape[1] != d:
        raise ValueError(f"public has {pub.shape[1]} features but the release {d}")
    if pub.shape[0] < 1:
        raise ValueError("public needs at least 1 item to fit the rule on")
    u = _clipped(pub, release.geometry)
    prior = np.exp(release.log_prior)
    moments = prior[:, None] * release.means / release.geometry.radius   # noisy S_j / sum n
    n = u.shape[0]

    def objective(theta):
        w, b = theta[:m * d].reshape(m, d), theta[m * d:]
        z = u @ w.T + b
        p = softmax(z, axis=1)
        value = (logsumexp(z, axis=1).mean() - np.sum(w * moments) - b @ prior
                 + 0.5 * ridge * np.sum(w * w))
        grad_w = p.T @ u / n - moments + ridge * w
        return value, np.concatenate([grad_w.ravel(), p.mean(axis=0) - prior])

    # start from the LDA rule: <mu_j, w> - ||mu_j||^2 / 2 + log pi_j with w ~ R u
    start = np.concatenate([(release.geometry.radius * release.means).ravel(),
                            release.log_prior - 0.5 * np.sum(release.means ** 2, axis=1)])
    result = minimize(objective, start, jac=True, method="L-BFGS-B",
                      options={"maxiter": 5000, "gtol": 1e-12, "ftol": 1e-15, "maxcor": 30})
    # L-BFGS-B may end on a failed line search at machine precision ("ABNORMAL"); what matters
    # is the gradient it ends on, relative to the released moments it must match
    gap = float(np.linalg.norm(result.jac)) / (float(np.linalg.norm(moments)) + 1.0)
    if gap > GRADIENT_TOLERANCE:
        logger.warning("public_logistic: L-BFGS ended %s with relative gradient %.3g; the labels "
                       "come from that iterate (still post-processing of the release)",
                       result.message, gap)
    theta = result.x
    return LinearLabeller(weights=theta[:m * d].reshape(m, d).copy(), bias=theta[m * d:].copy(),
                          geometry=release.geometry)


def labelling_rule(release: NoisyClassMeans, public, rule: str):
    """What labels the queries of a class-means ``release``: ``"lda"``, the release itself
    (nearest noisy class mean, best with few private records or much noise), or ``"logistic"``,
    :func:`public_logistic` fitted on ``public`` (better with many records, e.g. Fashion-MNIST's
    60000: docs/aggregators.md). Both have ``predict(embeddings)``; both are post-processing."""
    rule = check_choice(rule, "rule", RULES)
    return release if rule == "lda" else public_logistic(release, public)


def rule_features(embeddings, geometry: PublicGeometry, rule: str) -> np.ndarray:
    """What ``rule``'s class scores are affine in, per row (float64): the clipped, scaled u(e)
    for "logistic" (:class:`LinearLabeller`), the whitened w(e) for "lda"
    (:class:`NoisyClassMeans`; the module docstring defines u and w)."""
    rule = check_choice(rule, "rule", RULES)
    e = check_embeddings(embeddings, "embeddings")
    if e.shape[1] != geometry.scale.shape[0]:
        raise ValueError(f"embeddings have {e.shape[1]} features, the geometry "
                         f"{geometry.scale.shape[0]}")
    return geometry.whiten(e) if rule == "lda" else _clipped(e, geometry)


@dataclasses.dataclass(frozen=True)
class RecoveredRule:
    """A labelling rule recovered from its published scores (:func:`recover_rule`): class
    scores ``rule_features(e) @ weights.T + bias``."""

    rule: str
    weights: np.ndarray
    bias: np.ndarray
    geometry: PublicGeometry

    def scores(self, embeddings) -> np.ndarray:
        return rule_features(embeddings, self.geometry, self.rule) @ self.weights.T + self.bias


def recover_rule(public, scores, *, rule: str) -> RecoveredRule:
    """The labelling rule behind published class ``scores`` (n, m) of the ``public`` embeddings
    (n, d), as a class-means run publishes them: ``label_scores.npy`` (NaN rows for the items it
    did not label) and ``knn_embeddings.npz``.

    Both rules are affine in a public map x(e) of the embedding (:func:`rule_features`; the
    geometry is a function of ALL the ``public`` rows, as in :func:`noisy_class_means`), so
    (weights, bias) is the exact least-squares solution of ``scores = [x(public), 1] @
    [weights, bias].T`` over the labelled rows: d + 1 unknowns per class. Reading only public
    rows and published scores, it is post-processing and costs no privacy. Refused (ValueError)
    unless the labelled rows' design has full column rank (at least d + 1 of them) and the fit
    reproduces ``scores`` to ``RECOVERY_TOLERANCE`` relative: scores that are not such a rule of
    these embeddings (another rule, other embeddings) are never approximated.
    """
    pub = check_embeddings(public, "public")
    sc = np.asarray(scores, dtype=np.float64)
    if sc.ndim != 2 or sc.shape[0] != pub.shape[0] or sc.shape[1] < 2:
        raise ValueError(f"scores must be (n, classes >= 2), one row per public embedding "
                         f"({pub.shape[0]}); got shape {sc.shape}")
    labelled = np.all(np.isfinite(sc), axis=1)
    if not np.all(labelled | np.all(np.isnan(sc), axis=1)):
        raise ValueError("scores must be finite in every labelled row and NaN in the others")
    geometry = public_geometry(pub)
    design = np.hstack([rule_features(pub[labelled], geometry, rule),
                        np.ones((int(labelled.sum()), 1))])
    rank = int(np.linalg.matrix_rank(design)) if design.size else 0
    if rank < design.shape[1]:
        raise ValueError(f"the {int(labelled.sum())} labelled public rows do not determine a rule "
                         f"in {pub.shape[1]} dims (rank {rank} < {design.shape[1]})")
    target = sc[labelled]
    coef, *_ = np.linalg.lstsq(design, target, rcond=None)
    residual = float(np.abs(design @ coef - target).max()
                     / max(float(np.abs(target).max()), 1e-300))
    if residual > RECOVERY_TOLERANCE:
        raise ValueError(f"the scores are not an affine {rule} rule of these public embeddings "
                         f"(relative residual {residual:.3g} > {RECOVERY_TOLERANCE:g})")
    return RecoveredRule(rule=rule, weights=coef[:-1].T.copy(), bias=coef[-1].copy(),
                         geometry=geometry)
