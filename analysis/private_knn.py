"""Private-kNN: the Renyi-DP of a Poisson-sampled Confident-GNMax step on kNN label histograms.

Private-kNN [ZYW20] replaces PATE's teachers by the private records themselves. This module
gives its data-independent RDP (numpy + scipy only).

Symbols
-------
x        one private record (its embedding and label)
gamma    ``sampling_rate``; k neighbours per query; T ``threshold``; sigma1 the std of the
         threshold-check noise, sigma2 of the argmax noise; alpha a Renyi order > 1 (``orders``)
z        ``noise_multiplier``: noise std / L2 sensitivity of a Gaussian mechanism
mu0, mu  N(0, z^2) and the mixture (1 - gamma) N(0, z^2) + gamma N(1, z^2)
A_alpha  E_{y ~ mu0}[(mu(y) / mu0(y))^alpha] = exp((alpha - 1) D_alpha(mu || mu0))

Adjacency
---------
pate-learn's relation (``relation = "add-remove"`` on the event): D and D' = D + {x}, one record
added or removed. The bound below is for that relation only. pate-learn states no replace-one cost:
Renyi divergence has no additive triangle inequality, so a replacement does not cost the sum of a
removal and an addition at the same order.

The mechanism, per query i
--------------------------
1. S_i: every record independently with probability gamma, fresh for every query.
2. h_i = the label histogram over the m classes of the k nearest records of S_i (all of S_i when
   |S_i| < k; ties broken by record order), so sum_j h_ij <= k.
3. answered = [max_j h_ij + N(0, sigma1^2) >= T]; if answered, the label argmax_j (h_ij + N(0, sigma2^2)).

Derivation (data-independent)
-----------------------------
*Sensitivity.* Fix a sample S that does not contain x. In S + {x}, either x is not among the k
nearest (h unchanged), or it is and |S| < k (h + e_a, a = label of x), or it displaces the k-th
neighbour of S (h + e_a - e_b). So ||h(S + x) - h(S)||_2 <= sqrt(2) and |max h(S + x) - max h(S)|
<= 1 (every count moves by at most 1). The released pair (the answered bit and the label) is a
post-processing of (max h + N(0, sigma1^2), h + N(0, sigma2^2 I)), i.e. -- scaling each block by its
noise -- of the Gaussian mechanism f(S) + N(0, I) with f(S) = (max h(S) / sigma1, h(S) / sigma2),
whose L2 sensitivity is Delta = sqrt(1/sigma1^2 + 2/sigma2^2): noise multiplier z = 1 / Delta.

*Poisson sampling, any f of sensitivity Delta* ([MTZ19] prove it for sums; the argument does not
use the sum). Write P_S = N(f(S), I) and Q_S = (1 - gamma) N(f(S), I) + gamma N(f(S + x), I). The
sample of D' is S + {x} with probability gamma, independently of S ~ Poisson_gamma(D), so
M(D) = E_S[P_S] and M(D') = E_S[Q_S] with the *same* distribution of S. For alpha > 1,
(p, q) -> p^alpha q^(1 - alpha) is jointly convex (the perspective of t^alpha), hence
    exp((alpha-1) D_alpha(M(D) || M(D')))  <= E_S exp((alpha-1) D_alpha(P_S || Q_S))
                                            <= sup_S exp((alpha-1) D_alpha(P_S || Q_S)),
and the same with the arguments swapped. For a fixed S only the component of y along
f(S + x) - f(S) carries information (the orthogonal components have the same law under P_S and
Q_S), so the pair is (N(0, 1), (1 - gamma) N(0, 1) + gamma N(c, 1)) with c = ||f(S + x) - f(S)||
<= Delta. The map y -> (c / Delta) y + N(0, 1 - c^2 / Delta^2) sends the pair at c = Delta to the
pair at c, so by data processing c = Delta is the worst case; rescaling by 1/Delta gives
(mu0, mu) with z = 1 / Delta. Hence
    RDP(alpha) <= max(D_alpha(mu || mu0), D_alpha(mu0 || mu)) = log(A_alpha) / (alpha - 1),
the last step because [MTZ19] (Section 3) show E_{mu}[(mu0/mu)^alpha] <= A_alpha: D_alpha(mu || mu0)
is the larger direction. (Add/remove is symmetric: the removal case swaps D and D'.)

Every query asked pays this (the threshold outcome is released whether or not it passes), and
queries with independent samples and noise compose additively in RDP ([M17] Proposition 1).
There is no data-dependent or smooth-sensitivity variant here: the realised cost *is* this bound.

Computing A_alpha ([MTZ19] Section 3.2 and 3.3)
------------------------------------------------
Integer alpha (binomial expansion of ((1 - gamma) + gamma e^{(2y - 1) / (2 z^2)})^alpha under mu0):
    A_alpha = sum_{j=0}^{alpha} C(alpha, j) (1-gamma)^{alpha-j} gamma^j exp((j^2 - j) / (2 z^2)),
computed as A_alpha - 1 = the same sum over j >= 2 with exp(.) - 1 in place of exp(.) (the j = 0,
1 terms cancel the 1): all terms positive, so log1p(A_alpha - 1) stays accurate when A_alpha ~ 1.
Fractional alpha: split the integral at z0 = z^2 log(1/gamma - 1) + 1/2, where the two summands
are equal, and expand the power as a binomial series on each side (convergent since the ratio is
<= 1 there):
    A_alpha = sum_{j>=0} C(alpha, j) [ (1-gamma)^{alpha-j} gamma^j e^{(j^2-j)/(2z^2)} Phi((z0 - j)/z)
                + (1-gamma)^j gamma^{alpha-j} e^{((alpha-j)^2-(alpha-j))/(2z^2)} Phi((alpha-j-z0)/z) ],
with the generalised binomial C(alpha, j) (its sign alternates for j > alpha). Everything is in log
space with signs; the tail (j > alpha) alternates with decreasing magnitudes, and the sum stops at
the first term past alpha below 2^-54 of the positive partial sum (or of its block's largest term);
that term's magnitude is then *added* (an upper bound of the alternating remainder). A series that
does not converge within 2^22 terms gives +inf at that order (conservative). 2^-48 + 2^-44 log A_alpha is added to every
log A_alpha to cover float rounding, so the value returned is an upper bound. gamma = 1 is the
Gaussian mechanism, alpha / (2 z^2); gamma = 0 releases nothing about the data: 0.

References
----------
[ZYW20] Zhu, Yu, Wang. "Private-kNN: Practical Differential Privacy for Computer Vision",
        CVPR 2020.
[MTZ19] Mironov, Talwar, Zhang. "Renyi Differential Privacy of the Sampled Gaussian Mechanism",
        arXiv:1908.10530, 2019.
[P18]   Papernot et al. "Scalable Private Learning with PATE", ICLR 2018 (arXiv:1802.08908).
[M17]   Mironov. "Renyi Differential Privacy", CSF 2017.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from scipy.special import gammaln, gammasgn, log_ndtr, logsumexp

from pate.analysis.accountant import PrivacyEvent
from pate.analysis.arrays import FloatArray
from pate.analysis.calibration import delta_floor, extra_rdp_per_order, smallest_noise
from pate.analysis.errors import InputError
from pate.analysis.orders import DEFAULT_ORDERS
from pate.analysis.rdp import eps_from_rdp
from pate.analysis.validation import (
    check_delta,
    check_int,
    check_mask,
    check_nonnegative,
    check_orders,
    check_positive,
    check_unit_interval,
)

_MAX_TERMS = 2**22
_TAIL_LOG_TOL = -54.0 * math.log(2.0)
#: Added to every log A_alpha (module docstring): covers the float64 rounding of the log-space sums.
_ROUNDING_MARGIN = 2.0**-48
_ROUNDING_MARGIN_REL = 2.0**-44


# --------------------------------------------------------------------------- helpers


def _log_expm1(x: FloatArray) -> FloatArray:
    """log(e^x - 1) for x > 0, accurate for tiny and huge x."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    big = x > 30.0
    out[big] = x[big] + np.log1p(-np.exp(-x[big]))
    out[~big] = np.log(np.expm1(x[~big]))
    return out


