"""Renyi-DP of the PATE aggregators, data-independent and data-dependent.

References
----------
[P17] Papernot, Abadi, Erlingsson, Goodfellow, Talwar. "Semi-supervised Knowledge Transfer for
      Deep Learning from Private Training Data", ICLR 2017.
[P18] Papernot, Song, Mironov, Raghunathan, Talwar, Erlingsson. "Scalable Private Learning with
      PATE", ICLR 2018 (arXiv:1802.08908). Proposition/Theorem numbers below follow its appendix.
[M17] Mironov. "Renyi Differential Privacy", CSF 2017.
[CKS20] Canonne, Kamath, Steinke. "The Discrete Gaussian for Differential Privacy", NeurIPS 2020;
      [B20] Balle, Barthe, Gaboardi, Hsu, Sato. "Hypothesis testing interpretations and Renyi DP", 2020.

Symbols
-------
votes    (n, m) non-negative integer vote counts: n queries, m classes; rows sum to the teachers
lambda   a Renyi order > 1 (``orders``: a 1-D array of k orders)
sigma    std of the Gaussian noise on each vote count (GNMax); sigma1 that of the Confident-GNMax
         threshold check (T its ``threshold``), sigma2 that of its argmax step
scale    the Laplace noise scale b of LNMax (density ~ exp(-|x|/b)); LNMax is (2/b)-DP
q        an upper bound on Pr[the noisy aggregator does not return the plain argmax] (``log_q``)

Neighbouring relation (add/remove one record)
--------------------------------------------
Every bound here is for two vote histograms that differ by *one teacher's vote*: one count down
by one and another up by one (L2 distance sqrt(2), every count moves by at most 1). That is what
adding or removing one sensitive record does in pate-learn, because the partition decides each
record's teacher from the record alone (:mod:`pate.core.partition`: a keyed hash of its content,
or of its privacy unit): the record joins or leaves one shard, one teacher is retrained and only
its vote can change; the number of teachers, and so every row's sum, stays the same ([P18] state
the bounds for the same histogram change). With a partition that reshuffles when a record is
added they would hold for replacing a record only.

Vectorized over queries (n,) and orders (n, k), in log-space. The data-dependent bounds of [P18]
apply only where their conditions hold, elsewhere the data-independent bound: the result is
min(data-independent, valid data-dependent bound), never anything smaller.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
from scipy.special import log_ndtr

from pate.analysis.arrays import FloatArray, FloatOrArray, IntArray
from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.validation import (
    check_baseline,
    check_choice,
    check_delta,
    check_mask,
    check_nonnegative,
    check_order,
    check_orders,
    check_positive,
    check_votes,
)

# --------------------------------------------------------------------------- helpers


def _log1mexp(x: npt.ArrayLike) -> FloatArray:
    """log(1 - exp(x)) for x <= 0, accurate at both ends (Maechler 2012); -inf at x == 0."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out: FloatArray = np.where(x < -1.0, np.log1p(-np.exp(x)), np.log(-np.expm1(x)))
    return out


def logsumexp_rows(terms: FloatArray) -> FloatArray:
    """log(sum(exp(terms))) over the last axis; rows of all -inf give -inf."""
    top = np.max(terms, axis=-1, keepdims=True)
    safe_top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        out: FloatArray = np.log(np.sum(np.exp(terms - safe_top), axis=-1)) + safe_top[..., 0]
    return out


