"""Typed errors shared by every pate-learn package.

Each message says what went wrong *and* what to do instead. Argument errors stay
plain ``ValueError`` / ``TypeError`` subclasses so that callers catching the
builtins keep working.
"""

from __future__ import annotations


class PateError(Exception):
    """Base class of every error raised on purpose by pate-learn."""


class BudgetExceededError(PateError):
    """Answering (or reserving) would spend more privacy budget than remains.

    Attributes ``requested``, ``remaining`` (epsilons) say by how much.
    """

    def __init__(self, message: str, *, requested: float | None = None,
                 remaining: float | None = None) -> None:
        super().__init__(message)
        self.requested = requested
        self.remaining = remaining


class PartitionError(PateError, ValueError):
    """A partition of the sensitive data is invalid (overlap, empty shard, bad ids)."""


class ConfigError(PateError, ValueError):
    """A configuration file or override is invalid."""


class DatasetNotFoundError(PateError, FileNotFoundError):
    """A dataset is not where it was looked for; the message says how to obtain it."""


class LedgerError(PateError):
    """The privacy-budget ledger cannot be read or written safely."""
