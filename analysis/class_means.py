"""Noisy class means: the Renyi-DP of one Gaussian release of per-class sums of private records.

The "class-means" mechanism labels the public queries without teachers and without a cost per
query: it releases, once, the per-class sums of the private records' (public-fitted, clipped)
embeddings and their class counts with Gaussian noise, and labels every query from that release
by linear discriminant analysis (:mod:`pate.class_means`). Labelling is post-processing, so the
whole run costs one Gaussian mechanism, however many queries are labelled. This module gives its
RDP (numpy only).

Symbols
-------
x = (e, y)  one private record: e its embedding in R^d (computed by a map fitted on public data
            only), y its class in {0, ..., m-1}
R           the clipping radius (a public quantity: ``pate.class_means`` takes a quantile of the
            public embeddings' norms); u(e) = e min(1, R / ||e||) / R, so ||u(e)|| <= 1
c(x)        the record's contribution, an m x (d + 1) matrix: row y is (u(e), 1), every other
            row is 0
S(D)        sum over the records x of D of c(x): row j holds the clipped sum of class j's
            embeddings (in units of R) and, last, the count n_j of class j
sigma       ``sigma``: the std of the Gaussian noise added to every entry of S(D)
alpha       a Renyi order > 1 (``orders``: a 1-D array of them)

Adjacency
---------
pate-learn's record-level relation: D and D' = D + {x} (add or remove one record). Replace-one
neighbours cost at most the composition of a removal and an addition (twice the RDP below).

Derivation
----------
*Sensitivity.* S(D + {x}) - S(D) = c(x), whose only non-zero row is (u(e), 1), so
    ||S(D + {x}) - S(D)||_F = sqrt(||u(e)||^2 + 1) <= sqrt(2) =: Delta,
whatever D and x are (the clipping makes ||u(e)|| <= 1 for any embedding, and R is public).

*Gaussian mechanism.* S(D) + N(0, sigma^2 I) has, at every order alpha > 1,
    RDP(alpha) = alpha Delta^2 / (2 sigma^2) = alpha / sigma^2
(Mironov 2017, "Renyi Differential Privacy", Proposition 7: D_alpha(N(mu, s^2 I) || N(mu', s^2 I))
= alpha ||mu - mu'||^2 / (2 s^2), maximised at ||mu - mu'|| = Delta; the relation is symmetric).
It is the same per-order cost as one GNMax answer (Papernot et al. 2018: vote sensitivity
sqrt(2)), here paid once for the whole labelling.

*Post-processing.* The class means, the class priors, the discriminant functions and the labels
of any number of public queries are functions of the released matrix and of public data only, so
they cost nothing more (Mironov 2017, Proposition 9). There is no data-dependent bound: the
data-independent cost is the cost, and it is both the guarantee and the realised cost.
"""

from __future__ import annotations

import numpy as np

from pate.analysis.accountant import PrivacyEvent
from pate.analysis.calibration import calibrate_gnmax_sigma
from pate.analysis.orders import DEFAULT_ORDERS
from pate.analysis.validation import check_int, check_orders, check_positive

__all__ = ["SENSITIVITY", "class_means_rdp", "class_means_event", "calibrate_class_means_sigma"]

#: L2 sensitivity of the released matrix S(D) under add/remove of one record (module docstring).
SENSITIVITY = float(np.sqrt(2.0))

MECHANISM = "class-means"


def class_means_rdp(*, sigma, orders=DEFAULT_ORDERS) -> np.ndarray:
    """RDP of the one Gaussian release, per order: ``orders / sigma**2`` (module docstring)."""
    sigma = check_positive(sigma, "sigma")
    orders = check_orders(orders)
    return orders * (SENSITIVITY ** 2 / (2.0 * sigma ** 2))


def class_means_event(*, sigma, queries, orders=DEFAULT_ORDERS) -> PrivacyEvent:
    """The release labelled ``queries`` public items: one Gaussian mechanism, whatever
    ``queries`` is (every query is answered, by post-processing). ``rdp`` (data-dependent) equals
    ``rdp_data_independent``: there is no data-dependent bound."""
    queries = check_int(queries, "queries", minimum=0)
    rdp = class_means_rdp(sigma=sigma, orders=orders)
    return PrivacyEvent(MECHANISM, {"sigma": float(sigma)}, check_orders(orders), rdp, rdp,
                        queries=queries, answered=queries)


def calibrate_class_means_sigma(*, eps, delta, orders=DEFAULT_ORDERS, conversion: str = "classic",
                                extra_rdp=None) -> float:
    """Smallest sigma such that the release, composed with ``extra_rdp``, is (eps, delta)-DP.

    The release costs exactly one GNMax answer's data-independent RDP (``orders / sigma**2``),
    so this is ``calibrate_gnmax_sigma`` with one query (never overshoots ``eps``)."""
    return calibrate_gnmax_sigma(eps=eps, delta=delta, num_queries=1, orders=orders,
                                 conversion=conversion, extra_rdp=extra_rdp)
