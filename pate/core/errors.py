"""The errors the pate core raises (the privacy budget, the ledger, the partition, run folders),
each a :class:`pate.analysis.errors.PateError` whose message says what went wrong and what to do;
the layers above import them from here. The ``pate`` command's exit status: docs/cli.md."""

from __future__ import annotations

import os

from pate.analysis.errors import InputError, PateError


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


class LedgerError(PateError):
    """The privacy-budget ledger cannot be read or written safely."""


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
