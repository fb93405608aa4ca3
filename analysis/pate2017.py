"""The 2017 PATE privacy analysis of LNMax: data-dependent moments accountant ([P17]).

Kept to reproduce and audit numbers reported with it (the MNIST/SVHN epsilons of [P17]); the RDP
analysis of :mod:`pate.analysis.rdp` is tighter, with a proof-backed sanitized release. Reference
code: tensorflow/privacy, ``research/pate_2017/analysis.py``.

References
----------
[P17]  Papernot, Abadi, Erlingsson, Goodfellow, Talwar. "Semi-supervised Knowledge Transfer for
       Deep Learning from Private Training Data", ICLR 2017 (arXiv:1610.05755). Lemma 4,
       Theorems 2 and 3, Section 3 / Appendix B ("smooth sensitivity").
[A16]  Abadi, Chu, Goodfellow, McMahan, Mironov, Talwar, Zhang. "Deep Learning with Differential
       Privacy", CCS 2016 (moments accountant: composability and tail bound).
[BS16] Bun, Steinke. "Concentrated Differential Privacy", TCC 2016 (eps-DP => eps^2/2-zCDP).
[NRS07] Nissim, Raskhodnikova, Smith. "Smooth sensitivity and sampling in private data
       analysis", STOC 2007.

Symbols
-------
votes     (n, m) non-negative integer vote counts: n queries, m classes; rows sum to the number
          of teachers. n_j is the count of class j in one row, j* its first argmax.
gamma     ``noise_eps``: LNMax adds Laplace noise of scale 1/gamma to every count. Moving one
          teacher's vote changes two counts by one each, so one answer is (2 gamma, 0)-DP.
eps       = 2 gamma, the pure-DP parameter of one answer (the reference's ``priv_eps``).
q         an upper bound on Pr[noisy argmax != j*] (Lemma 4), capped at 1 - 1/m.
l         a moment (``moments``; real, >= 1). alpha(l) is the log moment generating function of
          the privacy loss of one answer ([A16]); it composes additively over queries.
k, beta   a distance between vote histograms (teachers whose vote changes); the smoothness
          parameter of the smooth sensitivity ([NRS07]).

Vectorized over queries (n,) and moments (n, L), q in log-space. The data-dependent epsilon is
NOT differentially private; [P17] publishes it through the smooth-sensitivity heuristic at the end
of this module, which is not a proof-backed bound (see :func:`lnmax_sens_at_k_2017`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from pate.analysis.arrays import FloatArray, IntArray
from pate.analysis.rdp import log_union_bound, logsumexp_rows
from pate.analysis.validation import (
    check_bool,
    check_delta,
    check_distances,
    check_moment,
    check_moments,
    check_positive,
    check_votes,
)

_LOG_QUARTER = math.log(0.25)
_LOG2 = math.log(2.0)
# Rows processed at once when the smooth sensitivity expands every row over all distances:
# keeps the (rows, distances, classes) temporary under ~4 million floats.
_CHUNK_ELEMENTS = 4_000_000

# --------------------------------------------------------------------------- core (no validation)


def _log_pr_beats(gaps: FloatArray) -> FloatArray:
    """log((2 + g) / (4 e^g)): Lemma 4's bound on Pr[class j beats j*] at scaled gap g >= 0."""
    out: FloatArray = np.log(2.0 + gaps) + _LOG_QUARTER - gaps
    return out


def _log_q(votes: IntArray, gamma: float) -> FloatArray:
    """(n,) log q of Lemma 4 (union bound over j != j*), capped at log(1 - 1/m)."""
    log_q = log_union_bound(votes, lambda diff: _log_pr_beats(gamma * -diff))
    return np.minimum(log_q, math.log1p(-1.0 / votes.shape[1]))


def _log_q_approx(votes: IntArray, gamma: float) -> FloatArray:
    """(n,) log of the reference's compute_q_noisy_max_approx: (m-1) times the runner-up term."""
    n, m = votes.shape
    top2 = -np.sort(-votes, axis=1)[:, :2]
    gap = gamma * (top2[:, 0] - top2[:, 1]).astype(np.float64)
    return np.minimum(math.log(m - 1) + _log_pr_beats(gap), math.log1p(-1.0 / m))


