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
import numpy.typing as npt
from scipy.optimize import minimize
from scipy.special import logsumexp, softmax

from pate.analysis.arrays import FloatArray, IntArray
from pate.analysis.mapped import release_read
from pate.analysis.validation import (
    check_choice,
    check_embeddings,
    check_int,
    check_labels,
    check_positive,
)
from pate.core.rng import Rng, check_rng

__all__ = [
    "CLIP_QUANTILE",
    "WHITEN_FLOOR",
    "LOGISTIC_RIDGE",
    "PublicGeometry",
    "public_geometry",
    "class_sums",
    "NoisyClassMeans",
    "noisy_class_means",
    "LinearLabeller",
    "public_logistic",
    "RULES",
    "RULE_TEXT",
    "labelling_rule",
    "rule_features",
    "RecoveredRule",
    "recover_rule",
    "RECOVERY_TOLERANCE",
    "kernel_dims",
    "KERNEL_DIMS_EXPONENT",
    "KERNEL_DIMS_MIN",
    "KERNEL_DIMS_MAX",
    "LINEAR_RULES",
    "QDA_RECORDS_PER_FEATURE",
    "QDA_MIN_COLUMNS",
    "table_front_end",
    "QuadraticDiscriminant",
    "quadratic_discriminant",
    "quadratic_width",
    "QUADRATIC_MAX_WIDTH",
]

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
    "qda": "each query gets the class of highest Gaussian likelihood, each class's mean and "
    "covariance read from the released sums of the columns and their products (as released "
    "or shrunk by their noise level, whichever's public labels reproduce the release), "
    "eigenvalues below the noise level raised to it (quadratic discriminant analysis)",
}
RULES = tuple(RULE_TEXT)
#: The rules whose class scores are affine in a public map of the embedding (:func:`rule_features`,
#: :func:`recover_rule`; a released model can carry them: ``[student] combine_with_rule``).
LINEAR_RULES = ("lda", "logistic")
#: A table's quadratic front-end is chosen (:func:`table_front_end`) when an average class has at
#: least this many private records per quadratic feature.
QDA_RECORDS_PER_FEATURE = 5
#: ... and when the table has at least this many columns (below it the kernel rule is chosen).
QDA_MIN_COLUMNS = 8
#: The most features the "quadratic" front-end makes (F + F (F + 1) / 2 for F columns: 90 columns).
QUADRATIC_MAX_WIDTH = 4185


#: The kernel front-end's PCA dimensions: (records per class / sigma) ** KERNEL_DIMS_EXPONENT,
#: between KERNEL_DIMS_MIN and KERNEL_DIMS_MAX (:func:`kernel_dims`).
KERNEL_DIMS_EXPONENT = 0.75
KERNEL_DIMS_MIN = 8
KERNEL_DIMS_MAX = 512


