"""The noise parameters of a mechanism: :class:`Param`, its checks, and the parameters the
built-in mechanisms share (see :mod:`pate.mechanisms`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from pate.analysis.errors import InputError
from pate.analysis.validation import check_nonnegative, check_positive, check_unit_interval


def _check_positive_integer(value: Any, name: str) -> int:
    """An integer >= 1; an integral real (e.g. 300.0 from a float command-line flag) is accepted."""
    out = check_positive(value, name)
    if out != int(out):
        raise InputError(f"{name} must be a whole number >= 1, got {out!r}")
    return int(out)


_CHECKS = {
    "positive": check_positive,
    "nonnegative": check_nonnegative,
    "unit_interval": check_unit_interval,
    "positive_integer": _check_positive_integer,
}


@dataclasses.dataclass(frozen=True)
class Param:
    """One noise parameter of a mechanism (see the module docstring)."""

    name: str
    kind: str
    help: str
    symbol: str = ""
    default: float | int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise InputError(f"Param name must be a Python identifier, got {self.name!r}")
        if self.kind not in _CHECKS:
            raise InputError(
                f"Param {self.name}: kind must be one of "
                f"{', '.join(map(repr, _CHECKS))}, got {self.kind!r}"
            )
        if self.default is not None:
            object.__setattr__(self, "default", self.check(self.default, f"{self.name} default"))

    @property
    def required(self) -> bool:
        """The parameter must be given (it has no default)."""
        return self.default is None

    @property
    def flag(self) -> str:
        """The command-line flag, e.g. ``--student-confidence``."""
        return "--" + self.name.replace("_", "-")

    @property
    def display(self) -> str:
        """How the privacy report writes the parameter (its symbol, else its name)."""
        return self.symbol or self.name

    def check(self, value: Any, label: str) -> float | int:
        """The value as a float (an int for "positive_integer"), or ValueError/TypeError naming
        ``label``."""
        return _CHECKS[self.kind](value, label)


def label(prefix: str, name: str) -> str:
    """How ``name`` is written in an error: a prefix ending in "-" (e.g. "--") makes a command-line
    flag (dashes); any other prefix (e.g. "[aggregator] ") is prepended as is."""
    if prefix.endswith("-"):
        return prefix + name.replace("_", "-")
    return prefix + name


# The parameters the built-in mechanisms share (a parameter of one mechanism is in its own file).
SCALE = Param("scale", "positive", "Laplace noise scale", "Laplace scale")
SIGMA = Param("sigma", "positive", "Gaussian noise std", "\u03c3")
THRESHOLD = Param("threshold", "nonnegative", "threshold T of the noisy check", "T")
SIGMA1 = Param("sigma1", "positive", "threshold-check noise std", "\u03c3\u2081")
SIGMA2 = Param("sigma2", "positive", "argmax noise std", "\u03c3\u2082")
CONFIDENCE = Param(
    "student_confidence",
    "unit_interval",
    "the student's top probability from which its own label is kept",
)