def _log_a_minus_1_int(q: float, z: float, alpha: int) -> float:
    """log(A_alpha - 1) for an integer alpha >= 2 (all terms positive)."""
    j = np.arange(2, alpha + 1, dtype=np.float64)
    log_binom = gammaln(alpha + 1.0) - gammaln(j + 1.0) - gammaln(alpha - j + 1.0)
    terms = (
        log_binom
        + j * math.log(q)
        + (alpha - j) * math.log1p(-q)
        + _log_expm1((j * j - j) / (2.0 * z * z))
    )
    return float(logsumexp(terms))


def _log_terms_frac(
    q: float, z: float, alpha: float, j: FloatArray, z0: float
) -> tuple[FloatArray, FloatArray]:
    """(log |term_j|, sign_j) of the fractional-order series for the indices ``j``."""
    log_q, log_1mq = math.log(q), math.log1p(-q)
    log_binom = gammaln(alpha + 1.0) - gammaln(j + 1.0) - gammaln(alpha - j + 1.0)
    sign: FloatArray = gammasgn(alpha - j + 1.0)
    r = alpha - j
    inv = 1.0 / (2.0 * z * z)
    left = j * log_q + r * log_1mq + (j * j - j) * inv + log_ndtr((z0 - j) / z)
    right = r * log_q + j * log_1mq + (r * r - r) * inv + log_ndtr((r - z0) / z)
    log_abs: FloatArray = log_binom + np.logaddexp(left, right)
    return log_abs, sign


