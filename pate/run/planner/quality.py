"""What the labels will be worth, predicted before anything is trained: from the declared facts
(records, classes) and the noise only, the share of labels the noisy mechanism gives as its
noiseless rule would (the teachers' plurality vote, or the class-means rule on the exact class
sums). The model, its assumptions and the measurements behind its two constants:
docs/plan.md, "What the labels will be worth"."""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtr

#: Voting: the share of the voters that vote for the plurality class on a typical query (the
#: rest spread evenly over the other classes). Fitted to the label-accuracy table of
#: docs/plan.md (30 cells, digits / breast_cancer / make_classification): mean error +0.7
#: points, mean absolute error 6.6 points.
VOTE_AGREEMENT = 0.7
#: Class-means: two classes' means lie this many within-class standard deviations apart in the
#: whitened, clipped embedding (a Mahalanobis distance; set on the measurements of docs/plan.md).
CLASS_SEPARATION = 1.2
#: Refused below: the share of the way from chance (1 / classes) to the noiseless labels that the
#: predicted labels close (the labels are near chance).
NEAR_CHANCE = 1 / 3
#: Warned below (and what a suggested epsilon aims at).
WEAK_LABELS = 2 / 3

_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(48)
_WEIGHTS = _WEIGHTS / _WEIGHTS.sum()


def kept(margin_over_noise: float, classes: int) -> float:
    """The probability that a noisy argmax keeps the leading class, when it leads each of the
    ``classes - 1`` others by ``margin_over_noise`` standard deviations of every class's
    independent Gaussian noise: E[Phi(z + X)^(m - 1)], X ~ N(0, 1) (Gauss-Hermite)."""
    z = float(margin_over_noise)
    return float(np.sum(_WEIGHTS * ndtr(z + _NODES) ** (max(classes, 2) - 1)))


def vote_agreement(*, voters: float, noise_std: float, classes: int) -> float:
    """Predicted share of answers equal to the noiseless plurality vote: ``voters`` voters,
    :data:`VOTE_AGREEMENT` of them for the plurality, the rest spread evenly, noise of std
    ``noise_std`` on every count."""
    m = max(classes, 2)
    margin = voters * (VOTE_AGREEMENT - (1 - VOTE_AGREEMENT) / (m - 1))
    return kept(margin / noise_std, m) if noise_std > 0 else 1.0


def class_means_agreement(
    *, records_per_class: float, sigma: float, dims: int, count_weight: float, classes: int
) -> float:
    """Predicted share of labels equal to the class-means rule's on the exact class sums: the
    nearest-mean score gap delta^2 over its noise, times sqrt(2), as the margin of :func:`kept`
    (the derivation: docs/plan.md, "What the labels will be worth", "Class-means")."""
    if sigma <= 0:
        return 1.0
    tau = sigma / max(records_per_class, 1e-12)
    delta2 = CLASS_SEPARATION**2 / dims
    spread = delta2 + (dims + 1 / count_weight**2) * tau**2
    return kept(math.sqrt(2) * delta2 / (2 * tau * math.sqrt(spread)), classes)


def closed(agreement: float, classes: int) -> float:
    """The share of the way from chance to the noiseless labels that ``agreement`` closes."""
    chance = 1 / max(classes, 2)
    return (agreement - chance) / (1 - chance)


def smallest_eps(useful, start: float, *, most: float) -> float | None:
    """The smallest epsilon above ``start`` (within 2 %, rounded up to 2 significant digits)
    for which ``useful(eps)`` holds, assuming it holds from some epsilon on; None when it does
    not hold at ``most``."""
    low, high = start, 2 * start
    while not useful(high):
        if high > most:
            return None
        low, high = high, 2 * high
    while high / low > 1.02:
        middle = math.sqrt(low * high)
        low, high = (low, middle) if useful(middle) else (middle, high)
    step = 10.0 ** (math.floor(math.log10(high)) - 1)
    return math.ceil(high / step - 1e-9) * step  # rounded up: still useful