def _data_independent_log_mgf(eps: float, moments: FloatArray) -> FloatArray:
    """min(eps^2 l (l+1) / 2, eps l): [P17] Theorem 2 ([BS16]) and the pure-DP bound."""
    bound: FloatArray = np.minimum(0.5 * eps * eps * moments * (moments + 1.0), eps * moments)
    return bound


def _q_limit(eps: float) -> float:
    """Largest q (exclusive) at which Theorem 3 is used for an eps-DP answer.

    [P17] Theorem 3 states q < (e^{2 gamma} - 1)/(e^{4 gamma} - 1) = 1/(e^eps + 1); the reference
    uses q < 1/2. For eps < log 2 the reference's condition is also valid: writing
    f(q) = (1-q)((1-q)/(1-e^eps q))^l + q e^{eps l}, a = e^eps - 1 < 1 and s = 1 - e^eps q,
        f'(q) = ((1-q)/s)^l (l a - s)/s + e^{eps l},
    and for q <= 1/2 one has (1-q)/(s e^eps) <= 1/(1-a^2), so where l a < s
        f'(q) >= e^{eps l} (1 - (1 - l a)/(1-a^2)^l) >= 0     (Bernoulli: (1-a^2)^l >= 1 - l a^2),
    i.e. f is non-decreasing on [0, 1/2]: the bound at the upper bound q dominates the bound at
    the true (smaller) probability, which is what Theorem 3's proof needs. For eps >= log 2
    (gamma >= 0.35) the reference's q < 1/2 is not valid (1 - e^eps q can be <= 0 and the
    reference's formula then returns a meaningless value), so the paper's condition is used.

    The choice never changes a result where 1 - e^eps q > 0: for q >= 1/(e^eps + 1) one has
    (1-q)/(1-e^eps q) >= e^eps, hence f(q) >= e^{eps l} and the min with eps l discards it.
    """
    return 0.5 if eps < _LOG2 else 1.0 / (math.exp(eps) + 1.0)


def _log_mgf_from_log_q(log_q: FloatArray, eps: float, moments: FloatArray) -> FloatArray:
    """(..., L) alpha(l) bound for answers whose failure probability is <= exp(log_q) (...,).

    min(eps^2 l(l+1)/2, eps l, log f(q)) where Theorem 3 applies, else the first two terms.
    """
    log_q = np.asarray(log_q, dtype=np.float64)[..., None]
    lam = moments.reshape((1,) * (log_q.ndim - 1) + (-1,))
    cap = _data_independent_log_mgf(eps, lam)
    q = np.exp(log_q)
    applies = q < _q_limit(eps)
    with np.errstate(divide="ignore", invalid="ignore"):
        log1m_q = np.log1p(-q)
        # e^eps q < 1 wherever Theorem 3 applies (q < 1/(e^eps+1), or q < 1/2 with e^eps < 2);
        # elsewhere the value is discarded, so 0 keeps the logarithm finite.
        log1m_eq = np.log1p(-np.where(applies, np.exp(eps + log_q), 0.0))
        log_t_one = log1m_q + lam * (log1m_q - log1m_eq)
        log_t_two = log_q + eps * lam
        log_t = np.logaddexp(log_t_one, log_t_two)
    out: FloatArray = np.where(applies, np.minimum(cap, log_t), cap)
    return out


