"""The errors of a run's configuration and data, raised from the teachers' layer up, each a
:class:`pate.analysis.errors.PateError` and the builtin error callers may catch, its message
saying what went wrong and what to do: ``ConfigError`` (a ``ValueError``) and
``DatasetNotFoundError`` (a ``FileNotFoundError``), both exit 2.
"""

from __future__ import annotations

from pate.analysis.errors import PateError


class ConfigError(PateError, ValueError):
    """A configuration file or override is invalid."""


class DatasetNotFoundError(PateError, FileNotFoundError):
    """A dataset is not where it was looked for; the message says how to obtain it."""
