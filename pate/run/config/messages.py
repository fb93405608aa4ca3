"""How the config's messages name a setting: a TOML key (``[privacy] budget_eps``) for a
config file, a keyword argument (``budget_eps=``) for :func:`pate.fit`; and the two helpers
every check of the config package raises through (:func:`error_at`, :func:`checked`)."""

from __future__ import annotations

import json
import shlex
from typing import Any

from pate.teachers.errors import ConfigError

#: The ``source`` of a config built by :func:`pate.fit` (:func:`from_dict`): its messages name
#: keyword arguments, not TOML keys (:func:`setting`).
PYTHON_SOURCE = "pate.fit"
#: The sources whose messages name keyword arguments (``"python"``: the planner's wording).
_PYTHON_SOURCES = frozenset({PYTHON_SOURCE, "python"})

#: How :func:`pate.fit` spells a config key, where it is not ``key=`` itself.
PYTHON_NAMES = {
    ("partition", "mode"): "partition=",
    ("privacy", "ledger"): "ledger=",
    ("privacy", "release"): "release=",
    ("run", "run_dir"): "run_dir=",
    ("data", "name"): "private=",
    ("teachers", "model"): "teacher=",
    ("student", "model"): "student=",
}


def setting(table: str, key: str, *, source: str | None) -> str:
    """A config key as the caller wrote it: ``budget_eps=`` (a keyword argument) for a config
    from :func:`pate.fit` (``source == PYTHON_SOURCE``), else the TOML key ``[privacy]
    budget_eps``. Messages build their names with this, never by rewriting text."""
    if source in _PYTHON_SOURCES:
        if (table, key) in PYTHON_NAMES:
            return PYTHON_NAMES[table, key]
        if table in ("teachers", "student"):
            return f"{table.removesuffix('s')}_params={{{key!r}: ...}}"
        return f"{key}="
    return f"[{table}] {key}"


def assignment(table: str, key: str, value: Any, *, source: str | None) -> str:
    """A setting with a value as the caller writes it: ``budget_eps=120`` from :func:`pate.fit`,
    ``[privacy] budget_eps = 120`` in a TOML config."""
    text = f"{value:g}" if isinstance(value, float) else json.dumps(value)
    if source in _PYTHON_SOURCES:
        return setting(table, key, source=source) + (
            text if not isinstance(value, str) else repr(value)
        )
    return f"{setting(table, key, source=source)} = {text}"


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


def error_at(where: str, message: str) -> ConfigError:
    """The :class:`ConfigError` of a check: ``where`` (the config file or ``pate.fit``), then what
    is wrong and what to do."""
    return ConfigError(f"{where}: {message}")


def checked(where: str, fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, its ``ValueError`` or ``TypeError`` turned into a
    :class:`ConfigError` that starts with ``where``."""
    try:
        return fn(*args, **kwargs)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{where}: {exc}") from None
