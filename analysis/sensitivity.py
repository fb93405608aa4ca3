"""Smooth sensitivity of the data-dependent RDP of [P18] (Section 4 / Appendix C).

* local sensitivities LS(d): the largest change of one query's RDP (at a fixed order lambda)
  between two neighbouring vote histograms, over all histograms within distance d of the
  actual one ([P18] Algorithms 3-5, Propositions 13-14);
* the beta-smooth sensitivity SS_beta = max_d e^{-beta d} LS(d) (Nissim, Raskhodnikova, Smith
  2007), the RDP cost of the GNSS release ([P18] Theorem 23) and conditions C5/C6 under which the
  local sensitivity analysis applies. The release itself is :mod:`pate.analysis.sanitized_release`.

Symbols: lambda (``order``) a Renyi order > 1; sigma2 the GNMax noise; T (``threshold``) and sigma1
the threshold check; beta > 0 the smoothness parameter (lambda < 1/(2 beta)); sigma_ss the
multiplier of the smooth-sensitivity noise; q the probability bound of Proposition 7;
q0 the point above which the data-independent bound is used; q1 = BL(q0); m classes;
N (``num_teachers``) teachers; d a distance between vote histograms (0..N-1).

Differences from the reference code (tensorflow/privacy research/pate_2018) are deliberate and
noted where they occur; none makes a bound smaller.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
from scipy.optimize import brentq, minimize_scalar
from scipy.special import erfc, erfcinv, log_ndtr

from pate.analysis.arrays import FloatArray, IntArray
from pate.analysis.errors import InputError
from pate.analysis.rdp import (
    gnmax_log_q_unchecked,
    logsumexp_rows,
    threshold_rdp_from_max,
    top_votes,
    unique_apply,
)
from pate.analysis.validation import (
    check_baseline,
    check_int,
    check_nonnegative,
    check_order,
    check_orders,
    check_positive,
    check_votes,
)

# Below this log q, exp(log q) underflows or erfcinv loses all precision. BU and beta are
# non-decreasing in q (conditions C5/C6), so evaluating BU at this larger q only overstates LS.
_LOG_Q_FLOOR = -700.0


# --------------------------------------------------------------------------- GNMax pieces


def _data_dependent_bound(sigma: float, log_q: FloatArray | np.float64, order: float) -> FloatArray:
    """Theorem 6 of [P18] at one order, without checking its preconditions (callers compare
    log q with log q0, below which they hold)."""
    variance = sigma**2
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        mu2 = sigma * np.sqrt(-log_q)
        mu1 = mu2 + 1.0
        eps1 = mu1 / variance
        eps2 = mu2 / variance
        log1q = np.log1p(-np.exp(log_q))
        log_a = (order - 1.0) * (log1q - np.log1p(-np.exp((log_q + eps2) * (1.0 - 1.0 / mu2))))
        log_b = (order - 1.0) * (eps1 - log_q / (mu1 - 1.0))
        bound: FloatArray = np.logaddexp(log1q + log_a, log_q + log_b) / (order - 1.0)
    return bound


@functools.lru_cache(maxsize=4096)
def _log_q0(sigma: float, order: float) -> float:
    def valid(log_q: float) -> bool:  # Theorem 6's range, Lemma 9 of [P18]
        mu2 = sigma * math.sqrt(-log_q)
        mu1 = mu2 + 1.0
        if mu1 < order or mu2 <= 1.0:
            return False
        eps2 = mu2 / sigma**2
        return log_q <= (mu2 - 1.0) * eps2 - mu2 * math.log(mu1 / (mu1 - 1.0) * mu2 / (mu2 - 1.0))

    def dep_minus_ind(log_q: float) -> float:
        return float(_data_dependent_bound(sigma, np.float64(log_q), order)) - order / sigma**2

    upper = min(-((1.0 + 1.0 / sigma) ** 2), -(((order - 0.99) / sigma) ** 2), -1.0 / sigma**2)
    if not valid(upper):
        raise InputError(
            f"no data-dependent GNMax bound exists at sigma={sigma!r}, order={order!r}"
        )
    if dep_minus_ind(upper) < 0:
        return upper
    lower = 2.0 * upper
    while dep_minus_ind(lower) > 0:
        lower *= 1.5
        if lower < -1e4:
            raise InputError(f"cannot bracket log q0 at sigma={sigma!r}, order={order!r}")
    root: float = brentq(dep_minus_ind, lower, upper, full_output=False)
    if not valid(root):
        raise InputError(f"log q0 at sigma={sigma!r}, order={order!r} is outside Theorem 6's range")
    return float(root)


def gnmax_log_q0(*, sigma: float, order: float) -> float:
    """log q0: above it the data-independent bound lambda/sigma^2 is used for GNMax ([P18] C.2).

    Root of (Theorem 6 bound at q) = lambda/sigma^2, bracketed below the natural upper bound
    min(-(1+1/sigma)^2, -((lambda-.99)/sigma)^2, -1/sigma^2) and found with Brent's method
    (tolerance 2e-12, as the reference).
    """
    return _log_q0(check_positive(sigma, "sigma"), check_order(order))


def _bl(q: FloatArray | np.float64, sigma: float, m: int) -> FloatArray:
    """BL(q): the smallest q of a neighbouring histogram ([P18] Proposition 13)."""
    bl: FloatArray = (m - 1) / 2.0 * erfc(1.0 / sigma + erfcinv(2.0 * q / (m - 1)))
    return bl


def _bu(q: FloatArray, sigma: float, m: int) -> FloatArray:
    """BU(q): the largest q of a neighbouring histogram ([P18] Proposition 13)."""
    bu: FloatArray = np.minimum(
        1.0, (m - 1) / 2.0 * erfc(-1.0 / sigma + erfcinv(2.0 * q / (m - 1)))
    )
    return bu


def _log_q1(sigma: float, order: float, m: int) -> float:
    return math.log(float(_bl(np.float64(math.exp(_log_q0(sigma, order))), sigma, m)))


def _rdp_gnmax_at(sigma: float, log_q: FloatArray, order: float, log_q0: float) -> FloatArray:
    """RDP of GNMax at ``order`` for bound q: Theorem 6 below q0, lambda / sigma^2 from q0 on."""
    out: FloatArray = np.full(log_q.shape, order / sigma**2)
    below = log_q < log_q0
    if below.any():
        out[below] = _data_dependent_bound(sigma, log_q[below], order)
    return out


def _ls_gnmax_from_log_q(log_q: FloatArray, sigma: float, m: int, order: float) -> FloatArray:
    """[P18] Algorithm 3: LS of the GNMax RDP at a histogram with bound q (Proposition 13)."""
    log_q0 = _log_q0(sigma, order)
    log_q1 = _log_q1(sigma, order, m)
    log_q = np.where((log_q1 <= log_q) & (log_q <= log_q0), log_q1, log_q)
    beta = _rdp_gnmax_at(sigma, log_q, order, log_q0)
    q = np.exp(np.maximum(log_q, _LOG_Q_FLOOR))
    with np.errstate(divide="ignore"):
        log_bu = np.log(_bu(q, sigma, m))
        log_bl = np.log(_bl(q, sigma, m))
    beta_bu = _rdp_gnmax_at(sigma, log_bu, order, log_q0)
    # BL underflowing to 0 means beta(BL) is ~0: using 0 overstates LS (safe).
    beta_bl = np.where(np.isneginf(log_bl), 0.0, _rdp_gnmax_at(sigma, log_bl, order, log_q0))
    ls: FloatArray = np.maximum(beta_bu - beta, beta - beta_bl)
    return ls


def _log_q_from_gaps(gaps: IntArray, log_tail: FloatArray) -> FloatArray:
    """Proposition 7 from the winner's integer vote gaps to the m - 1 other classes (last axis),
    the Gaussian tails looked up by gap: log_tail[g] = log Phi_c(g / (sqrt(2) sigma))."""
    log_q = logsumexp_rows(log_tail[gaps])
    capped: FloatArray = np.minimum(log_q, math.log(1.0 - 1.0 / (gaps.shape[-1] + 1)))
    return capped


def validate_ls_args(
    votes: npt.ArrayLike, num_teachers: int, order: float
) -> tuple[IntArray, int, float]:
    counts = check_votes(votes)
    num_teachers = check_int(num_teachers, "num_teachers", minimum=1)
    if counts.shape[0] and int(counts[0].sum()) != num_teachers:
        raise InputError(
            f"votes rows sum to {int(counts[0].sum())} but num_teachers is {num_teachers}; "
            "pass the number of teachers that voted"
        )
    return counts, num_teachers, check_order(order)


def _ls_gnmax_walk(
    votes: IntArray,
    num_teachers: int,
    sigma: float,
    order: float,
    log_q: FloatArray,
) -> tuple[float, IntArray, IntArray, FloatArray]:
    """[P18] Algorithms 4-5 for every query at once.

    Returns (plateau, rows, distances, values): LS_i(d) = values[j] where (rows[j], distances[j])
    = (i, d), and the plateau value everywhere else.
    """
    m = votes.shape[1]
    log_q0 = _log_q0(sigma, order)
    log_q1 = _log_q1(sigma, order, m)
    plateau = float(_ls_gnmax_from_log_q(np.array([log_q1]), sigma, m, order)[0])
    log_tail: FloatArray = log_ndtr(
        -(np.arange(num_teachers + 1, dtype=np.float64) / math.sqrt(2.0 * sigma**2))
    )
    in_plateau = (log_q1 <= log_q) & (log_q <= log_q0)
    # Walk every query, recording (row, distance, log q); Algorithm 3 is then evaluated once, on
    # the distinct log q values only. Rows above the plateau move votes from the runner-up to the
    # leader (q decreases towards q0), rows below it from the leader to the runner-up (q increases
    # towards q1).
    visited_rows = [np.nonzero(~in_plateau)[0]]
    visited_distance = [np.zeros(visited_rows[0].size, dtype=np.int64)]
    visited_log_q = [log_q[~in_plateau]]
    current = -np.sort(-votes, axis=1)
    for walk, bound in ((_walk_towards_q0, log_q0), (_walk_towards_q1, log_q1)):
        rows, distance, lq = walk(current, log_q, bound, log_tail, num_teachers)
        visited_rows.append(rows)
        visited_distance.append(distance)
        visited_log_q.append(lq)
    values = unique_apply(
        np.concatenate(visited_log_q), lambda u: _ls_gnmax_from_log_q(u, sigma, m, order)
    )
    return plateau, np.concatenate(visited_rows), np.concatenate(visited_distance), values


_WALK_CHUNK = 16


def _walk_towards_q0(
    current: IntArray, log_q: FloatArray, log_q0: float, log_tail: FloatArray, num_teachers: int
) -> tuple[IntArray, IntArray, FloatArray]:
    """Rows with log q > log q0: each step moves one vote from the runner-up to the leader and
    restores the non-increasing order; continue while log q > log q0 and a runner-up vote is left."""
    rows = np.nonzero(log_q > log_q0)[0]
    block, lq = current[rows].copy(), log_q[rows].copy()
    out_rows, out_distance, out_log_q = [], [], []
    distance = 0
    while rows.size and distance + 1 < num_teachers:
        keep = (lq > log_q0) & (block[:, 1] > 0)
        rows, block = rows[keep], block[keep]
        if rows.size == 0:
            break
        distance += 1
        block[:, 0] += 1
        # Lowering the runner-up by one and re-sorting equals lowering the last entry of its run
        # of ties: the row stays sorted without a sort.
        last_tie = np.count_nonzero(block[:, 1:] == block[:, 1:2], axis=1)
        block[np.arange(block.shape[0]), last_tie] -= 1
        lq = _log_q_from_gaps(block[:, :1] - block[:, 1:], log_tail)
        out_rows.append(rows)
        out_distance.append(np.full(rows.size, distance, dtype=np.int64))
        out_log_q.append(lq)
    return _concat(out_rows, out_distance, out_log_q)


def _walk_towards_q1(
    current: IntArray, log_q: FloatArray, log_q1: float, log_tail: FloatArray, num_teachers: int
) -> tuple[IntArray, IntArray, FloatArray]:
    """Rows with log q < log q1: step d moves d votes from the leader to the runner-up (the order
    cannot change while log q < log q1), so the gaps after d steps are g1 - 2d and g_j - d. Steps
    are evaluated in chunks; a row continues while its previous log q is below log q1."""
    rows = np.nonzero(log_q < log_q1)[0]
    gaps0 = current[rows, :1] - current[rows, 1:]
    out_rows, out_distance, out_log_q = [], [], []
    start = 0
    while rows.size and start + 1 < num_teachers:
        steps = np.arange(start + 1, min(start + _WALK_CHUNK, num_teachers - 1) + 1)
        gaps = gaps0[:, None, :] - steps[None, :, None]
        gaps[:, :, 0] -= steps[None, :]
        # Steps beyond a row's stopping point are computed and discarded: clip their gaps.
        np.clip(gaps, 0, num_teachers, out=gaps)
        lq = _log_q_from_gaps(gaps, log_tail)
        below = lq < log_q1
        taken = np.ones(below.shape, dtype=bool)
        taken[:, 1:] = np.logical_and.accumulate(below[:, :-1], axis=1)
        r, k = np.nonzero(taken)
        out_rows.append(rows[r])
        out_distance.append(steps[k])
        out_log_q.append(lq[r, k])
        go_on = taken[:, -1] & below[:, -1]
        rows, gaps0 = rows[go_on], gaps0[go_on]
        start = int(steps[-1])
    return _concat(out_rows, out_distance, out_log_q)


def _concat(
    rows: list[IntArray], distance: list[IntArray], log_q: list[FloatArray]
) -> tuple[IntArray, IntArray, FloatArray]:
    """A walk's visited (rows, distances, log q), each list concatenated (empty if none)."""
    if not rows:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0)
    return np.concatenate(rows), np.concatenate(distance), np.concatenate(log_q)