def kernel_dims(*, private_records: int, num_classes: int, sigma: float, public_items: int) -> int:
    """How many public principal axes of a table's kernel features (``[knn] features =
    "kernel"``) a class-means release with noise ``sigma`` can afford: round((n / sigma) **
    KERNEL_DIMS_EXPONENT) with n = private_records (DECLARED, never the exact count: the dims are
    published) / num_classes, clamped to [KERNEL_DIMS_MIN, KERNEL_DIMS_MAX] and to the public
    items. Reads public sizes and the noise only (no record), so the choice is free.

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

    def whiten(self, embeddings: np.ndarray) -> FloatArray:
        whitened: FloatArray = np.asarray(embeddings, dtype=np.float64) / self.scale
        return whitened


def public_geometry(public: npt.ArrayLike) -> PublicGeometry:
    """Whitening scale and clipping radius from the public embeddings only (>= 2 rows)."""
    pub = check_embeddings(public, "public")
    if pub.shape[0] < 2:
        raise ValueError(
            f"public needs at least 2 items to estimate its spread, got {pub.shape[0]}"
        )
    var = pub.var(axis=0)
    floor = WHITEN_FLOOR * float(var.mean())
    if not floor > 0:
        raise ValueError("public embeddings are all identical: no spread to whiten with")
    scale = np.sqrt(var + floor)
    radius = float(np.quantile(np.linalg.norm(pub / scale, axis=1), CLIP_QUANTILE))
    if not radius > 0:
        raise ValueError(
            f"the {CLIP_QUANTILE:g} quantile of the public norms is 0: most public "
            "embeddings are at the public mean; use another embedding"
        )
    return PublicGeometry(scale=scale, radius=radius)


def _clipped(embeddings: np.ndarray, geometry: PublicGeometry) -> np.ndarray:
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
    """The sensitive statistic S, (m, d + 1) float64 (module docstring): each row's clipped
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
        raise ValueError(
            f"private has {p.shape[1]} features but the public geometry {geometry.scale.shape[0]}"
        )
    y = check_labels(labels, p.shape[0], m)
    out = np.zeros((m, p.shape[1] + 1))
    # a block of rows at a time (float64 temporaries of SUM_ROWS rows, not of every record);
    # np.add.at adds the rows in order, so the sums are those of one pass over all the rows
    for i in range(0, p.shape[0], SUM_ROWS):
        block = np.asarray(p[i : i + SUM_ROWS], dtype=np.float64)
        np.add.at(out[:, :-1], y[i : i + SUM_ROWS], _clipped(block, geometry))
        release_read(p[i : i + SUM_ROWS])
    out[:, -1] = kappa * np.bincount(y, minlength=m)
    return out


def _checked(embeddings: npt.ArrayLike, width: int, what: str) -> FloatArray:
    """Embeddings to label, validated against the ``width`` features of ``what`` labels them."""
    e = check_embeddings(embeddings, "embeddings")
    if e.shape[1] != width:
        raise ValueError(f"embeddings have {e.shape[1]} features, {what} {width}")
    return e


