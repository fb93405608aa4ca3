"""Typed errors shared by every pate-learn package.

Each message says what went wrong *and* what to do instead. Argument errors stay
plain ``ValueError`` / ``TypeError`` subclasses so that callers catching the
builtins keep working.

``PateError``            base of every deliberate error; ``pate`` prints it as one line.
``BudgetExceededError``  spending would exceed the privacy budget (exit 3 from ``pate``).
``LedgerError``          the budget ledger cannot be read or written safely (exit 3).
``ConfigError``          an invalid configuration file or override (a ``ValueError``; exit 2).
``PartitionError``       an invalid partition of the sensitive data (a ``ValueError``; exit 2).
``DatasetNotFoundError`` a dataset is missing (a ``FileNotFoundError``; exit 2).
``InputError``           an unusable user input (a ``ValueError``; exit 2), with subclasses
                         ``CorruptFileError`` (unreadable file, ``path``) and ``RunDirError``
                         (an output folder that cannot be written, ``path`` and ``flag``).
"""

from __future__ import annotations

import os


class PateError(Exception):
    """Base class of every error raised on purpose by pate-learn."""


class BudgetExceededError(PateError):
    """Answering (or reserving) would spend more privacy budget than remains.

    Attributes ``requested``, ``remaining`` (epsilons) say by how much.
    """

    def __init__(
        self, message: str, *, requested: float | None = None, remaining: float | None = None
    ) -> None:
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


class InputError(PateError, ValueError):
    """An input of the user (a file, a folder, an argument) is unusable; the message says why.

    A ``ValueError`` subclass, so callers catching the builtin keep working. The ``pate``
    command prints it as one line and exits 2.
    """


class CorruptFileError(InputError):
    """A file exists but cannot be read as what it should be (truncated, garbage, wrong format).

    Attribute ``path`` (a string) names the file.
    """

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(message)
        self.path = None if path is None else str(path)


class RunDirError(InputError):
    """An output folder (e.g. ``--run-dir``) cannot be created or written to.

    Attributes ``path`` (a string) and ``flag`` (the option that named it, or None).
    """

    def __init__(
        self, message: str, *, path: str | os.PathLike[str] | None = None, flag: str | None = None
    ) -> None:
        super().__init__(message)
        self.path = None if path is None else str(path)
        self.flag = flag
