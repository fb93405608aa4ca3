"""The rules that label the queries of a class-means release (``[knn] rule``:
"lda", "logistic", "qda"; :func:`labelling_rule`), and the recovery of a linear rule from its
published scores (:func:`recover_rule`). Every rule reads only the release
(:mod:`pate.core.mean_release`; u, w, R, S: docs/own_data.md) and public embeddings: all
are post-processing.

More: docs/own_data.md, "pate.core.labelling_rules".
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import numpy.typing as npt
from scipy.optimize import minimize
from scipy.special import logsumexp, softmax

from pate.analysis.arrays import FloatArray, IntArray
from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.validation import check_choice, check_embeddings, check_positive
from pate.core.mean_release import (
    NoisyClassMeans,
    PublicGeometry,
    clipped_scaled,
    embeddings_of_width,
    labels_of_scores,
    public_geometry,
)
from pate.core.quadratic_rule import QuadraticDiscriminant, quadratic_discriminant
from pate.core.tuned_defaults import LDA_FLOOR, LOGISTIC_RIDGE

__all__ = [
    "RULES",
    "RULE_TEXT",
    "LINEAR_RULES",
    "AffineRule",
    "linear_discriminant",
    "public_logistic",
    "labelling_rule",
    "rule_features",
    "recover_rule",
    "RECOVERY_TOLERANCE",
]

logger = logging.getLogger(__name__)

#: How close to a stationary point public_logistic's result must be (gradient norm relative to
#: 1 + the released moments' norm) before it warns.
GRADIENT_TOLERANCE = 1e-6
#: The largest relative residual with which :func:`recover_rule` accepts published scores.
RECOVERY_TOLERANCE = 1e-8
#: The labelling rules of a class-means release (``[knn] rule``; :func:`labelling_rule`), with
#: how the privacy report words them.
RULE_TEXT = {
    "lda": "each query gets the class of highest score under linear discriminant analysis: "
    "the noisy class means and priors, with the within-class covariance read as the public "
    "embeddings' covariance less the noisy means' spread (its eigenvalues floored)",
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


@dataclasses.dataclass(frozen=True)
class AffineRule:
    """A labelling rule whose class scores are ``rule_features(e) @ weights.T + bias``
    (:func:`rule_features`): "lda" in the whitened w, "logistic" in the clipped, scaled u."""

    rule: str
    weights: np.ndarray
    bias: np.ndarray
    geometry: PublicGeometry

    def scores(self, embeddings: npt.ArrayLike) -> FloatArray:
        e = embeddings_of_width(embeddings, self.weights.shape[1], "the rule")
        out: FloatArray = rule_features(e, self.geometry, self.rule) @ self.weights.T + self.bias
        return out

    def predict(self, embeddings: npt.ArrayLike) -> IntArray:
        return labels_of_scores(self.scores(embeddings))


def linear_discriminant(release: NoisyClassMeans, public: npt.ArrayLike) -> AffineRule:
    """Linear discriminant analysis (Hastie, Tibshirani & Friedman 2009, Section 4.3) read from a
    class-means ``release`` and the ``public`` embeddings (n >= 2, d); post-processing only.

    In the whitened coordinates w, the within-class covariance is the public rows' total
    covariance T less the spread of the noisy class means around their prior-weighted centre
    (B), plus the spread the noise adds to B (sum_j pi_j (R sigma / n_j)^2 per axis), its
    eigenvalues floored at ``LDA_FLOOR`` times T's mean eigenvalue (docs/own_data.md,
    "pate.core.labelling_rules"). Class j scores ``w @ P mu_j - mu_j @ P mu_j / 2 + log pi_j``
    with P the inverse of that covariance."""
    pub = release.geometry.whiten(embeddings_of_width(public, release.means.shape[1], "the means"))
    if pub.shape[0] < 2:
        raise InputError(f"public needs at least 2 items to estimate a covariance, got {len(pub)}")
    centred = pub - pub.mean(axis=0)
    total = centred.T @ centred / len(pub)
    prior, means = np.exp(release.log_prior), release.means
    spread = means - prior @ means
    noise = float(np.sum(prior * (release.geometry.radius * release.sigma / release.counts) ** 2))
    within = total - spread.T @ (spread * prior[:, None]) + noise * np.eye(len(total))
    values, vectors = np.linalg.eigh(within)
    values = np.maximum(values, LDA_FLOOR * max(float(np.trace(total)) / len(total), 1e-300))
    weights = ((means @ vectors) / values) @ vectors.T
    return AffineRule(
        rule="lda",
        weights=weights,
        bias=release.log_prior - 0.5 * np.einsum("jd,jd->j", weights, means),
        geometry=release.geometry,
    )


def public_logistic(
    release: NoisyClassMeans, public: npt.ArrayLike, *, ridge: float = LOGISTIC_RIDGE
) -> AffineRule:
    """Fit the public-marginal logistic rule to a class-means ``release`` (docs/own_data.md).

    ``public`` (n >= 1, d): the public embeddings (the same map as the release's); ``ridge`` > 0.
    Reads the release and the public rows only (post-processing: no privacy cost). The convex
    objective F is minimised by L-BFGS from the LDA rule; the result is deterministic.
    """
    if not isinstance(release, NoisyClassMeans):
        raise InputTypeError(
            f"release must be a NoisyClassMeans (from noisy_class_means), got "
            f"{type(release).__name__}"
        )
    ridge = check_positive(ridge, "ridge")
    pub = check_embeddings(public, "public")
    m, d = release.means.shape
    if pub.shape[1] != d:
        raise InputError(f"public has {pub.shape[1]} features but the release {d}")
    if pub.shape[0] < 1:
        raise InputError("public needs at least 1 item to fit the rule on")
    u = clipped_scaled(pub, release.geometry)
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
    return AffineRule(
        rule="logistic",
        weights=theta[: m * d].reshape(m, d).copy(),
        bias=theta[m * d :].copy(),
        geometry=release.geometry,
    )


def labelling_rule(
    release: NoisyClassMeans,
    public: npt.ArrayLike,
    rule: str,
) -> AffineRule | QuadraticDiscriminant:
    """What labels the queries of a class-means ``release``: ``"lda"``,
    :func:`linear_discriminant`, ``"logistic"``, :func:`public_logistic` fitted on ``public``
    (better with many records, e.g. Fashion-MNIST's 60000: docs/aggregators.md), or ``"qda"``
    over a table's quadratic features. All have ``predict(embeddings)``; all are
    post-processing."""
    rule = check_choice(rule, "rule", RULES)
    if rule == "qda":
        return quadratic_discriminant(release, public)
    return (
        linear_discriminant(release, public) if rule == "lda" else public_logistic(release, public)
    )


def rule_features(embeddings: npt.ArrayLike, geometry: PublicGeometry, rule: str) -> FloatArray:
    """What ``rule``'s class scores are affine in, per row (float64): the clipped, scaled u(e)
    for "logistic" (:func:`public_logistic`), the whitened w(e) for "lda"
    (:func:`linear_discriminant`; :mod:`pate.core.mean_release` defines u and w). "qda" is not affine in
    any such map: refused (ValueError)."""
    rule = check_choice(rule, "rule", LINEAR_RULES)
    e = check_embeddings(embeddings, "embeddings")
    if e.shape[1] != geometry.scale.shape[0]:
        raise InputError(
            f"embeddings have {e.shape[1]} features, the geometry {geometry.scale.shape[0]}"
        )
    return geometry.whiten(e) if rule == "lda" else clipped_scaled(e, geometry)


def recover_rule(public: npt.ArrayLike, scores: npt.ArrayLike, *, rule: str) -> AffineRule:
    """The labelling rule behind published class ``scores`` (n, m) of the ``public`` embeddings
    (n, d), as a class-means run publishes them: ``label_scores.npy`` (NaN rows for the items it
    did not label) and ``knn_embeddings.npz``.

    Both rules are affine in a public map x(e) of the embedding (:func:`rule_features`; the
    geometry is a function of ALL the ``public`` rows, as in :func:`noisy_class_means`), so
    (weights, bias) is the exact least-squares solution of ``scores = [x(public), 1] @
    [weights, bias].T`` over the labelled rows: d + 1 unknowns per class. Reading only public
    rows and published scores, it is post-processing and costs no privacy. Refused (ValueError)
    unless the labelled rows' design has the rank of all the public rows' (they determine the
    rule wherever the public embeddings vary) and the fit reproduces ``scores`` to
    ``RECOVERY_TOLERANCE`` relative: scores that are not such a rule of these embeddings
    (another rule, other embeddings) are never approximated. Where the public embeddings
    themselves span fewer than d + 1 directions (a table's collinear encoded columns: one-hot
    groups beside a PCA of as many axes as columns), the coefficients are the minimum-norm ones:
    no weight on a direction no public row varies in.
    """
    pub = check_embeddings(public, "public")
    sc = np.asarray(scores, dtype=np.float64)
    if sc.ndim != 2 or sc.shape[0] != pub.shape[0] or sc.shape[1] < 2:
        raise InputError(
            f"scores must be (n, classes >= 2), one row per public embedding "
            f"({pub.shape[0]}); got shape {sc.shape}"
        )
    labelled = np.all(np.isfinite(sc), axis=1)
    if not np.all(labelled | np.all(np.isnan(sc), axis=1)):
        raise InputError("scores must be finite in every labelled row and NaN in the others")
    geometry = public_geometry(pub)
    design = np.hstack(
        [rule_features(pub[labelled], geometry, rule), np.ones((int(labelled.sum()), 1))]
    )
    rank = int(np.linalg.matrix_rank(design)) if design.size else 0
    span = int(
        np.linalg.matrix_rank(
            np.hstack([rule_features(pub, geometry, rule), np.ones((len(pub), 1))])
        )
    )
    if rank < span:
        raise InputError(
            f"the {int(labelled.sum())} labelled public rows do not determine a rule "
            f"in {pub.shape[1]} dims (rank {rank} < {span}, the public rows')"
        )
    target = sc[labelled]
    coef, *_ = np.linalg.lstsq(design, target, rcond=None)
    residual = float(
        np.abs(design @ coef - target).max() / max(float(np.abs(target).max()), 1e-300)
    )
    if residual > RECOVERY_TOLERANCE:
        raise InputError(
            f"the scores are not an affine {rule} rule of these public embeddings "
            f"(relative residual {residual:.3g} > {RECOVERY_TOLERANCE:g})"
        )
    return AffineRule(
        rule=rule, weights=coef[:-1].T.copy(), bias=coef[-1].copy(), geometry=geometry
    )
