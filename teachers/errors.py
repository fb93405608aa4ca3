"""The errors of a run's configuration and data, raised from the teachers' layer up.

Each message says what went wrong *and* what to do instead; both are
:class:`pate.analysis.errors.PateError` and the builtin error that callers may catch.

``ConfigError``          an invalid configuration file or override (a ``ValueError``; exit 2).
``DatasetNotFoundError`` a dataset is missing (a ``FileNotFoundError``; exit 2).
"""

from __future__ import annotations

from pate.analysis.errors import PateError


class ConfigError(PateError, ValueError):
    """A configuration file or override is invalid."""


class DatasetNotFoundError(PateError, FileNotFoundError):
    """A dataset is not where it was looked for; the message says how to obtain it."""
