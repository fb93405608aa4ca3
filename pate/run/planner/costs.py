"""What a plan costs and buys: the worst-case epsilon of n answers, the answers a budget
buys at fixed noise, the noise calibrated for n queries, the voters and the argmax noise
of a mechanism (reads the typed config and the mechanism spec only)."""

from __future__ import annotations

import math
import types

from pate.teachers.errors import ConfigError


def worst_eps(config, spec, params: dict, n: int, grid) -> float:
    """The data-independent eps of ``n`` asked queries, all answered (with the release)."""
    from pate.analysis.rdp import eps_from_rdp

    rdp = n * spec.worst_case_query_rdp(params, orders=grid)
    extra = config.release_rdp(params, grid)
    if extra is not None:
        rdp = rdp + extra
    priv = config.privacy
    return float(eps_from_rdp(rdp, orders=grid, delta=priv.delta, conversion=priv.conversion)[0])


def most(fits, cap: int) -> int:
    """The largest ``n`` in ``[1, cap]`` with ``fits(n)`` (true up to some ``n``, false beyond:
    a binary search), 0 when ``fits(1)`` is false."""
    if cap <= 0 or not fits(1):
        return 0
    lo, hi = 1, cap
    if fits(hi):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def answers_fixed(config, spec, params: dict, budget: float, cap: int, grid) -> int:
    """How many queries, all answered, fixed noise ``params`` buys within ``budget`` (<= cap)."""
    return most(lambda n: worst_eps(config, spec, params, n, grid) <= budget, cap)


def with_noise(config, **values):
    """``config`` with these ``[aggregator]`` noise parameters set (not validated)."""
    noise = dict(config.aggregator.noise, **values)
    return config.replace("aggregator", noise=types.MappingProxyType(noise))


def calibrated_noise(config, queries: int) -> dict | None:
    """The ``"auto"`` noise of ``config`` calibrated for ``queries``
    (:meth:`pate.run.config.RunConfig.calibration`), None when the target is unreachable."""
    trial = config.replace("aggregator", queries=int(queries))
    if trial.aggregator.noise.get("threshold") == "auto":
        trial = with_noise(trial, threshold=1.0)  # set after the teachers; calibration ignores it
    try:
        return dict(trial.calibration()["calibrated"])
    except ConfigError:
        return None


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def argmax_std(spec, params: dict) -> tuple[str, float] | None:
    """(name, std) of the noise on the vote counts' argmax."""
    if "sigma2" in spec.param_names and is_number(params.get("sigma2")):
        return "sigma2", float(params["sigma2"])
    if spec.kind.trains_teachers and "sigma" in spec.param_names and is_number(params.get("sigma")):
        return "sigma", float(params["sigma"])
    if "scale" in spec.param_names and is_number(params.get("scale")):
        return "scale", math.sqrt(2.0) * float(params["scale"])
    return None
