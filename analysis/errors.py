"""The base of every deliberate pate-learn error, and the errors of unusable input.

Each message says what went wrong *and* what to do instead. Argument errors stay
plain ``ValueError`` / ``TypeError`` subclasses so that callers catching the
builtins keep working.

``PateError``            base of every deliberate error; ``pate`` prints it as one line.
``InputError``           an unusable user input (a ``ValueError``; exit 2), with its subclass
                         ``CorruptFileError`` (unreadable file, ``path``).
``InputTypeError``       an input of the wrong type (a ``TypeError``; exit 2).

Every other error lives in the lowest layer that raises it, as a subclass of these:
:mod:`pate.core.errors` (``BudgetExceededError``, ``LedgerError``, ``PartitionError``,
``RunDirError``) and :mod:`pate.teachers.errors` (``ConfigError``, ``DatasetNotFoundError``);
``pate`` exports the public ones (``from pate import ConfigError``).
"""

from __future__ import annotations

import os


class PateError(Exception):
    """Base class of every error raised on purpose by pate-learn."""


class InputError(PateError, ValueError):
    """An input of the user (a file, a folder, an argument) is unusable; the message says why.

    A ``ValueError`` subclass, so callers catching the builtin keep working. The ``pate``
    command prints it as one line and exits 2.
    """


class InputTypeError(PateError, TypeError):
    """An input of the user has the wrong type; the message says which and what it should be.

    A ``TypeError`` subclass, so callers catching the builtin keep working. The ``pate``
    command prints it as one line and exits 2.
    """


class CorruptFileError(InputError):
    """A file exists but cannot be read as what it should be (truncated, garbage, wrong format).

    Attribute ``path`` (a string) names the file.
    """

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(message)
        self.path = None if path is None else str(path)