def rdp_gaussian_from_log_q(log_q: FloatArray, sigma: float, orders: FloatArray) -> FloatArray:
    """Theorem 6 of [P18] with mu1, mu2 of Proposition 10, capped by Proposition 8.

    For a mechanism that is (lambda, lambda/sigma^2)-RDP for all lambda (Gaussian noise on a
    sensitivity-sqrt(2) histogram argmax) and whose most likely outcome has probability >= 1 - q:

        mu2 = sigma * sqrt(-log q),  mu1 = mu2 + 1,  eps_i = mu_i / sigma^2,
        A = (1 - q) / (1 - (q e^{eps2})^{1 - 1/mu2}),   B = e^{eps1} / q^{1/(mu1 - 1)},
        RDP(lambda) <= 1/(lambda-1) log((1-q) A^{lambda-1} + q B^{lambda-1}).

    The bound is used only for orders lambda < mu1 with mu2 > 1, and only when
    log q <= (mu2 - 1) eps2 - mu2 (log(1 + 1/(mu1-1)) + log(1 + 1/(mu2-1)))  and  -log q > eps2
    (q in the range where the bound increases in q, A > 0). Elsewhere: lambda / sigma^2.
    A query whose outcome is certain (log q = -inf) costs 0.

    log_q: (n,) array; returns (n, k).
    """
    variance = sigma**2
    n = log_q.shape[0]
    data_independent = orders / variance
    out = np.broadcast_to(data_independent, (n, orders.size)).copy()
    certain = np.isneginf(log_q)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        mu2 = np.sqrt(variance * -log_q)
        mu1 = mu2 + 1.0
        eps1 = mu1 / variance
        eps2 = mu2 / variance
        order_applies = (mu1[:, None] > orders[None, :]) & (mu2[:, None] > 1.0)
        log_a2 = (mu2 - 1.0) * eps2
        increasing_in_q = log_q <= log_a2 - mu2 * (
            np.log(1.0 + 1.0 / (mu1 - 1.0)) + np.log(1.0 + 1.0 / (mu2 - 1.0))
        )
        rows = np.nonzero(order_applies.any(axis=1) & increasing_in_q & (-log_q > eps2) & ~certain)[
            0
        ]
        # Only orders below mu1 can use the bound: evaluate it block by block of rows with
        # similar mu1, on the orders below the block's largest mu1 only.
        rows = rows[np.argsort(mu1[rows], kind="stable")]
        orders_m1 = orders - 1.0
        for block in np.array_split(rows, max(1, min(8, rows.size // 256))):
            if block.size == 0:
                continue
            cols = np.nonzero(orders < mu1[block].max())[0]
            lq = log_q[block]
            log1q = _log1mexp(lq)
            per_order_a = log1q - _log1mexp((lq + eps2[block]) * (1.0 - 1.0 / mu2[block]))
            per_order_b = eps1[block] - lq / (mu1[block] - 1.0)
            om1 = orders_m1[cols]
            # log((1-q) A^{lambda-1} + q B^{lambda-1}) / (lambda-1), in place to spare memory
            log_s = np.multiply.outer(per_order_a, om1)
            log_s += log1q[:, None]
            log_b = np.multiply.outer(per_order_b, om1)
            log_b += lq[:, None]
            np.logaddexp(log_s, log_b, out=log_s)
            log_s /= om1
            di = data_independent[cols]
            np.minimum(log_s, di, out=log_s)
            out[np.ix_(block, cols)] = np.where(order_applies[np.ix_(block, cols)], log_s, di)
    out[certain] = 0.0
    return out


def log_union_bound(
    votes: IntArray, log_pr_beats: Callable[[FloatArray], FloatArray]
) -> FloatArray:
    """(n,) log sum_{j != i*} Pr[j beats i*], i* each row's first argmax (as in [P18]'s analysis),
    from ``log_pr_beats`` of the float vote differences n_j - n_i* (<= 0); uncapped."""
    rows = np.arange(votes.shape[0])
    winner = np.argmax(votes, axis=1)
    terms = log_pr_beats((votes - votes[rows, winner][:, None]).astype(np.float64))
    terms[rows, winner] = -np.inf
    return logsumexp_rows(terms)


def unique_apply(keys: FloatArray, fn: Callable[[FloatArray], FloatArray]) -> FloatArray:
    """Evaluate a row-wise ``fn`` once per distinct key and scatter back (identical results)."""
    unique, inverse = np.unique(keys, return_inverse=True)
    return fn(unique)[inverse.reshape(-1)]


def unique_weighted_sum(
    keys: FloatArray, weights: FloatArray, fn: Callable[[FloatArray], FloatArray]
) -> FloatArray:
    """sum_i weights_i * fn(keys)_i over rows, evaluating ``fn`` once per distinct key."""
    unique, inverse = np.unique(keys, return_inverse=True)
    out: FloatArray = np.bincount(inverse.reshape(-1), weights=weights, minlength=unique.size) @ fn(
        unique
    )
    return out


# --------------------------------------------------------------------------- GNMax


def gnmax_log_q_unchecked(votes: IntArray, sigma: float) -> FloatArray:
    scale = math.sqrt(2.0 * sigma**2)
    log_q = log_union_bound(votes, lambda diff: log_ndtr(diff / scale))
    return np.minimum(log_q, math.log(1.0 - 1.0 / votes.shape[1]))


def gnmax_log_q(votes: npt.ArrayLike, *, sigma: float) -> FloatArray:
    """Upper bound on log Pr[GNMax output != argmax], one per query ([P18] Proposition 7).

    Union bound over the non-winning classes j of Pr[n_j + N(0, s^2) >= n_i* + N(0, s^2)]
    = Phi_c((n_i* - n_j) / (sqrt(2) sigma)), with i* the first argmax; capped at log(1 - 1/m)
    (the probability of *some* other class under uniform noise cannot exceed that of a uniform
    choice). A tied runner-up contributes log(1/2). Returns (n,).
    """
    votes = check_votes(votes)
    sigma = check_positive(sigma, "sigma")
    return gnmax_log_q_unchecked(votes, sigma)


def gnmax_rdp(
    votes: npt.ArrayLike, *, sigma: float, orders: npt.ArrayLike, data_dependent: bool = True
) -> FloatArray:
    """Per-query RDP of GNMax at each order, shape (n, k).

    data_dependent=True: Theorem 6 of [P18] at q from Proposition 7, with mu1/mu2 from
    Proposition 10, wherever it applies, and lambda/sigma^2 (Proposition 8) elsewhere.
    data_dependent=False: lambda/sigma^2 for every query (Proposition 8).
    """
    votes = check_votes(votes)
    sigma = check_positive(sigma, "sigma")
    orders = check_orders(orders)
    if not data_dependent:
        return np.broadcast_to(orders / sigma**2, (votes.shape[0], orders.size)).copy()
    log_q = gnmax_log_q_unchecked(votes, sigma)
    return unique_apply(log_q, lambda u: rdp_gaussian_from_log_q(u, sigma, orders))


# --------------------------------------------------------------------------- threshold check


def top_votes(votes: IntArray, baseline: FloatArray | None) -> FloatArray:
    if baseline is None:
        top: FloatArray = votes.max(axis=1).astype(np.float64)
        return top
    # Interactive GNMax: the check is on max_j (n_j - baseline_j), rounded half-to-even like
    # the reference's Python round() (only matters for non-integer baselines).
    rounded: FloatArray = np.round(np.max(votes - baseline, axis=1))
    return rounded


def threshold_log_pr(max_vote: FloatArray, threshold: float, sigma: float) -> FloatArray:
    log_pr: FloatArray = log_ndtr(-((threshold - max_vote) / sigma))
    return log_pr


def threshold_rdp_from_max(
    max_vote: FloatArray, threshold: float, sigma: float, orders: FloatArray
) -> FloatArray:
    # q = min(p, 1 - p) with p = Pr[answered]; 1 - p computed directly (no cancellation).
    log_pr_not: FloatArray = log_ndtr((threshold - max_vote) / sigma)
    log_q = np.minimum(threshold_log_pr(max_vote, threshold, sigma), log_pr_not)
    return rdp_gaussian_from_log_q(log_q, 2**0.5 * sigma, orders)


def _validate_threshold_args(
    votes: npt.ArrayLike,
    threshold: float,
    sigma: float,
    baseline: npt.ArrayLike | None,
) -> tuple[IntArray, float, float, FloatArray | None]:
    votes = check_votes(votes)
    threshold = check_nonnegative(threshold, "threshold")
    sigma = check_positive(sigma, "sigma")
    checked_baseline = None if baseline is None else check_baseline(baseline, votes.shape)
    return votes, threshold, sigma, checked_baseline


def threshold_log_pr_answered(
    votes: npt.ArrayLike, *, threshold: float, sigma: float, baseline: npt.ArrayLike | None = None
) -> FloatArray:
    """log Pr[max vote + N(0, sigma^2) >= threshold], one per query ([P18] Algorithm 1, step 1).

    With ``baseline`` (Interactive GNMax, [P18] Algorithm 2) the max is taken over
    ``votes - baseline`` and rounded to the nearest integer. Returns (n,).
    """
    counts, threshold, sigma, base = _validate_threshold_args(votes, threshold, sigma, baseline)
    return threshold_log_pr(top_votes(counts, base), threshold, sigma)


def threshold_rdp(
    votes: npt.ArrayLike,
    *,
    threshold: float,
    sigma: float,
    orders: npt.ArrayLike,
    data_dependent: bool = True,
    baseline: npt.ArrayLike | None = None,
) -> FloatArray:
    """Per-query RDP of the Confident-GNMax threshold check, shape (n, k).

    The check releases one bit from a max vote of sensitivity 1, i.e. a Gaussian mechanism
    that is (lambda, lambda / (2 sigma^2))-RDP (data-independent). Data-dependent: Theorem 6 of
    [P18] with q = min(p, 1 - p), p = Pr[answered], and noise sqrt(2) sigma (stability 1 instead
    of 2), capped by the data-independent bound.
    """
    counts, threshold, sigma, base = _validate_threshold_args(votes, threshold, sigma, baseline)
    checked_orders = check_orders(orders)
    if not data_dependent:
        return np.broadcast_to(
            checked_orders / (2**0.5 * sigma) ** 2, (counts.shape[0], checked_orders.size)
        ).copy()
    max_vote = top_votes(counts, base)
    return unique_apply(
        max_vote, lambda u: threshold_rdp_from_max(u, threshold, sigma, checked_orders)
    )


# --------------------------------------------------------------------------- LNMax


def _lnmax_log_q(votes: IntArray, scale: float) -> FloatArray:
    def log_pr_beats(diff: FloatArray) -> FloatArray:
        # Pr[j beats i*] <= (2 + g)/4 exp(-g) with g = gap/scale ([P17] Lemma 4's Laplace tail).
        normalized = diff / scale
        out: FloatArray = np.log(2.0 - normalized) + math.log(0.25) + normalized
        return out

    return np.minimum(log_union_bound(votes, log_pr_beats), math.log(1.0 - 1.0 / votes.shape[1]))


def lnmax_log_q(votes: npt.ArrayLike, *, scale: float) -> FloatArray:
    """Upper bound on log Pr[LNMax output != argmax], one per query ([P17] Lemma 4, union bound).

    LNMax adds Laplace(scale) noise to every count and is pure (2/scale)-DP. Returns (n,).
    """
    votes = check_votes(votes)
    scale = check_positive(scale, "scale")
    return _lnmax_log_q(votes, scale)


def _rdp_pure_eps(log_q: FloatArray, pure_eps: float, orders: FloatArray) -> FloatArray:
    """RDP of a pure eps-DP mechanism whose likely outcome has probability >= 1 - q.

    min( lambda eps^2 / 2  (eps-DP => eps^2/2-zCDP, Bun & Steinke 2016),
         eps               (pure DP),
         1/(lambda-1) log((1-q) ((1-q)/(1-e^eps q))^{lambda-1} + q e^{eps (lambda-1)})
                           ([P17] Theorem 3, valid for q <= 1/(e^eps + 1)) ).
    """
    lam = orders[None, :]
    data_independent = np.minimum(0.5 * pure_eps * pure_eps * lam, pure_eps)
    out = np.broadcast_to(data_independent, (log_q.size, orders.size)).copy()
    q = np.exp(log_q)
    # q <= 1 / (e^eps + 1), compared in log-space (e^eps overflows for eps > 709)
    rows = np.nonzero(log_q <= -np.logaddexp(0.0, pure_eps))[0]
    if rows.size:
        lq = log_q[rows][:, None]
        log1q = np.log1p(-q[rows])[:, None]
        log_t_one = log1q + (log1q - _log1mexp(pure_eps + lq)) * (lam - 1.0)
        log_t_two = lq + pure_eps * (lam - 1.0)
        bound = np.logaddexp(log_t_one, log_t_two) / (lam - 1.0)
        out[rows] = np.minimum(out[rows], bound)
    return out


def lnmax_rdp(
    votes: npt.ArrayLike, *, scale: float, orders: npt.ArrayLike, data_dependent: bool = True
) -> FloatArray:
    """Per-query RDP of LNMax (Laplace noise of scale ``scale``), shape (n, k).

    data_dependent=False: min(lambda eps^2/2, eps) with eps = 2/scale.
    data_dependent=True: additionally [P17] Theorem 3 at q from :func:`lnmax_log_q`.
    """
    votes = check_votes(votes)
    scale = check_positive(scale, "scale")
    orders = check_orders(orders)
    pure_eps = 2.0 / scale
    if not data_dependent:
        return _rdp_pure_eps(np.full(votes.shape[0], 0.0), pure_eps, orders)
    log_q = _lnmax_log_q(votes, scale)
    return unique_apply(log_q, lambda u: _rdp_pure_eps(u, pure_eps, orders))


# --------------------------------------------------------------------------- Confident GNMax


def confident_gnmax_rdp(
    votes: npt.ArrayLike,
    *,
    threshold: float,
    sigma1: float,
    sigma2: float,
    orders: npt.ArrayLike,
    answered: npt.ArrayLike | None = None,
    data_dependent: bool = True,
    baseline: npt.ArrayLike | None = None,
) -> FloatArray:
    """Total RDP of a Confident-GNMax run ([P18] Algorithm 1; Algorithm 2 with ``baseline``), (k,).

    Every query pays the threshold check (sigma1). The GNMax step (sigma2) is paid
      * with ``answered`` (bool mask, one per query): by the answered queries only -- the
        realised cost of a run that actually drew the noise;
      * with ``answered=None``: in expectation, weighted by Pr[answered] -- what the reference
        scripts report for a run that was not sampled. This *expected* cost looks at the votes
        through Pr[answered] even when ``data_dependent=False`` (the reference does the same).
    """
    votes, threshold, sigma1, baseline = _validate_threshold_args(
        votes, threshold, sigma1, baseline
    )
    sigma2 = check_positive(sigma2, "sigma2")
    orders = check_orders(orders)
    n = votes.shape[0]
    if answered is not None:
        step2_weights = check_mask(answered, n, "answered").astype(np.float64)
    else:
        step2_weights = np.exp(threshold_log_pr(top_votes(votes, baseline), threshold, sigma1))
    if not data_dependent:
        independent: FloatArray = (
            n * orders / (2**0.5 * sigma1) ** 2 + float(np.sum(step2_weights)) * orders / sigma2**2
        )
        return independent
    step1 = unique_weighted_sum(
        top_votes(votes, baseline),
        np.ones(n),
        lambda u: threshold_rdp_from_max(u, threshold, sigma1, orders),
    )
    step2 = unique_weighted_sum(
        gnmax_log_q_unchecked(votes, sigma2),
        step2_weights,
        lambda u: rdp_gaussian_from_log_q(u, sigma2, orders),
    )
    total: FloatArray = step1 + step2
    return total


# --------------------------------------------------------------------------- conversion

_CONVERSIONS = ("classic", "tight")


def _conversion_term(
    orders: FloatArray | np.float64, delta: float, conversion: str
) -> FloatArray | np.float64:
    """What converting RDP at ``orders`` to (eps, ``delta``)-DP adds to the RDP (unvalidated)."""
    term: FloatArray | np.float64
    if conversion == "classic":
        term = -math.log(delta) / (orders - 1.0)
    else:
        term = np.log1p(-1.0 / orders) - (math.log(delta) + np.log(orders)) / (orders - 1.0)
    return term


def conversion_term(*, order: float, delta: float, conversion: str = "classic") -> float:
    """eps - rdp when an RDP guarantee at one ``order`` becomes (eps, ``delta``)-DP:
    log(1/delta)/(lambda-1) (classic) or log(1-1/lambda) - (log delta + log lambda)/(lambda-1)
    (tight); see :func:`eps_from_rdp` for the references. The tight term is the smaller one."""
    order = check_order(order)
    delta = check_delta(delta)
    conversion = check_choice(conversion, "conversion", _CONVERSIONS)
    return float(_conversion_term(np.float64(order), delta, conversion))


def eps_from_rdp(
    rdp: npt.ArrayLike, *, orders: npt.ArrayLike, delta: float, conversion: str = "classic"
) -> tuple[FloatOrArray, FloatOrArray]:
    """Convert an RDP curve to (eps, delta)-DP; returns ``(eps, order)`` at the best order.

    classic ([M17] Proposition 3):  eps = min_lambda rdp(lambda) + log(1/delta) / (lambda - 1).
    tight   ([CKS20] Proposition 12, [B20] Theorem 21):
            eps = min_lambda rdp(lambda) + log(1 - 1/lambda) - (log delta + log lambda)/(lambda - 1),
            never larger than the classic value (floored at 0).

    ``rdp`` has shape (..., k) matching ``orders``; the results have shape (...) -- numpy float
    scalars for a single curve. The first minimizing order is returned on ties.
    """
    orders = check_orders(orders)
    delta = check_delta(delta)
    conversion = check_choice(conversion, "conversion", _CONVERSIONS)
    try:
        rdp = np.asarray(rdp, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputTypeError("rdp must be an array of per-order RDP values") from None
    if rdp.ndim == 0 or rdp.shape[-1] != orders.size:
        raise InputError(
            f"rdp must have one value per order (last axis of length {orders.size}), "
            f"got shape {rdp.shape}"
        )
    if np.any(np.isnan(rdp)) or np.any(rdp < 0):
        raise InputError("rdp must be non-negative and not NaN")
    eps = rdp + _conversion_term(orders, delta, conversion)
    best = np.argmin(eps, axis=-1)
    eps_best = np.take_along_axis(eps, best[..., None], axis=-1)[..., 0]
    if conversion == "tight":
        eps_best = np.maximum(eps_best, 0.0)
    order_best = orders[best]
    if rdp.ndim == 1:
        return np.float64(eps_best), np.float64(order_best)
    return eps_best, order_best