def local_sensitivity_gnmax(
    votes: npt.ArrayLike, *, num_teachers: int, sigma: float, order: float
) -> FloatArray:
    """Local sensitivity at distance d of each query's GNMax RDP at ``order``, shape (n, N).

    [P18] Algorithms 4-5 in O(N m) per query: move votes between the two leading classes in
    the direction that brings q towards the plateau [q1, q0] (where LS is maximal), evaluating
    Algorithm 3 at each distance; beyond that point LS(d) is the plateau value. All queries walk
    in lock-step, and the Gaussian tails are looked up by integer vote gap.
    """
    counts, num_teachers, order = validate_ls_args(votes, num_teachers, order)
    sigma = check_positive(sigma, "sigma")
    log_q = gnmax_log_q_unchecked(counts, sigma)
    plateau, rows, distances, values = _ls_gnmax_walk(counts, num_teachers, sigma, order, log_q)
    result: FloatArray = np.full((counts.shape[0], num_teachers), plateau)
    result[rows, distances] = values
    return result


def weighted_ls_gnmax_sum(
    votes: IntArray,
    weights: FloatArray,
    num_teachers: int,
    sigma: float,
    order: float,
    log_q: FloatArray,
) -> FloatArray:
    """sum_i weights_i * LS_gnmax_i(d), shape (N,), without forming the (n, N) matrix; ``log_q``
    the votes' :func:`gnmax_log_q_unchecked` at ``sigma``."""
    plateau, rows, distances, values = _ls_gnmax_walk(votes, num_teachers, sigma, order, log_q)
    total: FloatArray = np.full(num_teachers, plateau * float(np.sum(weights)))
    total += np.bincount(
        distances, weights=weights[rows] * (values - plateau), minlength=num_teachers
    )
    return total


