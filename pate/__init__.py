"""pate-learn: Private Aggregation of Teacher Ensembles.

``pate.fit(...)`` runs the whole pipeline from Python (:mod:`pate.api`): sensitive data in,
student, released labels and privacy figures out; ``pate.plan(...)`` (same arguments) says what it
would do, and refuses a run that cannot give a useful student, before any work
(:mod:`pate.run.planner`); ``pate.export(run_dir, out)`` writes the publishable bundle of a finished
run (:mod:`pate.run.export`).

Importing ``pate`` never imports torch: the CLI's analysis commands start fast and an
auditor can use the privacy arithmetic (``pate.analysis``) without it. ``pate.fit`` and
``pate.PateResult`` are loaded on first use.
"""

from pate.analysis.errors import PateError
from pate.core.errors import BudgetExceededError, LedgerError, PartitionError
from pate.teachers.errors import ConfigError, DatasetNotFoundError

__version__ = "0.1.0"

__all__ = [
    "BudgetExceededError",
    "ConfigError",
    "DatasetNotFoundError",
    "LedgerError",
    "PartitionError",
    "PateError",
    "PateResult",
    "PlanError",
    "__version__",
    "export",
    "fit",
    "plan",
]

_API = ("export", "fit", "plan", "PateResult", "PlanError")


def __getattr__(name: str):
    if name in _API:  # the Python API, on first use (it is the top layer: keep import pate light)
        import importlib

        return getattr(importlib.import_module("pate.api"), name)
    raise AttributeError(f"module 'pate' has no attribute {name!r}")