def _sorted_shift_log_q(votes: IntArray, gamma: float, shifts: IntArray) -> FloatArray:
    """log q of each row after moving s votes from its largest to its second-largest count.

    votes (r, m); shifts (S,) ints >= 0. Returns (r, S). The shifted histogram is
    (c0 - s, c1 + s, c2, ..., c_{m-1}) with c sorted in decreasing order, exactly the vector the
    reference's sens_at_k builds (``counts_sorted``). Lemma 4's q does not depend on the order of
    the classes, so it is computed as term(|v0 - v1|) + sum_{j>=2} term(max(v0, v1) - c_j).
    """
    m = votes.shape[1]
    c = -np.sort(-votes, axis=1)
    v0 = c[:, :1] - shifts[None, :]  # (r, S)
    v1 = c[:, 1:2] + shifts[None, :]
    top = np.maximum(v0, v1)
    first = _log_pr_beats(gamma * np.abs(v0 - v1).astype(np.float64))[..., None]
    rest = _log_pr_beats(gamma * (top[..., None] - c[:, None, 2:]).astype(np.float64))
    terms = np.concatenate([first, rest], axis=-1)
    return np.minimum(logsumexp_rows(terms), math.log1p(-1.0 / m))


def _sens_at_k(votes: IntArray, gamma: float, moment: float, ks: IntArray) -> FloatArray:
    """(r, K) sensitivity at each distance in ks (see lnmax_sens_at_k_2017). No validation."""
    eps = 2.0 * gamma
    lam = np.array([moment])
    if 0.5 * gamma * moment > 1.0:
        # The reference's 0 ("l too large") would understate; no change can exceed cap.
        cap = float(_data_independent_log_mgf(eps, lam)[0])
        return np.full((votes.shape[0], ks.size), cap)
    c = -np.sort(-votes, axis=1)
    gap = (c[:, 0] - c[:, 1])[:, None]  # (r, 1)
    log_q = _sorted_shift_log_q(votes, gamma, np.concatenate([ks, ks + 1]))
    log_mgf = _log_mgf_from_log_q(log_q, eps, lam)[..., 0]
    val, val_changed = log_mgf[:, : ks.size], log_mgf[:, ks.size :]
    out = np.maximum(val_changed - val, 0.0)
    sens: FloatArray = np.where(gap < ks[None, :], 0.0, out)
    return sens


# --------------------------------------------------------------------------- public API


def lnmax_q_2017(votes: npt.ArrayLike, *, noise_eps: float, approx: bool = False) -> FloatArray:
    """Upper bound q on Pr[LNMax answer != plain argmax], one per query, shape (n,).

    [P17] Lemma 4: with Laplace(1/gamma) noise on every count and j* the (first) argmax,

        Pr[M(d) != j*] <= sum_{j != j*} (2 + gamma (n_j* - n_j)) / (4 exp(gamma (n_j* - n_j))),

    capped at 1 - 1/m. Equals the reference's ``compute_q_noisy_max``, computed in log-space.

    ``approx=True`` gives the reference's ``compute_q_noisy_max_approx``: (m - 1) times the term
    of the runner-up. Since (2 + g) e^{-g} decreases in g >= 0, every term is at most the
    runner-up's, so approx >= exact (equal when all non-winning counts are equal): it is a
    looser, still valid, bound. ``noise_eps`` is gamma.
    """
    votes = check_votes(votes)
    gamma = check_positive(noise_eps, "noise_eps")
    check_bool(approx, "approx")
    log_q = _log_q_approx(votes, gamma) if approx else _log_q(votes, gamma)
    q: FloatArray = np.exp(log_q)
    return q


def lnmax_log_mgf(votes: npt.ArrayLike, *, noise_eps: float, moments: npt.ArrayLike) -> FloatArray:
    """Data-dependent bound on the log moments alpha(l) of one LNMax answer, shape (n, L).

    [P17] Theorem 3 (data-dependent) capped by Theorem 2 and the pure-DP bound: with
    eps = 2 gamma and q from :func:`lnmax_q_2017`,

        alpha(l) <= min( eps^2 l (l+1) / 2,  eps l,
                         log((1-q) ((1-q)/(1 - e^eps q))^l + q e^{eps l}) ),

    the last term only where it is valid: q < 1/2 for eps < log 2 (the reference's condition,
    proved in :func:`_q_limit`), else q < 1/(e^eps + 1) (the paper's). Equals the reference's
    ``logmgf_from_counts`` for gamma < log(2)/2 (the reference's own range of use), in log-space
    (the reference's log(t) loses digits when t is close to 1).
    """
    votes = check_votes(votes)
    gamma = check_positive(noise_eps, "noise_eps")
    moments = check_moments(moments)
    return _log_mgf_from_log_q(_log_q(votes, gamma), 2.0 * gamma, moments)