def threshold_ls_sum(
    votes: IntArray,
    num_teachers: int,
    threshold: float,
    sigma: float,
    order: float,
    baseline: FloatArray | None,
) -> FloatArray:
    """sum_i LS_threshold_i(d), shape (N,): LS depends only on the max vote."""
    current = np.clip(top_votes(votes, baseline), 0, num_teachers).astype(np.int64)
    mass = np.bincount(current, minlength=num_teachers + 1)
    present = np.nonzero(mass)[0]
    table = _ls_threshold_table(num_teachers, threshold, sigma, order, present)
    total: FloatArray = mass[present] @ table
    return total


# --------------------------------------------------------------------------- threshold pieces


@functools.lru_cache(maxsize=256)
def _threshold_ls_by_max_vote(
    num_teachers: int, threshold: float, sigma: float, order: float
) -> FloatArray:
    """LS of the threshold RDP at each max vote v = 0..N (a neighbour moves the max by <= 1)."""
    max_votes = np.arange(num_teachers + 1, dtype=np.float64)
    rdp = threshold_rdp_from_max(max_votes, threshold, sigma, np.array([order]))[:, 0]
    steps = np.abs(np.diff(rdp))  # steps[v] = |rdp[v+1] - rdp[v]|
    ls: FloatArray = np.zeros(num_teachers + 1)
    ls[:-1] = steps
    ls[1:] = np.maximum(ls[1:], steps)
    ls.setflags(write=False)
    return ls


