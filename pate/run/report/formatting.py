"""How the report writes numbers: epsilons, deltas, percentages, counts and parameters, the same
in the statement, the tables, the warnings and the plots."""

from __future__ import annotations

import math
from typing import Any

from pate.run.report.schema import is_real

#: Below this, what is left of a budget is floating-point residue (shown as 0).
EPS_RESIDUE = 1e-9


def eps(x: float) -> str:
    """An epsilon with 4 significant digits ("infinity" for inf)."""
    if math.isinf(x):
        return "infinity"
    return f"{x:.4g}"


def left(x: float) -> str:
    """What is left of a budget, as :func:`eps` writes it, "0" for a floating-point residue
    (below :data:`EPS_RESIDUE` either way: a budget less exactly its charges)."""
    return "0" if abs(x) < EPS_RESIDUE else eps(x)


def sig(x: float, digits: int = 3) -> str:
    """``x`` with ``digits`` significant digits ("infinity" for inf)."""
    if isinstance(x, float) and math.isinf(x):
        return "infinity"
    return f"{x:.{digits}g}"


def delta(x: float) -> str:
    """delta as 1e-5 / 2.5e-6, never 1e-05."""
    text = f"{x:.3g}"
    if "e" in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{int(exponent)}"
    return text


def pct(x: float | None) -> str:
    """A fraction as a percentage with one decimal ("n/a" for None)."""
    return "n/a" if x is None else f"{100.0 * x:.1f}%"


def count(n: int) -> str:
    """An integer with thousands separators."""
    return f"{n:,}"


def param(value: Any) -> str:
    """A parameter value: numbers in ``g`` format, anything else as ``str``."""
    if is_real(value) and not isinstance(value, bool):
        return f"{value:g}"
    return str(value)


def class_names(utility: dict) -> list[str]:
    """The class names of ``utility`` (``class_names``), or the class indices when it has none."""
    names = utility["class_names"]
    return (
        list(names)
        if names is not None
        else [str(i) for i in range(len(utility["confusion_matrix"]))]
    )