def lnmax_moments_accountant(
    votes: npt.ArrayLike,
    *,
    noise_eps: float,
    delta: float,
    moments: npt.ArrayLike = range(1, 9),
    beta: float | None = None,
) -> dict[str, Any]:
    """The whole 2017 analysis of n LNMax answers ([P17] Section 3, reference ``main()``).

    The log moments of the n answers add up ([A16] Theorem 2, composability), and the tail bound
    ([A16]) gives eps(l) = (sum_i alpha_i(l) - log delta) / l; the epsilon is min_l eps(l).

    Returns a dict with
      ``moments`` (L,), ``total_log_mgf`` (L,) (sum of :func:`lnmax_log_mgf` over queries),
      ``eps_per_moment`` (L,), ``eps`` (float, min over moments; data-dependent, NOT private to
      publish as is), ``moment`` (the minimising l, first on ties), ``optimum_at_largest_moment``
      (bool: the reference warns "may not have used enough values of l"),
      ``data_independent_total_log_mgf`` (L,), ``data_independent_eps_per_moment`` (L,),
      ``data_independent_eps`` (float: n min(eps^2 l(l+1)/2, eps l), the bound that may be
      published without further noise), ``num_queries``.
    With ``beta`` (> 0), also the reference's smooth-sensitivity summary:
      ``total_smoothed_sensitivity`` (L,) (sum over queries of
      :func:`lnmax_smoothed_sensitivity_2017`), ``smoothed_sensitivity_per_moment`` (L,) (that
      divided by l: the smooth sensitivity of eps(l)), ``smooth_sensitivity_eps`` = 2 beta
      log(1/delta) and ``smooth_sensitivity_noise_scale`` = 2 / that (the reference's Laplace
      release of eps(l), [NRS07] Corollary 2.4; see the caveat in :func:`lnmax_sens_at_k_2017`).
    """
    votes = check_votes(votes)
    gamma = check_positive(noise_eps, "noise_eps")
    delta = check_delta(delta)
    moments = check_moments(moments)
    if beta is not None:
        beta = check_positive(beta, "beta")
    n = votes.shape[0]
    eps_answer = 2.0 * gamma
    total = _log_mgf_from_log_q(_log_q(votes, gamma), eps_answer, moments).sum(axis=0)
    eps_per_moment = (total - math.log(delta)) / moments
    best = int(np.argmin(eps_per_moment))
    ind_total = n * _data_independent_log_mgf(eps_answer, moments)
    ind_eps = (ind_total - math.log(delta)) / moments
    out: dict[str, Any] = {
        "moments": moments,
        "total_log_mgf": total,
        "eps_per_moment": eps_per_moment,
        "eps": float(eps_per_moment[best]),
        "moment": float(moments[best]),
        "optimum_at_largest_moment": bool(moments[best] == moments.max()),
        "data_independent_total_log_mgf": ind_total,
        "data_independent_eps_per_moment": ind_eps,
        "data_independent_eps": float(np.min(ind_eps)),
        "num_queries": n,
    }
    if beta is not None:
        total_ss = np.array(
            [_smoothed_sensitivity(votes, gamma, float(l), beta).sum() for l in moments]
        )
        ss_eps = 2.0 * beta * math.log(1.0 / delta)
        out.update(
            {
                "total_smoothed_sensitivity": total_ss,
                "smoothed_sensitivity_per_moment": total_ss / moments,
                "smooth_sensitivity_eps": ss_eps,
                "smooth_sensitivity_noise_scale": 2.0 / ss_eps,
            }
        )
    return out


