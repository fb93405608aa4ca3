"""How a message names a setting. Every error names TOML keys (``[privacy] budget_eps``,
``[privacy] budget_eps = 120``) and the command lines that fix it (:func:`assignment`,
:func:`budget_command`); the Python front end words each message once, at its boundary
(:func:`python_wording`: ``budget_eps=``, ``budget_eps=120``, ``Ledger(...).set_budget(...)``)."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from pate.run.config.tables import TABLE_TYPES, keys_of, keyword


def assignment(table: str, key: str, value: Any) -> str:
    """A setting with a value as a TOML config writes it: ``[privacy] budget_eps = 120``."""
    text = f"{value:g}" if isinstance(value, float) else json.dumps(value)
    return f"[{table}] {key} = {text}"


def budget_command(*, ledger, digest: str, eps: float, delta: float, conversion: str) -> str:
    """The pasteable ``pate budget set`` command line that changes a dataset's lifetime budget."""
    return (
        f"pate budget set --dataset {shlex.quote(digest)} --eps {eps:.10g} --delta {delta:g} --conversion "
        f"{conversion} --ledger {shlex.quote(str(ledger))}"
    )


_WORD = r"""((?:'[^']*'|"[^"]*"|[^\s'"`])+)"""  # one shell word, as shlex.quote writes it
_BUDGET_COMMAND = re.compile(
    rf"pate budget set --dataset {_WORD} --eps (\S+) --delta (\S+) --conversion (\S+) "
    rf"--ledger {_WORD}"
)
_ASSIGNMENT = re.compile(r"\[(\w+)\] (\w+) = (\"(?:[^\"\\]|\\.)*\"|'[^']*'|[-+\w.]+)")
_TOML_KEY = re.compile(r"\[(\w+)\] (\w+)")
#: the command line's own phrases, and what :func:`pate.fit` says instead
_PHRASES = (
    (re.compile(r"^--resume: "), "resume=True: "),
    (
        re.compile(r"continue it as it was with (`pate run --run-dir \S+ --resume`)"),
        r"call again with the arguments it was started with and resume=True (or \1 in a shell)",
    ),
    (
        re.compile(r"`pate run --run-dir \S+ --resume --config FILE`"),
        "the same pate.fit call with resume=True",
    ),
    (re.compile(r", then (`pate run --run-dir \S+ --resume`|run this command again)"), ""),
    (re.compile(r"pass --resume to continue"), "pass resume=True to continue"),
    (re.compile(r"another --run-dir / \[run\] name"), "another run_dir="),
    (re.compile(r"or fork_run to keep"), "or pate.run.pipeline.fork_run to keep"),
)


def _declared(table: str, key: str) -> bool:
    return table in TABLE_TYPES and (key in keys_of(table) or table == "aggregator")


def _python_call(match: re.Match) -> str:
    digest, eps, delta, conversion, ledger = match.groups()
    return (
        f"pate.ledger.Ledger({shlex.split(ledger)[0]!r}).set_budget({shlex.split(digest)[0]!r}, "
        f"eps={eps}, delta={delta}, conversion={conversion!r})"
    )


def _python_assignment(match: re.Match) -> str:
    table, key, text = match.groups()
    if not _declared(table, key):
        return match.group(0)
    value = {"true": "True", "false": "False"}.get(text, text)
    value = repr(json.loads(text)) if text.startswith('"') else value
    spelled = keyword(table, key)  # a recipe's key: student_params={'key': ...}
    return spelled.replace("...", value) if spelled.endswith("...}") else spelled + value


def python_wording(message: str) -> str:
    """``message`` (an error naming TOML keys and command lines) as :func:`pate.fit` words it:
    ``[privacy] budget_eps = 120`` -> ``budget_eps=120``, ``[privacy] budget_eps`` ->
    ``budget_eps=`` (a table named alone stays), ``pate budget set ...`` -> the
    ``pate.ledger.Ledger(...).set_budget(...)`` call, ``--resume`` -> ``resume=True``."""
    for phrase, python in _PHRASES:
        message = phrase.sub(python, message)
    message = _BUDGET_COMMAND.sub(_python_call, message)
    message = _ASSIGNMENT.sub(_python_assignment, message)
    return _TOML_KEY.sub(
        lambda m: keyword(*m.groups()) if _declared(*m.groups()) else m.group(0), message
    )
