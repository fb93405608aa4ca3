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
from pate.core.tuned_defaults import LOGISTIC_RIDGE

__all__ = [
    "RULES",
    "RULE_TEXT",
    "LINEAR_RULES",
    "LinearLabeller",
    "public_logistic",
    "labelling_rule",
    "rule_features",
    "RecoveredRule",
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


@dataclasses.dataclass(frozen=True)
class LinearLabeller:
    """The public-marginal logistic rule (docs/own_data.md): class scores
    ``u(e) @ weights.T + bias`` with u the clipped, scaled embedding of ``geometry``."""

    weights: np.ndarray
    bias: np.ndarray
    geometry: PublicGeometry

    def scores(self, embeddings: npt.ArrayLike) -> FloatArray:
        e = embeddings_of_width(embeddings, self.weights.shape[1], "the rule")
        out: FloatArray = clipped_scaled(e, self.geometry) @ self.weights.T + self.bias
        return out

    def predict(self, embeddings: npt.ArrayLike) -> IntArray:
        return labels_of_scores(self.scores(embeddings))


def public_logistic(
    release: NoisyClassMeans, public: npt.ArrayLike, *, ridge: float = LOGISTIC_RIDGE
) -> LinearLabeller:
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
    (:class:`NoisyClassMeans`; :mod:`pate.core.mean_release` defines u and w). "qda" is not affine in
    any such map: refused (ValueError)."""
    rule = check_choice(rule, "rule", LINEAR_RULES)
    e = check_embeddings(embeddings, "embeddings")
    if e.shape[1] != geometry.scale.shape[0]:
        raise InputError(
            f"embeddings have {e.shape[1]} features, the geometry {geometry.scale.shape[0]}"
        )
    return geometry.whiten(e) if rule == "lda" else clipped_scaled(e, geometry)


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
    if rank < design.shape[1]:
        raise InputError(
            f"the {int(labelled.sum())} labelled public rows do not determine a rule "
            f"in {pub.shape[1]} dims (rank {rank} < {design.shape[1]})"
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
    return RecoveredRule(
        rule=rule, weights=coef[:-1].T.copy(), bias=coef[-1].copy(), geometry=geometry
    )
