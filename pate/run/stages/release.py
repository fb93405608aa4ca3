"""The sanitized (smooth-sensitivity) release of the data-dependent epsilon: planned from public
quantities before any noise is drawn, drawn once after the answers."""

from __future__ import annotations

import numpy as np


def draw_release(config: dict, votes: np.ndarray, answered: np.ndarray, rng) -> dict:
    """The sanitized data-dependent RDP, drawn once with the config's fixed parameters."""
    from pate import analysis

    priv = config.privacy
    params = config.aggregator.spec.release_params(config.aggregator_params())
    return dict(
        analysis.release_sanitized_epsilon(
            votes,
            answered=answered,
            order=priv.release_order,
            beta=priv.release_beta,
            sigma_ss=priv.release_sigma_ss,
            delta=priv.delta,
            num_teachers=int(votes[0].sum()),
            rng=rng,
            conversion=priv.conversion,
            **params,
        )
    )


def release_plan(config: dict, *, num_teachers: int, num_classes: int, orders) -> dict:
    """Whether this run will release a sanitized data-dependent epsilon, and its RDP cost.

    Decided from public quantities only (mechanism, noise, release parameters, number of teachers
    and classes): no release for a mechanism without a smooth-sensitivity analysis (LNMax), when
    the data-dependent bounds can never beat the data-independent ones at the release order, or
    when conditions C5/C6 fail. The cost curve is [P18] Theorem 23 at every order below
    1/(2 beta) and infinite above (only those orders can carry it).
    """
    from pate import analysis
    from pate.analysis.sanitized_release import (
        is_data_independent_step1,
        is_data_independent_step2,
    )

    priv = config.privacy
    order, beta, sigma_ss = priv.release_order, priv.release_beta, priv.release_sigma_ss
    params = {"order": order, "beta": beta, "sigma_ss": sigma_ss}
    spec = config.aggregator.spec
    release = spec.release_params(config.aggregator_params())
    reason = None
    if not priv.release:
        reason = "[privacy] release = false: only the data-independent epsilon is reported"
    elif release is None:
        reason = (
            f"{spec.title} has no smooth-sensitivity analysis; the data-independent epsilon "
            "is reported"
        )
    else:
        ind1 = release["threshold"] is None or is_data_independent_step1(
            num_teachers, release["threshold"], release["sigma1"], order
        )
        if ind1 and is_data_independent_step2(num_teachers, num_classes, release["sigma2"], order):
            reason = "the data-dependent bounds never beat the data-independent ones at this order"
        elif not all(
            analysis.check_conditions(sigma=release["sigma2"], num_classes=num_classes, order=order)
        ):
            reason = "conditions C5/C6 do not hold at this order and sigma2"
    rdp = analysis.gnss_rdp_curve(beta=beta, sigma_ss=sigma_ss, orders=orders)
    return {"release": reason is None, "fallback": reason, "params": params, "rdp": rdp}


def release_event(plan: dict, orders):
    """The ledger event of the planned sanitized release (its cost is data-independent)."""
    from pate.analysis import PrivacyEvent

    rdp = plan["rdp"]
    return PrivacyEvent("gnss-release", plan["params"], orders, rdp, rdp, queries=0, answered=0)