def _argmax(scores: np.ndarray) -> IntArray:
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
        w = self.geometry.whiten(_checked(embeddings, self.means.shape[1], "the means"))
        out: FloatArray = (
            w @ self.means.T - 0.5 * np.einsum("jd,jd->j", self.means, self.means) + self.log_prior
        )
        return out

    def predict(self, embeddings: npt.ArrayLike) -> IntArray:
        return _argmax(self.scores(embeddings))


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
    """Release S + N(0, sigma^2 I) once and post-process it into the LDA rule (module docstring).

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


@dataclasses.dataclass(frozen=True)
class LinearLabeller:
    """The public-marginal logistic rule (module docstring): class scores
    ``u(e) @ weights.T + bias`` with u the clipped, scaled embedding of ``geometry``."""

    weights: np.ndarray
    bias: np.ndarray
    geometry: PublicGeometry

    def scores(self, embeddings: npt.ArrayLike) -> FloatArray:
        e = _checked(embeddings, self.weights.shape[1], "the rule")
        out: FloatArray = _clipped(e, self.geometry) @ self.weights.T + self.bias
        return out

    def predict(self, embeddings: npt.ArrayLike) -> IntArray:
        return _argmax(self.scores(embeddings))


def public_logistic(
    release: NoisyClassMeans, public: npt.ArrayLike, *, ridge: float = LOGISTIC_RIDGE
) -> LinearLabeller:
    """Fit the public-marginal logistic rule to a class-means ``release`` (module docstring).

    ``public`` (n >= 1, d): the public embeddings (the same map as the release's); ``ridge`` > 0.
    Reads the release and the public rows only (post-processing: no privacy cost). The convex
    objective F is minimised by L-BFGS from the LDA rule; the result is deterministic.
    """
    if not isinstance(release, NoisyClassMeans):
        raise TypeError(
            f"release must be a NoisyClassMeans (from noisy_class_means), got "
            f"{type(release).__name__}"
        )
    ridge = check_positive(ridge, "ridge")
    pub = check_embeddings(public, "public")
    m, d = release.means.shape
    if pub.shape[1] != d:
        raise ValueError(f"public has {pub.shape[1]} features but the release {d}")
    if pub.shape[0] < 1:
        raise ValueError("public needs at least 1 item to fit the rule on")
    u = _clipped(pub, release.geometry)
    prior = np.exp(release.log_prior)
    moments = prior[:, None] * release.means / release.geometry.radius  # noisy S_j / sum n
    n = u.shape[0]

    def objective(theta: FloatArray) -> tuple[float, FloatArray]:
        w, b = theta[: m * d].reshape(m, d), theta[m * d :]
        z = u @ w.T + b
        p = softmax(z, axis=1)
        value = (
            logsumexp(z, axis=1).mean()
            - np.sum(w * moments)
            - b @ prior
            + 0.5 * ridge * np.sum(w * w)
        )
        grad_w = p.T @ u / n - moments + ridge * w
        return value, np.concatenate([grad_w.ravel(), p.mean(axis=0) - prior])

    # start from the LDA rule: <mu_j, w> - ||mu_j||^2 / 2 + log pi_j with w ~ R u
    start = np.concatenate(
        [
            (release.geometry.radius * release.means).ravel(),
            release.log_prior - 0.5 * np.sum(release.means**2, axis=1),
        ]
    )
    result = minimize(
        objective,
        start,
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 5000, "gtol": 1e-12, "ftol": 1e-15, "maxcor": 30},
    )
    # L-BFGS-B may end on a failed line search at machine precision ("ABNORMAL"); what matters
    # is the gradient it ends on, relative to the released moments it must match
    gap = float(np.linalg.norm(result.jac)) / (float(np.linalg.norm(moments)) + 1.0)
    if gap > GRADIENT_TOLERANCE:
        logger.warning(
            "public_logistic: L-BFGS ended %s with relative gradient %.3g; the labels "
            "come from that iterate (still post-processing of the release)",
            result.message,
            gap,
        )
    theta = result.x
    return LinearLabeller(
        weights=theta[: m * d].reshape(m, d).copy(),
        bias=theta[m * d :].copy(),
        geometry=release.geometry,
    )


def labelling_rule(
    release: NoisyClassMeans,
    public: npt.ArrayLike,
    rule: str,
) -> NoisyClassMeans | LinearLabeller | QuadraticDiscriminant:
    """What labels the queries of a class-means ``release``: ``"lda"``, the release itself
    (nearest noisy class mean, best with few private records or much noise), or ``"logistic"``,
    :func:`public_logistic` fitted on ``public`` (better with many records, e.g. Fashion-MNIST's
    60000: docs/aggregators.md). Both have ``predict(embeddings)``; both are post-processing."""
    rule = check_choice(rule, "rule", RULES)
    if rule == "qda":
        return quadratic_discriminant(release, public)
    return release if rule == "lda" else public_logistic(release, public)


def rule_features(embeddings: npt.ArrayLike, geometry: PublicGeometry, rule: str) -> FloatArray:
    """What ``rule``'s class scores are affine in, per row (float64): the clipped, scaled u(e)
    for "logistic" (:class:`LinearLabeller`), the whitened w(e) for "lda"
    (:class:`NoisyClassMeans`; the module docstring defines u and w). "qda" is not affine in
    any such map: refused (ValueError)."""
    rule = check_choice(rule, "rule", LINEAR_RULES)
    e = check_embeddings(embeddings, "embeddings")
    if e.shape[1] != geometry.scale.shape[0]:
        raise ValueError(
            f"embeddings have {e.shape[1]} features, the geometry {geometry.scale.shape[0]}"
        )
    return geometry.whiten(e) if rule == "lda" else _clipped(e, geometry)


@dataclasses.dataclass(frozen=True)
class RecoveredRule:
    """A labelling rule recovered from its published scores (:func:`recover_rule`): class
    scores ``rule_features(e) @ weights.T + bias``."""

    rule: str
    weights: np.ndarray
    bias: np.ndarray
    geometry: PublicGeometry

    def scores(self, embeddings: npt.ArrayLike) -> FloatArray:
        out: FloatArray = (
            rule_features(embeddings, self.geometry, self.rule) @ self.weights.T + self.bias
        )
        return out


def recover_rule(public: npt.ArrayLike, scores: npt.ArrayLike, *, rule: str) -> RecoveredRule:
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
        raise ValueError(
            f"scores must be (n, classes >= 2), one row per public embedding "
            f"({pub.shape[0]}); got shape {sc.shape}"
        )
    labelled = np.all(np.isfinite(sc), axis=1)
    if not np.all(labelled | np.all(np.isnan(sc), axis=1)):
        raise ValueError("scores must be finite in every labelled row and NaN in the others")
    geometry = public_geometry(pub)
    design = np.hstack(
        [rule_features(pub[labelled], geometry, rule), np.ones((int(labelled.sum()), 1))]
    )
    rank = int(np.linalg.matrix_rank(design)) if design.size else 0
    if rank < design.shape[1]:
        raise ValueError(
            f"the {int(labelled.sum())} labelled public rows do not determine a rule "
            f"in {pub.shape[1]} dims (rank {rank} < {design.shape[1]})"
        )
    target = sc[labelled]
    coef, *_ = np.linalg.lstsq(design, target, rcond=None)
    residual = float(
        np.abs(design @ coef - target).max() / max(float(np.abs(target).max()), 1e-300)
    )
    if residual > RECOVERY_TOLERANCE:
        raise ValueError(
            f"the scores are not an affine {rule} rule of these public embeddings "
            f"(relative residual {residual:.3g} > {RECOVERY_TOLERANCE:g})"
        )
    return RecoveredRule(
        rule=rule, weights=coef[:-1].T.copy(), bias=coef[-1].copy(), geometry=geometry
    )


def quadratic_width(columns: int) -> int:
    """How many features a table's quadratic front-end makes of ``columns`` columns
    (:class:`pate.teachers.features.QuadraticFeatures`): each column and each product of two
    (squares included), F + F (F + 1) / 2."""
    f = check_int(columns, "columns", minimum=1)
    return f + f * (f + 1) // 2


def table_front_end(*, private_records: int, num_classes: int, columns: int) -> str:
    """The front-end of a class-means release on a table when the user names none: "quadratic"
    (with the "qda" rule) when the table has at least QDA_MIN_COLUMNS columns, an average class
    has at least QDA_RECORDS_PER_FEATURE private records per quadratic feature and the features
    stay within QUADRATIC_MAX_WIDTH, else "kernel". Reads public sizes only (free; the DECLARED
    private_records, never the exact count: the choice is published).

    Why: each class's covariance has F (F + 1) / 2 entries read from n noisy, clipped sums
    (n = private_records / num_classes); with few records per entry the class covariances are
    mostly noise and the kernel rule (which needs no covariance) is the better labeller --
    Friedman (1989, "Regularized Discriminant Analysis", JASA 84) on QDA's need for many
    records per covariance entry. With few columns the kernel rule, a kernel density estimate
    of each class, resolves shapes no Gaussian has (its error grows with the dimension: Stone
    1980's rate n^(-4 / (4 + d))); with many it dilutes and QDA's Gaussian classes label better.
    Both constants are empirical, from development runs on the ``benchmarks/own_data.py``
    tables at eps 1 to 4: QDA labelled better at 10 to 22 records per feature with 10 to 30
    columns (the 40 000-row table, shells, mixed), worse at 0.5 (breast-cancer: 30 columns, 455
    records) and 0.07 (digits: 64 columns), and its students were worse on the 4-column moons (3
    runs at eps 2: 79.5 % vs 84.0 % for the kernel) -- a choice that looked at them (plan.md)."""
    n = check_int(private_records, "private_records", minimum=1)
    m = check_int(num_classes, "num_classes", minimum=1)
    width = quadratic_width(columns)
    if (
        QDA_MIN_COLUMNS <= columns
        and width <= QUADRATIC_MAX_WIDTH
        and n / m >= QDA_RECORDS_PER_FEATURE * width
    ):
        return "quadratic"
    return "kernel"


def _columns_of(width: int) -> int:
    """F such that quadratic_width(F) == width (a ValueError if none: not quadratic features)."""
    f = int(round((np.sqrt(9.0 + 8.0 * width) - 3.0) / 2.0))
    if f < 1 or quadratic_width(f) != width:
        raise ValueError(
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
        e = _checked(embeddings, quadratic_width(f), "the quadratic rule")
        z = e[:, :f]
        out: FloatArray = np.empty((len(z), len(self.means)))
        for j, (mean, axes, var) in enumerate(zip(self.means, self.axes, self.variances)):
            d = (z - mean) @ axes
            out[:, j] = (
                -0.5 * np.sum(np.log(var)) - 0.5 * np.sum(d * d / var, axis=1) + self.log_prior[j]
            )
        return out

    def predict(self, embeddings: npt.ArrayLike) -> IntArray:
        return _argmax(self.scores(embeddings))


def quadratic_discriminant(
    release: NoisyClassMeans, public: npt.ArrayLike, *, shrink: bool = False
) -> QuadraticDiscriminant:
    """Quadratic discriminant analysis (Hastie, Tibshirani & Friedman 2009, Section 4.3) read
    from a class-means ``release`` over a table's quadratic features; post-processing of the
    release and the ``public`` embeddings only (no privacy cost).

    The embedding is e = phi(x) - (public mean of phi), phi = [z, (z_i z_k)_{i <= k}] with z
    centred on the public mean (:class:`pate.teachers.features.QuadraticFeatures`), so the
    public mean of z is 0 and the public mean of z_i z_k is C_ik, C = (1/n) sum_public z z^T the
    public covariance (computed here from the public embeddings' first F columns). The release's
    noisy class mean of e, means_j * s (un-whitened), splits into a_j (F) and b_j (F (F + 1) / 2):

        m_j = a_j                    (the class mean of z)
        Sigma_j = B_j + C - m_j m_j^T   (B_j: b_j as a symmetric F x F matrix)

    since E_j[z z^T] = B_j + C. Noise: the release adds N(0, sigma^2) to each coordinate of a
    class's sum of u = w / R (clipped), so each entry of B_j carries noise of standard deviation
    tau = R sigma s_a / n_j (s_a that coordinate's public scale, n_j the noisy count), and the
    F x F noise matrix has spectral norm about 2 sqrt(F) tau_rms (the semicircle edge of a
    symmetric matrix with independent entries; Bai & Yin 1988). Eigenvalues of Sigma_j below that
    level cannot be told from noise: each is raised to it (and to 1e-6 x trace(C) / F, a
    numerical floor). Clipped rows (||w|| > R) shrink their class's moments: a bias, not a
    privacy matter. Scores: log N(z; m_j, Sigma_j) + log pi_j.

    ``shrink``: first soft-threshold each coordinate of the class's mean embedding (a_j, b_j:
    its deviation from the public moments, which are 0 after centring) at sqrt(2 ln D) times
    its noise standard deviation R sigma s_a / n_j (D = F + F (F + 1) / 2 coordinates): the
    universal threshold of Donoho & Johnstone (1994, Biometrika 81), above which no coordinate
    of pure noise rises with probability -> 1 as D grows. Where the release cannot tell a class
    from the public rows the class takes the public moments, and every deviation is shrunk
    by its noise level; better where few coordinates carry the classes (nested shells beside
    noise columns), slightly worse where many do. :func:`pate.core.release_check.checked_rule`
    chooses between the two from the release and the public rows (free)."""
    pub = check_embeddings(public, "public")
    width = release.means.shape[1]
    f = _columns_of(width)
    if pub.shape[1] != width:
        raise ValueError(f"public has {pub.shape[1]} features, the release {width}")
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
