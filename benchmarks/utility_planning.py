"""Data-dependent query planning of an earlier version of the utility benchmark, kept for
benchmarks/aggregator_sweep.py (how that version chose its aggregators). It LOOKS AT THE VOTES:
no headline number of benchmarks/utility.py depends on it. :func:`largest_prefix` (a bisection on
public arithmetic) is also what the two-round Private-kNN run uses to split its budget.
"""

from __future__ import annotations

import math

import numpy as np

#: The release order's candidates (public).
RELEASE_ORDERS = tuple(float(x) for x in (3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 25, 30, 40, 50, 64))


def release_parameters(target: float, *, delta: float, conversion: str = "tight") -> dict:
    """(order, beta, sigma_ss) of the sanitized release for a target eps, from public numbers only.

    beta = 0.4 / order (Theorem 23 of [P18] needs order < 1/(2 beta)); sigma_ss makes the
    release's first cost term, order e^{2 beta} / sigma_ss^2, a tenth of the target. Among the
    candidate orders, the one with the most room left per unit of order,
    (target - gnss_rdp - conversion term) / order, wins: a query's RDP grows about linearly
    with the order, so that is the order that affords the most queries.
    """
    from pate import analysis

    best = None
    for order in RELEASE_ORDERS:
        beta = 0.4 / order
        sigma_ss = math.sqrt(order * math.exp(2 * beta) / (0.1 * target))
        fixed = analysis.gnss_rdp(
            beta=beta, sigma_ss=sigma_ss, order=order
        ) + analysis.conversion_term(order=order, delta=delta, conversion=conversion)
        room = (target - fixed) / order
        if room > 0 and (best is None or room > best["room"]):
            best = {
                "order": order,
                "beta": beta,
                "sigma_ss": round(sigma_ss, 6),
                "room": room,
                "fixed_eps": fixed,
            }
    if best is None:
        raise ValueError(
            f"target eps {target} is too small for any release order in "
            f"{RELEASE_ORDERS} at delta={delta}"
        )
    return best


def noise_params(aggregator: dict) -> dict:
    """The Confident-GNMax keyword arguments of an aggregator setting."""
    return {k: aggregator[k] for k in ("threshold", "sigma1", "sigma2")}


def planning_draw(votes, *, seed: int, aggregator: dict):
    """The planning draw of the aggregator's noise over all the votes (its
    ``confident_gnmax`` result): what :func:`plan_queries` counts answers on."""
    from pate.core.aggregators import confident_gnmax

    return confident_gnmax(votes, rng=np.random.default_rng(seed), **noise_params(aggregator))


class _OneStd:
    """A generator-like whose every normal draw is +1: the release it is given reports its
    centre plus one noise standard deviation."""

    @staticmethod
    def normal(*args):
        return 1.0


def largest_prefix(fits, n: int) -> int:
    """The largest k in [0, n] with fits(k), for a predicate that holds up to some k (bisection)."""
    if fits(n):
        return n
    lo, hi = 0, n  # fits(lo) (k = 0 always fits), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def plan_queries(
    votes,
    *,
    target: float,
    release: dict,
    delta: float,
    conversion: str,
    seed: int,
    aggregator: dict,
) -> dict:
    """How many public items to offer for a target eps, and whether to release a sanitized eps.

    Two routes, on one planning draw of the aggregator's noise (``seed``):

    * ``release``: the largest prefix k whose sanitized eps -- the release's centre plus one
      noise standard deviation -- is at most ``target``. **Looks at the votes** (see the module
      docstring).
    * ``data-independent``: no release; the pipeline's online aggregator itself stops when the
      data-independent eps would pass ``target`` (a rigorous stop; the prefix here only counts
      the answers it would get).

    The route with more answered queries in the planning draw wins.
    """
    from pate import analysis

    params = noise_params(aggregator)
    answered = planning_draw(votes, seed=seed, aggregator=aggregator).answered_mask

    def release_fits(k: int) -> bool:
        if k == 0:
            return True
        out = analysis.release_sanitized_epsilon(
            votes[:k],
            answered=answered[:k],
            order=release["order"],
            beta=release["beta"],
            sigma_ss=release["sigma_ss"],
            delta=delta,
            num_teachers=int(votes[0].sum()),
            rng=_OneStd(),
            conversion=conversion,
            **params,
        )
        return out["eps_sanitized"] <= target

    orders = analysis.DEFAULT_ORDERS

    def independent_fits(k: int) -> bool:
        rdp = analysis.confident_gnmax_rdp(
            votes[:k], answered=answered[:k], orders=orders, data_dependent=False, **params
        )
        return (
            analysis.eps_from_rdp(rdp, orders=orders, delta=delta, conversion=conversion)[0]
            <= target
        )

    k_release = largest_prefix(release_fits, votes.shape[0])
    k_independent = largest_prefix(independent_fits, votes.shape[0])
    if int(answered[:k_independent].sum()) >= int(answered[:k_release].sum()):
        return {
            "route": "data-independent",
            "queries": int(votes.shape[0]),
            "planned_answered": int(answered[:k_independent].sum()),
        }
    return {
        "route": "release",
        "queries": max(k_release, 1),
        "planned_answered": int(answered[:k_release].sum()),
    }
