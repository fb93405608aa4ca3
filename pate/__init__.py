"""pate-learn: Private Aggregation of Teacher Ensembles. ``pate.fit``, ``pate.plan`` and
``pate.export`` (:mod:`pate.api`, docs/api.md) are loaded on first use: importing ``pate`` never
imports torch, so the command line starts fast and an auditor can use the privacy arithmetic
(``pate.analysis``) without it."""

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