def local_sensitivity_threshold(
    votes: npt.ArrayLike,
    *,
    num_teachers: int,
    threshold: float,
    sigma: float,
    order: float,
    baseline: npt.ArrayLike | None = None,
) -> FloatArray:
    """Local sensitivity at distance d of each query's threshold-check RDP, shape (n, N).

    The threshold RDP depends on the votes only through the (rounded) max vote c, which moves by
    at most one between neighbours; LS(d) = max over c' in {c - d, c + d} within [0, N] of the
    largest one-step change of the RDP at c'.

    Difference from the reference: the reference fills d < max(c, N - c) only and leaves
    LS(max(c, N - c)) = 0 although the max vote 0 or N is reachable at that distance; here that
    entry is filled too (it can only raise the smooth sensitivity).
    """
    counts, num_teachers, order = validate_ls_args(votes, num_teachers, order)
    threshold = check_nonnegative(threshold, "threshold")
    sigma = check_positive(sigma, "sigma")
    base = None if baseline is None else check_baseline(baseline, counts.shape)
    current = np.clip(top_votes(counts, base), 0, num_teachers).astype(np.int64)
    return _ls_threshold_table(num_teachers, threshold, sigma, order, current)


def _ls_threshold_table(
    num_teachers: int, threshold: float, sigma: float, order: float, max_votes: IntArray
) -> FloatArray:
    """LS_threshold(d) for queries whose (rounded) max vote is each of ``max_votes``: (len, N)."""
    ls_by_vote = _threshold_ls_by_max_vote(num_teachers, threshold, sigma, order)
    distance = np.arange(num_teachers)
    up = max_votes[:, None] + distance[None, :]
    down = max_votes[:, None] - distance[None, :]
    ls_up = np.where(up <= num_teachers, ls_by_vote[np.minimum(up, num_teachers)], 0.0)
    ls_down = np.where(down >= 0, ls_by_vote[np.maximum(down, 0)], 0.0)
    ls: FloatArray = np.maximum(ls_up, ls_down)
    return ls


