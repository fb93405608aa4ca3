"""Noisy class means: the Renyi-DP of one Gaussian release of per-class sums of private records.

The "class-means" mechanism labels the public queries without teachers and without a cost per
query: it releases, once, the per-class sums of the private records' (public-fitted, clipped)
embeddings and their class counts with Gaussian noise, and labels every query from that release
by linear discriminant analysis (:mod:`pate.core.mean_release`). Labelling is post-processing, so the
whole run costs one Gaussian mechanism, however many queries are labelled. This module gives its
RDP (numpy only).

Symbols
-------
x = (e, y)  one private record: e its embedding in R^d (computed by a map fitted on public data
            only), y its class in {0, ..., m-1}
R           the clipping radius (a public quantity: ``pate.core.mean_release`` takes a quantile of the
            public embeddings' norms); u(e) = e min(1, R / ||e||) / R, so ||u(e)|| <= 1
kappa       ``count_weight``: the weight of a record's count, kappa > 0 (a public constant)
c(x)        the record's contribution, an m x (d + 1) matrix: row y is (u(e), kappa), every
            other row is 0
S(D)        sum over the records x of D of c(x): row j holds the clipped sum of class j's
            embeddings (in units of R) and, last, kappa n_j, with n_j the count of class j
sigma       ``sigma``: the std of the Gaussian noise added to every entry of S(D)
alpha       a Renyi order > 1 (``orders``: a 1-D array of them)

Adjacency
---------
pate-learn's relation (``relation = "add-remove"`` on the event): D and D' = D + {x}, one record
added or removed. The bound below holds for that relation only. Under replace-one (same size, one
record changed) the sensitivity is larger, and not by a factor the RDP could simply be doubled
for: replacing (e, y) by (e', y') subtracts (u(e), kappa) from row y and adds (u(e'), kappa) to
row y'; with y != y' that moves S by sqrt(||u(e)||^2 + ||u(e')||^2 + 2 kappa^2) <= sqrt(2 (1 +
kappa^2)), with y = y' by ||u(e') - u(e)|| <= 2. So Delta_replace = max(2, sqrt(2 (1 + kappa^2))),
which is 2 for kappa <= 1: 4 / (1 + kappa^2) times the add/remove RDP (3.7 times at the default
kappa = 0.3, twice only at kappa = 1). pate-learn states no replace-one cost.

Derivation
----------
*Sensitivity.* S(D + {x}) - S(D) = c(x), whose only non-zero row is (u(e), kappa), so
    ||S(D + {x}) - S(D)||_F = sqrt(||u(e)||^2 + kappa^2) <= sqrt(1 + kappa^2) =: Delta,
whatever D and x are (the clipping makes ||u(e)|| <= 1 for any embedding, and R and kappa are
public).

*Gaussian mechanism.* S(D) + N(0, sigma^2 I) has, at every order alpha > 1,
    RDP(alpha) = alpha Delta^2 / (2 sigma^2) = alpha (1 + kappa^2) / (2 sigma^2)
(Mironov 2017, "Renyi Differential Privacy", Proposition 7: D_alpha(N(mu, s^2 I) || N(mu', s^2 I))
= alpha ||mu - mu'||^2 / (2 s^2), maximised at ||mu - mu'|| = Delta; the relation is symmetric).
With kappa = 1 (counts and sums weighted alike) it is alpha / sigma^2, the per-order cost of one
GNMax answer (Papernot et al. 2018: vote sensitivity sqrt(2)); in general it is that cost at the
GNMax noise sigma sqrt(2 / (1 + kappa^2)), which is how :func:`calibrate_class_means_sigma`
calibrates. The cost is paid once for the whole labelling.

*Why a count weight.* At a fixed cost a small kappa moves noise from the d sum entries to the one
count entry; the class means' squared error is smallest at kappa^2 = c / sqrt(d), with c <= 1 the
norm of the clipped mean (the derivation and the default 0.3's margins: docs/analysis.md).

*Post-processing.* The class counts (released entry / kappa), the class means, the class priors,
the discriminant functions and the labels of any number of public queries are functions of the
released matrix, of kappa and of public data only, so they cost nothing more (Mironov 2017,
Proposition 9). There is no data-dependent bound: the data-independent cost is the cost, and it
is both the guarantee and the realised cost.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from pate.analysis.accountant import PrivacyEvent
from pate.analysis.arrays import FloatArray
from pate.analysis.calibration import calibrate_gnmax_sigma
from pate.analysis.orders import DEFAULT_ORDERS
from pate.analysis.validation import check_int, check_orders, check_positive

MECHANISM = "class-means"


def class_means_sensitivity(*, count_weight: float) -> float:
    """L2 sensitivity Delta = sqrt(1 + kappa^2) of the released matrix S(D) under add/remove of
    one record, kappa = ``count_weight`` > 0 (module docstring)."""
    kappa = check_positive(count_weight, "count_weight")
    return float(np.hypot(1.0, kappa))


def class_means_rdp(
    *, sigma: float, count_weight: float, orders: npt.ArrayLike = DEFAULT_ORDERS
) -> FloatArray:
    """RDP of the one Gaussian release, per order: ``orders * (1 + count_weight**2) /
    (2 sigma**2)`` (module docstring)."""
    sigma = check_positive(sigma, "sigma")
    delta_2 = class_means_sensitivity(count_weight=count_weight) ** 2
    rdp: FloatArray = check_orders(orders) * (delta_2 / (2.0 * sigma**2))
    return rdp


def class_means_event(
    *, sigma: float, count_weight: float, queries: int, orders: npt.ArrayLike = DEFAULT_ORDERS
) -> PrivacyEvent:
    """The release labelled ``queries`` public items: one Gaussian mechanism, whatever
    ``queries`` is (every query is answered, by post-processing). ``rdp`` (data-dependent) equals
    ``rdp_data_independent``: there is no data-dependent bound."""
    queries = check_int(queries, "queries", minimum=0)
    rdp = class_means_rdp(sigma=sigma, count_weight=count_weight, orders=orders)
    return PrivacyEvent(
        MECHANISM,
        {"sigma": float(sigma), "count_weight": float(count_weight)},
        check_orders(orders),
        rdp,
        rdp,
        queries=queries,
        answered=queries,
    )


def calibrate_class_means_sigma(
    *,
    eps: float,
    delta: float,
    count_weight: float,
    orders: npt.ArrayLike = DEFAULT_ORDERS,
    conversion: str = "classic",
    extra_rdp: npt.ArrayLike | None = None,
) -> float:
    """Smallest sigma such that the release, composed with ``extra_rdp``, is (eps, delta)-DP.

    The release at sigma costs exactly one GNMax answer's data-independent RDP at the noise
    sigma sqrt(2 / (1 + kappa^2)) (module docstring), so this is ``calibrate_gnmax_sigma`` with
    one query, scaled by sqrt((1 + kappa^2) / 2) (never overshoots ``eps``)."""
    delta_sens = class_means_sensitivity(count_weight=count_weight)
    gnmax_sigma = calibrate_gnmax_sigma(
        eps=eps,
        delta=delta,
        num_queries=1,
        orders=orders,
        conversion=conversion,
        extra_rdp=extra_rdp,
    )
    return float(gnmax_sigma * delta_sens / np.sqrt(2.0))