def _log_a_frac(q: float, z: float, alpha: float) -> float:
    """log A_alpha for a fractional alpha by the series of [MTZ19] Section 3.3 (module docstring).

    For j > alpha the terms alternate in sign and decrease in magnitude: |C(alpha, j)| does
    (|C(alpha, j+1) / C(alpha, j)| = (j - alpha) / (j + 1) < 1), and each bracket is
    (1-gamma)^alpha e^{-z0^2/(2z^2)} / sqrt(2 pi) times M((j - z0)/z) + M((j + z0 - alpha)/z), with
    M(x) = Phi(-x)/phi(x) the (decreasing) Mills ratio. So the remainder after the last summed term
    is at most the first omitted term, which is added: the result is an upper bound.
    """
    z0 = z * z * (math.log1p(-q) - math.log(q)) + 0.5
    log_pos = log_neg = -math.inf
    start, size = 0, int(math.ceil(alpha)) + 64
    while start < _MAX_TERMS:
        j = np.arange(start, start + size, dtype=np.float64)
        log_t, sign = _log_terms_frac(q, z, alpha, j, z0)
        # Past alpha, stop at the first term below the tolerance (relative to the positive part,
        # an upper bound of the sum): everything after it is smaller still.
        small = np.nonzero(
            (j > alpha) & (log_t < max(log_pos, float(np.max(log_t))) + _TAIL_LOG_TOL)
        )[0]
        stop = int(small[0]) if small.size else size
        keep_t, keep_s = log_t[:stop], sign[:stop]
        log_pos = float(np.logaddexp(log_pos, logsumexp(np.where(keep_s > 0, keep_t, -np.inf))))
        log_neg = float(np.logaddexp(log_neg, logsumexp(np.where(keep_s < 0, keep_t, -np.inf))))
        if small.size:
            log_pos = float(np.logaddexp(log_pos, log_t[stop]))  # the remainder bound
            if log_neg == -math.inf:
                return log_pos
            return log_pos + math.log1p(-math.exp(min(log_neg - log_pos, 0.0)))
        start += size
        size *= 2
    return math.inf


def _sampled_gaussian_rdp(q: float, z: float, orders: FloatArray) -> FloatArray:
    if q == 0.0:
        return np.zeros(orders.size)
    if q == 1.0:
        full: FloatArray = orders / (2.0 * z * z)
        return full
    out: FloatArray = np.empty(orders.size)
    for i, alpha in enumerate(orders):
        a = float(alpha)
        if a.is_integer():
            log_a = float(np.logaddexp(0.0, _log_a_minus_1_int(q, z, int(a))))
        else:
            log_a = _log_a_frac(q, z, a)
        out[i] = (log_a * (1.0 + _ROUNDING_MARGIN_REL) + _ROUNDING_MARGIN) / (a - 1.0)
    # Rounding can take a tiny value below 0; the RDP is >= 0.
    floored: FloatArray = np.maximum(out, 0.0)
    return floored


# --------------------------------------------------------------------------- public API


def sampled_gaussian_rdp(
    *, sampling_rate: float, noise_multiplier: float, orders: npt.ArrayLike
) -> FloatArray:
    """RDP of the Poisson-sampled Gaussian mechanism at each order, shape (k,) ([MTZ19]).

    ``sampling_rate`` gamma in [0, 1]; ``noise_multiplier`` z > 0 (noise std / L2 sensitivity).
    Integer and fractional orders as in the module docstring, which derives the bound for
    add/remove-one adjacency and any function of L2 sensitivity 1 (not only sums).
    """
    q = check_unit_interval(sampling_rate, "sampling_rate")
    z = check_positive(noise_multiplier, "noise_multiplier")
    return _sampled_gaussian_rdp(q, z, check_orders(orders))


def private_knn_noise_multiplier(*, sigma1: float, sigma2: float) -> float:
    """z = 1 / sqrt(1/sigma1^2 + 2/sigma2^2): the noise multiplier of the joint Gaussian mechanism
    on (max h / sigma1, h / sigma2) (sensitivities 1 and sqrt(2))."""
    s1 = check_positive(sigma1, "sigma1")
    s2 = check_positive(sigma2, "sigma2")
    return 1.0 / math.sqrt(1.0 / (s1 * s1) + 2.0 / (s2 * s2))


