"""The base of every deliberate pate-learn error, and the errors of unusable input.

Each message says what went wrong and what to do instead; ``pate`` prints a ``PateError`` as
one line, and exits 2 on an input error. The input errors subclass the builtin ``ValueError`` /
``TypeError`` (callers catching those keep working). Every other error subclasses these in the
lowest layer that raises it: :mod:`pate.core.errors` and :mod:`pate.teachers.errors`.
"""

from __future__ import annotations

import os


class PateError(Exception):
    """Base class of every error raised on purpose by pate-learn."""


class InputError(PateError, ValueError):
    """An input of the user (a file, a folder, an argument) is unusable; the message says why."""


class InputTypeError(PateError, TypeError):
    """An input of the user has the wrong type; the message says which and what it should be."""


class CorruptFileError(InputError):
    """A file exists but cannot be read as what it should be (truncated, garbage, wrong format);
    ``path`` (a string) names it."""

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(message)
        self.path = None if path is None else str(path)
