"""Noise calibration: the smallest noise whose data-independent epsilon meets a target.

Data-independent costs (functions of public quantities only, so calibrating on them is private):

* GNMax, n answered queries:           n lambda / sigma^2                        ([P18] Prop. 8)
* LNMax, n answered queries:           n min(lambda eps0^2 / 2, eps0), eps0 = 2 / scale
* Confident GNMax, n asked, a answered: n lambda / (2 sigma1^2) + a lambda / sigma2^2, with
  sigma1 = ratio * sigma2 and a = n unless a smaller bound on the answers is enforced
  (e.g. by an online aggregator that stops answering after ``max_answered``).

``extra_rdp`` (optional, one value per order) is a fixed data-independent cost composed with the
answers (e.g. a planned sanitized release): the noise is calibrated so that the answers and it
together meet the target.

Each cost is converted with :func:`analysis.eps_from_rdp` on the given orders. Epsilon decreases
monotonically in the noise, so a bisection in log-space brackets the exact threshold; the
returned noise is always the upper end of the final bracket, whose epsilon has been checked to be
<= the target: calibration never overshoots.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from pate.analysis.arrays import FloatArray
from pate.analysis.errors import InputError
from pate.analysis.orders import DEFAULT_ORDERS
from pate.analysis.rdp import eps_from_rdp
from pate.analysis.validation import (
    check_delta,
    check_int,
    check_orders,
    check_positive,
    check_rdp_curve,
)


def smallest_noise(
    eps_of: Callable[[float], float], target: float, what: str, floor_eps: float
) -> float:
    if target <= floor_eps:
        raise InputError(
            f"eps={target!r} is unreachable at this delta on these orders: even "
            f"infinite noise costs eps={floor_eps:.6g} (the delta term and any extra_rdp). Raise eps or "
            "include larger orders"
        )
    lo, hi = 1e-6, 1.0
    while eps_of(hi) > target:
        lo, hi = hi, hi * 2.0
        if hi > 1e15:
            raise InputError(f"no {what} below 1e15 reaches eps={target!r}")
    if eps_of(lo) <= target:
        return lo
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if eps_of(mid) <= target:
            hi = mid
        else:
            lo = mid
        if hi / lo - 1.0 < 1e-13:
            break
    if eps_of(hi) > target:  # defensive: never return a noise that overshoots
        raise ArithmeticError(f"calibration of {what} failed to bracket eps={target!r}")
    return hi


def delta_floor(orders: FloatArray, delta: float, conversion: str, extra: FloatArray) -> float:
    return float(eps_from_rdp(extra, orders=orders, delta=delta, conversion=conversion)[0])


def extra_rdp_per_order(extra_rdp: npt.ArrayLike | None, orders: FloatArray) -> FloatArray:
    if extra_rdp is None:
        return np.zeros(orders.size)
    return check_rdp_curve(extra_rdp, orders, "extra_rdp")


def _calibrate(
    rdp_of: Callable[[float, FloatArray], FloatArray],
    what: str,
    eps: float,
    delta: float,
    orders: npt.ArrayLike,
    conversion: str,
    extra_rdp: npt.ArrayLike | None,
) -> float:
    """The smallest noise ``what`` whose data-independent RDP ``rdp_of(noise, orders)``,
    composed with ``extra_rdp``, is (eps, delta)-DP (:func:`smallest_noise`)."""
    eps = check_positive(eps, "eps")
    delta = check_delta(delta)
    grid = check_orders(orders)
    extra = extra_rdp_per_order(extra_rdp, grid)

    def eps_of(noise: float) -> float:
        rdp = rdp_of(noise, grid) + extra
        return float(eps_from_rdp(rdp, orders=grid, delta=delta, conversion=conversion)[0])

    return smallest_noise(eps_of, eps, what, delta_floor(grid, delta, conversion, extra))


def calibrate_gnmax_sigma(
    *,
    eps: float,
    delta: float,
    num_queries: int,
    orders: npt.ArrayLike = DEFAULT_ORDERS,
    conversion: str = "classic",
    extra_rdp: npt.ArrayLike | None = None,
) -> float:
    """Smallest sigma such that ``num_queries`` GNMax answers (composed with ``extra_rdp``) are
    (eps, delta)-DP (data-independent bound)."""
    n = check_int(num_queries, "num_queries", minimum=1)
    return _calibrate(
        lambda sigma, grid: n * grid / sigma**2, "sigma", eps, delta, orders, conversion, extra_rdp
    )


def calibrate_lnmax_scale(
    *,
    eps: float,
    delta: float,
    num_queries: int,
    orders: npt.ArrayLike = DEFAULT_ORDERS,
    conversion: str = "classic",
    extra_rdp: npt.ArrayLike | None = None,
) -> float:
    """Smallest Laplace scale such that ``num_queries`` LNMax answers (composed with
    ``extra_rdp``) are (eps, delta)-DP."""
    n = check_int(num_queries, "num_queries", minimum=1)

    def rdp_of(scale: float, grid: FloatArray) -> FloatArray:
        pure = 2.0 / scale
        return n * np.minimum(0.5 * pure * pure * grid, pure)

    return _calibrate(rdp_of, "scale", eps, delta, orders, conversion, extra_rdp)


def calibrate_confident_gnmax(
    *,
    eps: float,
    delta: float,
    num_queries: int,
    max_answered: int | None = None,
    sigma1_ratio: float = 3.75,
    orders: npt.ArrayLike = DEFAULT_ORDERS,
    conversion: str = "classic",
    extra_rdp: npt.ArrayLike | None = None,
) -> tuple[float, float]:
    """Smallest (sigma1, sigma2) = (ratio * s, s) such that asking ``num_queries`` and answering at
    most ``max_answered`` (default: all) is (eps, delta)-DP (data-independent bound).

    The default ratio 3.75 is the Scalable-PATE MNIST setting (sigma1=150, sigma2=40).
    """
    n = check_int(num_queries, "num_queries", minimum=1)
    answered = n if max_answered is None else check_int(max_answered, "max_answered", minimum=0)
    if answered > n:
        raise InputError(f"max_answered ({answered}) cannot exceed num_queries ({n})")
    ratio = check_positive(sigma1_ratio, "sigma1_ratio")

    def rdp_of(sigma2: float, grid: FloatArray) -> FloatArray:
        return n * grid / (2.0 * (ratio * sigma2) ** 2) + answered * grid / sigma2**2

    sigma2 = _calibrate(rdp_of, "sigma2", eps, delta, orders, conversion, extra_rdp)
    return ratio * sigma2, sigma2
