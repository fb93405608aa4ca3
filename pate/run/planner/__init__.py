"""The plan: what a run will do and whether it can give a useful student, from public facts
only (:class:`Facts`: the DECLARED number of private records), before any private record is
read, model trained or budget spent (``pate plan``, ``pate.plan``, the first step of ``pate
run`` / ``pate.fit``: :func:`plan_config`). A plan that cannot give a useful student is refused
with a :class:`PlanError` naming the setting and a fix; every rule: ``docs/plan.md``.
"""

from pate.run.planner.plan_data import (
    AUTO_MECHANISM,
    DROWNING_NOISE,
    FIXED_NOISE_MECHANISM,
    MAX_TEACHERS,
    MIN_LABELS_PER_CLASS,
    MIN_RECORDS_PER_CLASS,
    TARGET_NOISE,
    Facts,
    Plan,
    PlanError,
    facts_of,
)
from pate.run.planner.rules import plan_config
from pate.run.planner.steps import (
    auto_mechanism,
    auto_mechanism_for,
    ledger_remaining,
    log_plan,
    needs_plan,
    probe,
    write_plan,
)

__all__ = [
    "AUTO_MECHANISM",
    "DROWNING_NOISE",
    "FIXED_NOISE_MECHANISM",
    "MAX_TEACHERS",
    "MIN_LABELS_PER_CLASS",
    "MIN_RECORDS_PER_CLASS",
    "TARGET_NOISE",
    "Facts",
    "Plan",
    "PlanError",
    "auto_mechanism",
    "auto_mechanism_for",
    "facts_of",
    "ledger_remaining",
    "log_plan",
    "needs_plan",
    "plan_config",
    "probe",
    "write_plan",
]
