"""The planner (:mod:`pate.run.planner`) with this package's calibration and orders: what
:func:`pate.run.config.from_dict` and the commands call to fill in and check a plan."""

from __future__ import annotations

from pate.run.config.settings import calibration, orders


def plan_config(
    config: dict, facts, *, wording: str = "config", remaining_eps: float | None = None
):
    """:func:`pate.run.planner.plan_config` with this module's calibration and orders: ``(filled
    config, plan)``, or :class:`pate.run.planner.PlanError`."""
    from pate.run import planner as P

    return P.plan_config(
        config,
        facts,
        calibration=calibration,
        orders=orders,
        wording=wording,
        remaining_eps=remaining_eps,
    )


def plan_for(config: dict, facts, *, wording: str = "config", remaining_eps: float | None = None):
    """:func:`pate.run.planner.plan_for` (the plan of a filled config) with this module's
    calibration and orders."""
    from pate.run import planner as P

    return P.plan_for(
        config,
        facts,
        calibration=calibration,
        orders=orders,
        wording=wording,
        remaining_eps=remaining_eps,
    )
