"""How a config key is declared (:func:`key`, in the style of scikit-learn's
``_parameter_constraints``), its constraints, and the frozen form of a value and back."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Interval:
    """A number between ``low`` and ``high`` (None: unbounded); ``closed`` says which ends are
    included ("both", "left", "right", "neither"); ``integer``: an int (bool refused);
    ``meaning``: what the number counts, for the message."""

    low: float | None
    high: float | None = None
    closed: str = "both"
    integer: bool = False
    meaning: str = ""

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int if self.integer else (int, float)):
            return False
        left, right = self.closed in ("both", "left"), self.closed in ("both", "right")
        if self.low is not None and not (value >= self.low if left else value > self.low):
            return False
        return self.high is None or (value <= self.high if right else value < self.high)

    def __str__(self) -> str:
        what = "an integer" if self.integer else "a number"
        meaning = f" ({self.meaning})" if self.meaning else ""
        if self.high is None:
            sign = ">=" if self.closed in ("both", "left") else ">"
            return f"{what} {sign} {self.low:g}{meaning}"
        brackets = {"both": "[]", "left": "[)", "right": "(]", "neither": "()"}[self.closed]
        return f"{what} in {brackets[0]}{self.low:g}, {self.high:g}{brackets[1]}{meaning}"


@dataclasses.dataclass(frozen=True)
class Options:
    """One of ``values``."""

    values: tuple

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str) and value in self.values

    def __str__(self) -> str:
        return "one of " + ", ".join(f'"{v}"' for v in self.values)


def describe(constraint: Any) -> str:
    if constraint is list:
        return "a list"
    return f'"{constraint}"' if isinstance(constraint, str) else str(constraint)


def accepts(constraint: Any, value: Any) -> bool:
    if constraint is list:
        return isinstance(value, list)
    return value == constraint if isinstance(constraint, str) else constraint.accepts(value)


#: The default of a key that must be given.
REQUIRED = object()


def key(kind: Any, default: Any = None, *constraints: Any, keyword: str | None = None) -> Any:
    """A config key: its type(s) ``kind`` (float accepts ints; bool is never an int), its default
    (:data:`REQUIRED`; None: left out), the ``constraints`` of which a value meets one (an
    :class:`Interval`, :class:`Options`, a literal string such as ``"auto"``, or ``list``: any
    list), and the :func:`pate.fit` keyword that sets it where that is not ``key=`` itself."""
    metadata = {"kind": kind, "constraints": constraints, "keyword": keyword}
    if default is REQUIRED:
        return dataclasses.field(metadata=dict(metadata, required=True))
    return dataclasses.field(default=default, metadata=dict(metadata, required=False))


POSITIVE = Interval(0, closed="neither")
AT_LEAST_ONE = Interval(1, integer=True)
NOT_NEGATIVE = Interval(0, integer=True)


TYPE_NAMES = {
    bool: "true/false",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "a list",
    dict: "a table",
}


def type_ok(value: Any, kind: Any) -> bool:
    for want in kind if isinstance(kind, tuple) else (kind,):
        if want is bool and isinstance(value, bool):
            return True
        if want in (int, float) and isinstance(value, bool):
            continue
        if isinstance(value, int if want is int else (int, float) if want is float else want):
            return True
    return False


def frozen(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(frozen(v) for v in value)
    if isinstance(value, dict):
        return types.MappingProxyType({k: frozen(v) for k, v in value.items()})
    return value


def thawed(value: Any) -> Any:
    if isinstance(value, tuple):
        return [thawed(v) for v in value]
    if isinstance(value, Mapping):
        return {k: thawed(v) for k, v in value.items()}
    return value