def private_knn_query_rdp(
    *, sampling_rate: float, sigma1: float, sigma2: float, orders: npt.ArrayLike
) -> FloatArray:
    """Data-independent RDP, (k,), of one Private-kNN query asked (answered or not): the sampled
    Gaussian mechanism at gamma = ``sampling_rate`` and z = :func:`private_knn_noise_multiplier`."""
    z = private_knn_noise_multiplier(sigma1=sigma1, sigma2=sigma2)
    q = check_unit_interval(sampling_rate, "sampling_rate")
    return _sampled_gaussian_rdp(q, z, check_orders(orders))


def private_knn_event(
    *,
    answered: npt.ArrayLike,
    k: int,
    sampling_rate: float,
    threshold: float,
    sigma1: float,
    sigma2: float,
    orders: npt.ArrayLike = DEFAULT_ORDERS,
) -> PrivacyEvent:
    """Private-kNN asked ``len(answered)`` queries and answered those in the ``answered`` mask.

    Every asked query is charged :func:`private_knn_query_rdp`, answered or not; the event's
    ``rdp`` (data-dependent) equals its ``rdp_data_independent`` (there is no data-dependent
    bound for this mechanism). ``k`` and ``threshold`` do not enter the cost; they are recorded.
    """
    mask = check_mask(answered, np.size(answered), "answered")
    k = check_int(k, "k", minimum=1)
    threshold = check_nonnegative(threshold, "threshold")
    grid = check_orders(orders)
    per_query = private_knn_query_rdp(
        sampling_rate=sampling_rate, sigma1=sigma1, sigma2=sigma2, orders=grid
    )
    total = mask.size * per_query
    params = {
        "k": k,
        "sampling_rate": float(sampling_rate),
        "threshold": threshold,
        "sigma1": float(sigma1),
        "sigma2": float(sigma2),
    }
    return PrivacyEvent("private-knn", params, grid, total, total, int(mask.size), int(mask.sum()))


def private_knn_log_pr_answered(
    histograms: npt.ArrayLike, *, threshold: float, sigma1: float
) -> FloatArray:
    """log Pr[max_j h_ij + N(0, sigma1^2) >= threshold] per row of ``histograms`` (n, m): the
    threshold check of Private-kNN given its sampled histograms. Non-negative integer counts;
    unlike teacher votes, rows may sum to different totals (min(k, |S_i|))."""
    arr = np.asarray(histograms)
    if arr.ndim != 2 or arr.shape[1] < 2:
        raise InputError(f"histograms must be 2-D (queries, classes >= 2), got shape {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)) or (
        arr.size
        and (not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(arr != np.round(arr)))
    ):
        raise InputError("histograms must hold non-negative integer counts")
    threshold = check_nonnegative(threshold, "threshold")
    sigma1 = check_positive(sigma1, "sigma1")
    top = arr.max(axis=1).astype(np.float64) if arr.shape[0] else np.zeros(0)
    log_pr: FloatArray = log_ndtr((top - threshold) / sigma1)
    return log_pr


def calibrate_private_knn_sigma2(
    *,
    eps: float,
    delta: float,
    num_queries: int,
    sampling_rate: float,
    sigma1: float,
    orders: npt.ArrayLike = DEFAULT_ORDERS,
    conversion: str = "classic",
    extra_rdp: npt.ArrayLike | None = None,
) -> float:
    """Smallest sigma2 such that asking ``num_queries`` Private-kNN queries (with ``sigma1``
    fixed), composed with ``extra_rdp``, is (eps, delta)-DP (data-independent, never overshoots).

    As sigma2 grows, z tends to sigma1: ValueError if even sigma2 = inf misses the target.
    """
    eps = check_positive(eps, "eps")
    delta = check_delta(delta)
    n = check_int(num_queries, "num_queries", minimum=1)
    q = check_unit_interval(sampling_rate, "sampling_rate")
    s1 = check_positive(sigma1, "sigma1")
    grid = check_orders(orders)
    extra = extra_rdp_per_order(extra_rdp, grid)

    def eps_at_z(z: float) -> float:
        rdp = n * _sampled_gaussian_rdp(q, z, grid) + extra
        return float(eps_from_rdp(rdp, orders=grid, delta=delta, conversion=conversion)[0])

    floor = eps_at_z(s1)
    if floor >= eps:
        raise InputError(
            f"eps={eps!r} is unreachable with sigma1={s1!r}, sampling_rate={q!r} and "
            f"num_queries={n}: even sigma2 = inf costs eps={floor:.6g}; raise sigma1 "
            "or lower sampling_rate or num_queries"
        )

    def eps_of(sigma2: float) -> float:
        return eps_at_z(private_knn_noise_multiplier(sigma1=s1, sigma2=sigma2))

    return smallest_noise(eps_of, eps, "sigma2", delta_floor(grid, delta, conversion, extra))
