"""The plan: what a run will do and whether it can give a useful student, before any private
record is read, any model trained or any budget spent (``pate plan``, ``pate.plan`` and the first
step of every ``pate run`` / ``pate.fit``: :func:`plan_config`).

It looks only at public facts (:class:`Facts`: the DECLARED number of private records, never the
exact count), fills in what the user left open, checks what the user set, and refuses a plan that
cannot give a useful student with a :class:`PlanError` naming the setting and a fix. Every rule,
its source and the measurements behind its constants are in ``docs/plan.md``.
"""

from pate.run.planner.model import (
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
    "facts_of",
    "ledger_remaining",
    "log_plan",
    "needs_plan",
    "plan_config",
    "probe",
    "write_plan",
]
