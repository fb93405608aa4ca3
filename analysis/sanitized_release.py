"""The sanitized (private) release of the data-dependent epsilon of [P18] through the GNSS
mechanism ([P18] Section 4 / Appendix C): Gaussian noise scaled by the beta-smooth sensitivity of
the RDP (:mod:`pate.analysis.sensitivity`), and the reference's (non-private) parameter search.

Symbols as in :mod:`pate.analysis.sensitivity`. Differences from the reference code
(tensorflow/privacy research/pate_2018) are deliberate and noted where they occur; none makes a
bound smaller.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from pate.analysis.arrays import BoolArray, FloatArray, IntArray
from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.rdp import (
    conversion_term,
    gnmax_log_q,
    gnmax_log_q_unchecked,
    rdp_gaussian_from_log_q,
    threshold_log_pr,
    threshold_rdp_from_max,
    top_votes,
    unique_weighted_sum,
)
from pate.analysis.sensitivity import (
    check_conditions,
    gnss_rdp,
    smooth_sensitivity,
    threshold_ls_sum,
    validate_ls_args,
    weighted_ls_gnmax_sum,
)
from pate.analysis.validation import (
    check_baseline,
    check_delta,
    check_mask,
    check_nonnegative,
    check_positive,
)

# --------------------------------------------------------------------------- the parameter search


def is_data_independent_step2(num_teachers: int, m: int, sigma: float, order: float) -> bool:
    unanimous = np.zeros((1, m), dtype=np.int64)
    unanimous[0, 0] = num_teachers
    log_q = gnmax_log_q(unanimous, sigma=sigma)
    dep = rdp_gaussian_from_log_q(log_q, sigma, np.array([order]))[0, 0]
    return bool(np.isclose(dep, order / sigma**2))


def is_data_independent_step1(
    num_teachers: int, threshold: float, sigma: float, order: float
) -> bool:
    extremes = np.array([0.0, float(num_teachers)])
    dep = threshold_rdp_from_max(extremes, threshold, sigma, np.array([order]))[:, 0]
    return bool(np.all(np.isclose(dep, order / (2**0.5 * sigma) ** 2)))


def _run_cost_and_ls(
    votes: IntArray,
    num_teachers: int,
    threshold: float | None,
    sigma1: float | None,
    sigma2: float,
    order: float,
    baseline: FloatArray | None,
    step2_weights: FloatArray,
) -> tuple[float, FloatArray, bool, bool]:
    """RDP at ``order`` and its local sensitivity at every distance, for a Confident-GNMax run in
    which query i pays the threshold check and ``step2_weights[i]`` times its GNMax step (1/0 for
    the realised cost of answered/unanswered queries, Pr[answered] for the expected cost).

    Returns (rdp_total, ls_total (N,), data_independent_step1, data_independent_step2). A step whose
    data-dependent bound never beats the data-independent one at this order is charged the
    data-independent cost and contributes no local sensitivity.
    """
    orders = np.array([order])
    ls_total: FloatArray = np.zeros(num_teachers)
    ind1, rdp1 = True, 0.0  # plain GNMax (threshold and sigma1 None): no threshold check at all
    if threshold is not None and sigma1 is not None:
        ind1 = is_data_independent_step1(num_teachers, threshold, sigma1, order)
        if ind1:
            rdp1 = votes.shape[0] * (order / (2**0.5 * sigma1) ** 2)
        else:
            rdp1 = float(
                unique_weighted_sum(
                    top_votes(votes, baseline),
                    np.ones(votes.shape[0]),
                    lambda u: threshold_rdp_from_max(u, threshold, sigma1, orders),
                )[0]
            )
            ls_total += threshold_ls_sum(votes, num_teachers, threshold, sigma1, order, baseline)
    ind2 = is_data_independent_step2(num_teachers, votes.shape[1], sigma2, order)
    if ind2:
        rdp2 = float(np.sum(step2_weights)) * (order / sigma2**2)
    else:
        log_q = gnmax_log_q_unchecked(votes, sigma2)
        rdp2 = float(
            unique_weighted_sum(
                log_q, step2_weights, lambda u: rdp_gaussian_from_log_q(u, sigma2, orders)
            )[0]
        )
        ls_total += weighted_ls_gnmax_sum(votes, step2_weights, num_teachers, sigma2, order, log_q)
    return rdp1 + rdp2, ls_total, ind1, ind2


def search_smooth_sensitivity_parameters(
    votes: npt.ArrayLike,
    *,
    threshold: float,
    sigma1: float,
    sigma2: float,
    order: float,
    num_teachers: int,
    delta: float,
) -> dict[str, Any]:
    """The reference's search for the smooth-sensitivity parameters (``smooth_sensitivity_table``).

    **Not private**: it looks at the votes to choose beta and sigma_ss, and it uses the
    *expected* (Pr[answered]-weighted) cost and local sensitivity. Use it only to compare with
    published numbers; a real release fixes order, beta and sigma_ss in advance
    (:func:`release_sanitized_epsilon`).

    For beta in arange(.3/lambda, .495/lambda, .01/lambda): SS = SS_beta(sum_i LS_thr_i +
    p_i LS_gnmax_i), sigma_ss = (lambda e^{2 beta} / SS)^{1/3}, and the cost rdp + GNSS(beta,
    sigma_ss) + 2 SS sigma_ss; the first beta of least cost wins.

    Returns a dict: beta, smooth_sensitivity, sigma_ss, eps_before (rdp + log(1/delta)/(lambda-1)),
    eps_after (eps_before + GNSS cost), rdp (the expected RDP at ``order``), expected_answered,
    data_independent_step1, data_independent_step2.
    """
    counts, num_teachers, order = validate_ls_args(votes, num_teachers, order)
    threshold = check_nonnegative(threshold, "threshold")
    sigma1 = check_positive(sigma1, "sigma1")
    sigma2 = check_positive(sigma2, "sigma2")
    delta = check_delta(delta)
    pr = np.exp(threshold_log_pr(top_votes(counts, None), threshold, sigma1))
    rdp_total, ls_total, ind1, ind2 = _run_cost_and_ls(
        counts, num_teachers, threshold, sigma1, sigma2, order, None, pr
    )
    eps_before = rdp_total + conversion_term(order=order, delta=delta)
    result: dict[str, Any] = {
        "rdp": rdp_total,
        "expected_answered": float(pr.sum()),
        "eps_before": eps_before,
        "data_independent_step1": ind1,
        "data_independent_step2": ind2,
    }
    if ind1 and ind2:
        result.update(beta=0.0, smooth_sensitivity=0.0, sigma_ss=math.inf, eps_after=eps_before)
        return result
    betas = np.arange(0.3 / order, 0.495 / order, 0.01 / order)
    decay = np.exp(-betas[:, None] * np.arange(num_teachers)[None, :])
    ss = np.max(ls_total[None, :] * decay, axis=1)
    sigma_ss = (order * np.exp(2.0 * betas) / ss) ** (1.0 / 3.0)
    gnss = order * np.exp(2.0 * betas) / sigma_ss**2 + (
        -0.5 * np.log(1.0 - 2.0 * order * betas) + betas * order
    ) / (order - 1.0)
    cost = rdp_total + gnss + 2.0 * ss * sigma_ss
    best = int(np.argmin(cost))
    result.update(
        beta=float(betas[best]),
        smooth_sensitivity=float(ss[best]),
        sigma_ss=float(sigma_ss[best]),
        eps_after=eps_before + float(gnss[best]),
    )
    return result


# --------------------------------------------------------------------------- private release


class SanitizedRelease(dict[str, Any]):
    """Result of :func:`release_sanitized_epsilon` (a dict, JSON-serialisable)."""


class NormalSource(Protocol):
    """Where :func:`release_sanitized_epsilon` draws its one N(0, 1) from: a numpy Generator or
    ``pate.core.rng.SecureGenerator``."""

    def normal(self, loc: float, scale: float) -> float: ...


def _check_threshold_check(
    threshold: float | None, sigma1: float | None
) -> tuple[float | None, float | None]:
    """(threshold, sigma1) of Confident GNMax checked, or (None, None) for plain GNMax."""
    if (threshold is None) != (sigma1 is None):
        raise InputError(
            "threshold and sigma1 go together: both for Confident GNMax, neither for "
            f"plain GNMax (got threshold={threshold!r}, sigma1={sigma1!r})"
        )
    if threshold is None or sigma1 is None:
        return None, None
    return check_nonnegative(threshold, "threshold"), check_positive(sigma1, "sigma1")


def release_sanitized_epsilon(
    votes: npt.ArrayLike,
    *,
    threshold: float | None,
    sigma1: float | None,
    sigma2: float,
    answered: npt.ArrayLike,
    order: float,
    beta: float,
    sigma_ss: float,
    delta: float,
    num_teachers: int,
    rng: NormalSource,
    baseline: npt.ArrayLike | None = None,
    conversion: str = "classic",
) -> SanitizedRelease:
    """Release the data-dependent epsilon of a Confident-GNMax run privately (GNSS, [P18] §4.2).

    ``order``, ``beta`` and ``sigma_ss`` must be fixed **before** looking at the votes. Released:

        rdp_noisy = rdp(lambda) + SS_beta * sigma_ss * Z,   Z ~ N(0, 1) drawn from ``rng``,

    where rdp(lambda) is the *realised* data-dependent RDP at ``order`` (threshold check for every
    query, GNMax for the answered ones) and SS_beta the beta-smooth sensitivity of that sum (the
    sum of the per-query local sensitivities bounds the sum's). The release itself costs
    gnss_rdp(beta, sigma_ss, order) at the same order, so the total (eps, delta) statement is

        eps_sanitized = rdp_noisy + gnss_rdp + log(1/delta)/(lambda - 1)

    with ``conversion="classic"`` ([P18]); ``conversion="tight"`` replaces the last term by the
    smaller log(1-1/lambda) - (log delta + log lambda)/(lambda-1) ([CKS20] Proposition 12, [B20]
    Theorem 21: any RDP guarantee converts so). Plain GNMax: ``threshold=None, sigma1=None``.

    Falls back to the data-independent cost -- nothing private to sanitize -- when neither step
    has a data-dependent bound at this order, or when conditions C5/C6 fail (the local
    sensitivity analysis does not apply); ``fallback`` then says why.

    Returns a dict with eps_sanitized, eps_sanitized_upper_2std (eps_sanitized + 2 * noise std: a
    conservative figure), eps_data_independent (at the same order), rdp_gnss, noise_std,
    smooth_sensitivity, order, beta, sigma_ss, delta, answered, queries, fallback.
    """
    counts, num_teachers, order = validate_ls_args(votes, num_teachers, order)
    threshold, sigma1 = _check_threshold_check(threshold, sigma1)
    sigma2 = check_positive(sigma2, "sigma2")
    mask = check_mask(answered, counts.shape[0], "answered")
    beta = check_positive(beta, "beta")
    sigma_ss = check_positive(sigma_ss, "sigma_ss")
    delta = check_delta(delta)
    base_votes = None if baseline is None else check_baseline(baseline, counts.shape)
    if not order < 1.0 / (2.0 * beta):
        raise InputError(
            f"order must be < 1/(2 beta) = {1.0 / (2.0 * beta)!r}, got order={order!r} "
            f"with beta={beta!r}; choose beta < 1/(2 order) in advance"
        )
    if not hasattr(rng, "normal"):
        raise InputTypeError(
            "rng must be a numpy Generator (or a generator-like object with normal())"
        )
    return _sanitized_release(
        counts,
        mask,
        base_votes,
        _AggregatorNoise(num_teachers, threshold, sigma1, sigma2),
        _ReleaseSettings(order, beta, sigma_ss, delta, conversion),
        rng,
    )


@dataclasses.dataclass(frozen=True)
class _AggregatorNoise:
    """The run's aggregator, checked (threshold and sigma1 None for plain GNMax)."""

    num_teachers: int
    threshold: float | None
    sigma1: float | None
    sigma2: float


@dataclasses.dataclass(frozen=True)
class _ReleaseSettings:
    """The release's settings, fixed before the votes are seen, checked."""

    order: float
    beta: float
    sigma_ss: float
    delta: float
    conversion: str


def _sanitized_release(
    counts: IntArray,
    mask: BoolArray,
    base_votes: FloatArray | None,
    noise: _AggregatorNoise,
    settings: _ReleaseSettings,
    rng: NormalSource,
) -> SanitizedRelease:
    """The release of :func:`release_sanitized_epsilon` on its checked arguments."""
    threshold, sigma1, sigma2 = noise.threshold, noise.sigma1, noise.sigma2
    order, beta, sigma_ss, delta = settings.order, settings.beta, settings.sigma_ss, settings.delta
    conversion = settings.conversion
    n_answered = int(mask.sum())
    delta_term = conversion_term(order=order, delta=delta, conversion=conversion)
    threshold_cost = (
        0.0
        if threshold is None or sigma1 is None
        else counts.shape[0] * order / (2**0.5 * sigma1) ** 2
    )
    eps_independent = threshold_cost + n_answered * order / sigma2**2 + delta_term
    base = {
        "order": order,
        "beta": beta,
        "sigma_ss": sigma_ss,
        "delta": delta,
        "queries": int(counts.shape[0]),
        "answered": n_answered,
        "eps_data_independent": eps_independent,
    }

    rdp_realised, ls_total, ind1, ind2 = _run_cost_and_ls(
        counts,
        noise.num_teachers,
        threshold,
        sigma1,
        sigma2,
        order,
        base_votes,
        mask.astype(np.float64),
    )
    fallback = None
    if ind1 and ind2:
        fallback = "the data-dependent bounds never beat the data-independent ones at this order"
    elif not ind2 and not all(
        check_conditions(sigma=sigma2, num_classes=counts.shape[1], order=order)
    ):
        fallback = "conditions C5/C6 do not hold at this order and sigma2"
    ss = noise_std = cost = 0.0
    eps_sanitized = eps_independent
    if fallback is None:
        ss = float(smooth_sensitivity(ls_total, beta=beta))  # a float already: ls_total is 1-D
        noise_std = ss * sigma_ss
        rdp_noisy = rdp_realised + noise_std * float(rng.normal(0.0, 1.0))
        cost = gnss_rdp(beta=beta, sigma_ss=sigma_ss, order=order)
        eps_sanitized = max(rdp_noisy, 0.0) + cost + delta_term
    return SanitizedRelease(
        base,
        eps_sanitized=eps_sanitized,
        eps_sanitized_upper_2std=eps_sanitized + 2.0 * noise_std,
        rdp_gnss=cost,
        noise_std=noise_std,
        smooth_sensitivity=ss,
        fallback=fallback,
    )


def smooth_sensitivity_dp_parameters(*, eps: float, delta: float) -> tuple[float, float]:
    """(alpha, beta) for an (eps, delta)-DP -- not RDP -- Gaussian release scaled by the
    beta-smooth sensitivity (Nissim, Raskhodnikova, Smith 2007, Lemma 2.6, with the condition on
    alpha taken from the proof of Lemma 2.10 as the reference does): with a = Phi^{-1}(1 - delta/2),
    alpha = sqrt(a^2 + eps/2) - a and beta = eps / (2 chi2_1^{-1}(1 - delta/2)).
    The noise is SS_beta / alpha * N(0, 1). pate-learn's own release goes through RDP instead
    (:func:`release_sanitized_epsilon`); this is for comparison with that route.
    """
    from scipy.special import chdtri, ndtri

    eps = check_positive(eps, "eps")
    delta = check_delta(delta)
    a = float(ndtri(1.0 - delta / 2.0))
    alpha = math.sqrt(a**2 + eps / 2.0) - a
    beta = eps / (2.0 * float(chdtri(1, delta / 2.0)))
    return alpha, beta