# --------------------------------------------------------------------------- smooth sensitivity


def smooth_sensitivity(local_sensitivity: npt.ArrayLike, *, beta: float) -> float | FloatArray:
    """beta-smooth sensitivity max_d e^{-beta d} LS(d) (Nissim et al. 2007; [P18] Definition 11).

    ``local_sensitivity`` has shape (..., D) with d = 0..D-1 on the last axis; returns shape (...)
    (a float for a single LS curve).
    """
    beta = check_nonnegative(beta, "beta")
    ls = np.asarray(local_sensitivity, dtype=np.float64)
    if ls.ndim == 0 or ls.shape[-1] == 0:
        raise InputError(f"local_sensitivity must have a non-empty last axis, got shape {ls.shape}")
    if np.any(np.isnan(ls)) or np.any(ls < 0):
        raise InputError("local_sensitivity must be non-negative and not NaN")
    out: FloatArray = np.max(ls * np.exp(-beta * np.arange(ls.shape[-1])), axis=-1)
    return float(out) if ls.ndim == 1 else out


def gnss_rdp(*, beta: float, sigma_ss: float, order: float) -> float:
    """RDP at ``order`` of releasing f(D) + SS_beta(D) * sigma_ss * N(0, 1) ([P18] Theorem 23):

        lambda e^{2 beta} / sigma_ss^2 + (beta lambda - log(1 - 2 lambda beta) / 2) / (lambda - 1),

    valid for 1 < lambda < 1 / (2 beta).
    """
    beta = check_nonnegative(beta, "beta")
    order = check_order(order)
    if np.isposinf(sigma_ss) and beta == 0:
        return 0.0
    sigma_ss = check_positive(sigma_ss, "sigma_ss")
    if beta > 0 and not order < 1.0 / (2.0 * beta):
        raise InputError(
            f"order must be < 1/(2 beta) = {1.0 / (2.0 * beta)!r} for the GNSS bound, "
            f"got order={order!r} with beta={beta!r}; lower beta or the order"
        )
    return order * math.exp(2.0 * beta) / sigma_ss**2 + (
        -0.5 * math.log(1.0 - 2.0 * order * beta) + beta * order
    ) / (order - 1.0)