def lnmax_sens_at_k_2017(
    votes: npt.ArrayLike, *, noise_eps: float, moment: float, k: int | npt.ArrayLike
) -> FloatArray:
    """The reference's sensitivity of alpha(l) at distance k ([P17] Appendix, ``sens_at_k``).

    With c the counts of a row sorted in decreasing order and alpha(l; c) = lnmax_log_mgf:

        sens(k) = 0                                                     if c0 - c1 < k,
        sens(k) = alpha(l; c0-k-1, c1+k+1, c2, ...) - alpha(l; c0-k, c1+k, c2, ...)  otherwise,

    i.e. the change of the moment bound when one more vote moves from the winner to the runner-up
    after k votes have already moved. Returns (n,) for an int ``k``, (n, K) for a 1-D array.

    Differences from the reference, none of which makes a value smaller:

    * The reference checks the gap with the UNSORTED counts (``counts[0] < counts[1] + k``) while
      it shifts the sorted ones, so whenever class 0 is not the winner its result is 0 (or
      depends on an unrelated pair of classes). Here the gap is that of the sorted counts.
    * A difference below 0 (once k > (c0 - c1)/2 the winner flips and moving more votes lowers
      the bound) is reported as 0, since a sensitivity is non-negative.
    * The reference returns 0 when gamma l / 2 > 1 ("l too large"); here the trivial bound
      min(eps^2 l(l+1)/2, eps l) is returned (every moment bound lies in [0, that]).
    Where the reference's class 0 is the winner and gamma l / 2 <= 1, values are equal.

    Caveat: this is a heuristic, not a proof-backed local sensitivity: it only considers moving
    votes from the winner to the runner-up, not every neighbouring histogram. It is provided to
    reproduce [P17]. For a rigorous sanitized release use :mod:`pate.analysis.sanitized_release` ([P18]).
    """
    votes = check_votes(votes)
    gamma = check_positive(noise_eps, "noise_eps")
    moment = check_moment(moment)
    ks, scalar = check_distances(k)
    out = _sens_at_k(votes, gamma, moment, ks)
    return out[:, 0] if scalar else out


def _smoothed_sensitivity(votes: IntArray, gamma: float, moment: float, beta: float) -> FloatArray:
    """(n,) max_{0 <= k <= max count} e^{-beta k} sens(k), rows processed in chunks."""
    n, m = votes.shape
    c = -np.sort(-votes, axis=1)
    out: FloatArray = np.zeros(n)
    if n == 0:
        return out
    # sens(k) = 0 for k > c0 - c1, so only k <= the largest gap matters.
    k_max = int((c[:, 0] - c[:, 1]).max())
    ks = np.arange(k_max + 1, dtype=np.int64)
    discount = np.exp(-beta * ks.astype(np.float64))[None, :]
    chunk = max(1, _CHUNK_ELEMENTS // (2 * ks.size * m))
    for start in range(0, n, chunk):
        part = votes[start : start + chunk]
        out[start : start + chunk] = np.max(discount * _sens_at_k(part, gamma, moment, ks), axis=1)
    floored: FloatArray = np.maximum(out, 0.0)
    return floored


def lnmax_smoothed_sensitivity_2017(
    votes: npt.ArrayLike, *, noise_eps: float, moment: float, beta: float
) -> FloatArray:
    """The reference's beta-smooth sensitivity of alpha(l), one per query, shape (n,).

    SS_beta = max_{0 <= k <= max count} e^{-beta k} sens(k) with sens from
    :func:`lnmax_sens_at_k_2017` ([NRS07] Definition 2.1 applied to [P17]'s per-distance
    sensitivities; reference ``smoothed_sens``). The reference stops at the first k >= 1 with
    sens(k) == 0; after that point sens(k) <= 0 in the reference (the gap has closed or the
    winner flipped), so taking the max over all k gives the same value, and never a smaller one.
    A heuristic from [P17], not a proof-backed bound (:func:`lnmax_sens_at_k_2017`).
    """
    votes = check_votes(votes)
    gamma = check_positive(noise_eps, "noise_eps")
    moment = check_moment(moment)
    beta = check_positive(beta, "beta")
    return _smoothed_sensitivity(votes, gamma, moment, beta)
