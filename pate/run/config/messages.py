"""How a message names a setting for its caller: a TOML key (``[privacy] budget_eps``) for the
command line, a keyword argument (``budget_eps=``) for :func:`pate.fit`. The config's errors
name TOML keys (:class:`pate.run.config.tables.SettingError`); the Python front end words them
once (:func:`python_wording`)."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from pate.run.config.tables import TABLE_TYPES, keys_of, keyword

#: The ``source`` of a run started by :func:`pate.fit`: its run-time messages name keyword
#: arguments, not TOML keys (:func:`setting`).
PYTHON_SOURCE = "pate.fit"
_PYTHON_SOURCES = frozenset({PYTHON_SOURCE, "python"})


def setting(table: str, key: str, *, source: str | None) -> str:
    """A config key as the caller wrote it: ``budget_eps=`` (a keyword argument) for a run of
    :func:`pate.fit` (``source == PYTHON_SOURCE``), else the TOML key ``[privacy] budget_eps``."""
    return keyword(table, key) if source in _PYTHON_SOURCES else f"[{table}] {key}"


def assignment(table: str, key: str, value: Any, *, source: str | None) -> str:
    """A setting with a value as the caller writes it: ``budget_eps=120`` from :func:`pate.fit`,
    ``[privacy] budget_eps = 120`` in a TOML config."""
    text = f"{value:g}" if isinstance(value, float) else json.dumps(value)
    if source in _PYTHON_SOURCES:
        return keyword(table, key) + (text if not isinstance(value, str) else repr(value))
    return f"[{table}] {key} = {text}"


def budget_command(
    source: str | None, *, ledger, digest: str, eps: float, delta: float, conversion: str
) -> str:
    """How the caller changes a dataset's lifetime budget in the ledger: a Python call for
    :func:`pate.fit`, the ``pate budget set`` command line for the CLI (both pasteable)."""
    if source in _PYTHON_SOURCES:
        return (
            f"pate.ledger.Ledger({str(ledger)!r}).set_budget({digest!r}, eps={eps:.10g}, "
            f"delta={delta:g}, conversion={conversion!r})"
        )
    return (
        f"pate budget set --dataset {shlex.quote(digest)} --eps {eps:.10g} --delta {delta:g} --conversion "
        f"{conversion} --ledger {shlex.quote(str(ledger))}"
    )


_TOML_KEY = re.compile(r"\[(\w+)\] (\w+)")


def python_wording(message: str) -> str:
    """``message`` (a config error, naming TOML keys) as :func:`pate.fit` words it: each
    ``[table] key`` of a declared key becomes its keyword (``[privacy] budget_eps`` ->
    ``budget_eps=``); a table named alone stays."""

    def name(match: re.Match) -> str:
        table, key = match.groups()
        if table in TABLE_TYPES and (key in keys_of(table) or table == "aggregator"):
            return keyword(table, key)
        return match.group(0)

    return _TOML_KEY.sub(name, message)