def gnss_rdp_curve(*, beta: float, sigma_ss: float, orders: npt.ArrayLike) -> FloatArray:
    """:func:`gnss_rdp` at every order of ``orders``, shape (k,): Theorem 23 of [P18] below
    1/(2 beta), +inf at and above it (the release gives no RDP guarantee there)."""
    beta = check_positive(beta, "beta")
    sigma_ss = check_positive(sigma_ss, "sigma_ss")
    return np.array(
        [
            gnss_rdp(beta=beta, sigma_ss=sigma_ss, order=o) if o < 1.0 / (2.0 * beta) else np.inf
            for o in check_orders(orders)
        ]
    )


# --------------------------------------------------------------------------- conditions C5, C6


def _beta_of_q(q: FloatArray, sigma: float, order: float) -> FloatArray:
    return _data_dependent_bound(sigma, np.log(q), order)


def _is_non_decreasing(fn: Callable[[FloatArray], FloatArray], lower: float, upper: float) -> bool:
    """Numerical check that fn is non-decreasing on (lower, upper): the minimum of a central
    finite-difference derivative (bounded scalar minimisation, as the reference) and a dense
    log-spaced grid must both be >= 0 (up to rounding)."""

    def derivative(x: float) -> float:
        h = max(abs(x) * 1e-6, 1e-300)
        return float((fn(np.array([x + h])) - fn(np.array([x - h])))[0] / (2 * h))

    grid = np.geomspace(max(lower, 1e-300), upper, 2001)
    values = fn(grid)
    if np.any(np.diff(values) < -1e-12 * np.maximum(1.0, np.abs(values[1:]))):
        return False
    res = minimize_scalar(derivative, bounds=(grid[1], grid[-2]), method="bounded")
    return bool(res.fun >= -1e-9)


def check_conditions(*, sigma: float, num_classes: int, order: float) -> tuple[bool, bool]:
    """Conditions C5 and C6 of [P18] (Appendix B.4.2), which Proposition 13's local sensitivity
    needs: C5, beta(q) is non-decreasing on (0, q0); C6, beta(BU(q)) - beta(q) is non-decreasing
    on (0, BL(q0)). Checked numerically (the reference differentiates symbolically with sympy and
    minimises numerically; both are numerical checks)."""
    sigma = check_positive(sigma, "sigma")
    m = check_int(num_classes, "num_classes", minimum=2)
    order = check_order(order)
    q0 = math.exp(_log_q0(sigma, order))
    cond5 = _is_non_decreasing(lambda q: _beta_of_q(q, sigma, order), 1e-300, q0)
    if not cond5:
        return False, False
    bl_q0 = float(_bl(np.float64(q0), sigma, m))
    cond6 = _is_non_decreasing(
        lambda q: _beta_of_q(_bu(q, sigma, m), sigma, order) - _beta_of_q(q, sigma, order),
        1e-300,
        bl_q0,
    )
    return True, bool(cond6)
