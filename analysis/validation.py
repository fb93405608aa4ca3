"""The one validation module of pate-learn (numpy only, so ``pate.analysis`` stays torch-free).

Every public entry point validates its arguments here *before* doing any work, drawing any
noise or spending any budget. Errors name the argument and the offending value and say
what is expected instead.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from pate.analysis.arrays import BoolArray, FloatArray, IntArray
from pate.analysis.errors import InputError, InputTypeError


def describe(value: Any, limit: int = 60) -> str:
    """A short, safe rendering of ``value`` for error messages (never a whole array)."""
    if isinstance(value, np.ndarray):
        return f"array of shape {value.shape} and dtype {value.dtype}"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _as_real(value: Any, name: str, valid: Callable[[float], bool], expected: str) -> float:
    """``value`` as a finite float for which ``valid`` holds, else a typed error: ``name`` must
    ``expected``."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise InputTypeError(
            f"{name} must be a real number, got {describe(value)} of type {type(value).__name__}"
        )
    out = float(value)
    if not np.isfinite(out):
        raise InputError(f"{name} must be finite, got {out!r}")
    if not valid(out):
        raise InputError(f"{name} must {expected}, got {out!r}")
    return out


def _float_array(value: Any, name: str, expected: str) -> FloatArray:
    """``value`` as a float64 array; a TypeError saying ``expected`` where it is not numbers."""
    if isinstance(value, (str, bytes)) or value is None:
        raise InputTypeError(f"{name} must be {expected}, got {describe(value)}")
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputTypeError(f"{name} must be {expected}, got {describe(value)}") from None


def check_positive(value: Any, name: str) -> float:
    """A finite real number > 0 (e.g. ``sigma``, ``scale``)."""
    return _as_real(value, name, lambda out: out > 0, "be > 0")


def check_nonnegative(value: Any, name: str) -> float:
    """A finite real number >= 0 (e.g. ``threshold``)."""
    return _as_real(value, name, lambda out: out >= 0, "be >= 0")


def check_delta(delta: Any, name: str = "delta") -> float:
    """delta of (eps, delta)-DP: a real number strictly inside (0, 1)."""
    return _as_real(delta, name, lambda out: 0.0 < out < 1.0, "lie strictly between 0 and 1")


def check_rdp_curve(rdp: Any, orders: FloatArray, name: str) -> FloatArray:
    """``rdp`` as one value >= 0 (or +inf) per order of ``orders``; else a typed error."""
    arr = _float_array(rdp, name, "an array of RDP values, one per order")
    if arr.shape != orders.shape:
        raise InputError(
            f"{name} must have one value per order {orders.shape}, got shape {arr.shape}"
        )
    if np.any(np.isnan(arr)) or np.any(arr < 0):
        raise InputError(
            f"{name} must be >= 0 (or +inf) at every order, got NaN or a negative value"
        )
    return arr


def check_int(value: Any, name: str, *, minimum: int | None = None) -> int:
    """An integer (bool refused), optionally >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
        raise InputTypeError(
            f"{name} must be an integer, got {describe(value)} of type {type(value).__name__}"
        )
    out = int(value)
    if minimum is not None and out < minimum:
        raise InputError(f"{name} must be >= {minimum}, got {out}")
    return out


def check_order(order: Any, name: str = "order") -> float:
    """One Renyi order lambda > 1."""
    return _as_real(
        order, name, lambda out: out > 1, "be > 1 (Renyi orders are defined for lambda > 1)"
    )


def check_orders(orders: Any, name: str = "orders") -> FloatArray:
    """A non-empty 1-D array of finite Renyi orders, each > 1 (any order, duplicates allowed)."""
    arr = _float_array(orders, name, "a 1-D array of numbers")
    if arr.ndim != 1 or arr.size == 0:
        raise InputError(f"{name} must be a non-empty 1-D array of orders, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise InputError(f"{name} must be finite, got {describe(orders)} with non-finite entries")
    if np.any(arr <= 1):
        bad = arr[arr <= 1][0]
        raise InputError(
            f"{name} must all be > 1 (Renyi orders are defined for lambda > 1), "
            f"got an order {bad!r}"
        )
    return arr


def check_votes(votes: Any, name: str = "votes") -> IntArray:
    """A (queries, classes) int64 matrix of non-negative vote counts with equal row sums (floats
    are accepted when every entry is integral)."""
    arr = np.asarray(votes)
    if arr.dtype.kind not in "biuf":  # str, bytes and None (object) too
        raise InputTypeError(
            f"{name} must be a 2-D array of integer vote counts, got {describe(votes)}"
        )
    if arr.ndim != 2:
        raise InputError(
            f"{name} must be 2-D with shape (queries, classes), got shape {arr.shape}; "
            "for a single query pass votes[None, :]"
        )
    if arr.shape[1] < 2:
        raise InputError(f"{name} must have at least 2 classes (columns), got shape {arr.shape}")
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise InputError(
                f"{name} must hold integer vote counts, got non-integer values "
                f"(e.g. {arr[arr != np.round(arr)][:1].tolist()})"
            )
    out = arr.astype(np.int64, copy=False)
    if out.size and out.min() < 0:
        raise InputError(f"{name} must be non-negative counts, got a minimum of {int(out.min())}")
    if out.shape[0]:
        sums = out.sum(axis=1)
        if np.any(sums != sums[0]):
            row = int(np.argmax(sums != sums[0]))
            raise InputError(
                f"{name} rows must all sum to the number of teachers; row 0 sums to "
                f"{int(sums[0])} but row {row} sums to {int(sums[row])}"
            )
        if sums[0] <= 0:
            raise InputError(
                f"{name} rows must sum to the number of teachers (> 0), got {int(sums[0])}"
            )
    return out


def check_mask(mask: Any, length: int, name: str = "answered") -> BoolArray:
    """A 1-D boolean mask with one entry per query."""
    arr = np.asarray(mask)
    zero_one = np.issubdtype(arr.dtype, np.integer) and np.all((arr == 0) | (arr == 1))
    if arr.dtype != np.bool_:
        if not (arr.size and zero_one) and not (arr.size == 0 and arr.ndim == 1):
            raise InputTypeError(f"{name} must be a boolean mask, got {describe(mask)}")
        arr = arr.astype(bool)
    if arr.ndim != 1 or arr.shape[0] != length:
        raise InputError(
            f"{name} must be a 1-D mask with one entry per query ({length}), got shape {arr.shape}"
        )
    return arr


def check_baseline(baseline: Any, shape: tuple[int, int], name: str = "baseline") -> FloatArray:
    """Interactive-GNMax baseline (student probabilities x teachers): finite floats of ``shape``."""
    arr = _float_array(baseline, name, "an array of numbers")
    if arr.shape != tuple(shape):
        raise InputError(f"{name} must have the shape of the votes {tuple(shape)}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise InputError(f"{name} must be finite")
    return arr


def check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    """One of a fixed set of strings."""
    if value not in choices:
        raise InputError(
            f"{name} must be one of {', '.join(map(repr, choices))}; got {describe(value)}"
        )
    chosen: str = value  # one of ``choices``
    return chosen


def check_bool(value: Any, name: str) -> bool:
    """True or False (a numpy bool too), as a Python bool."""
    if not isinstance(value, (bool, np.bool_)):
        raise InputTypeError(f"{name} must be True or False, got {describe(value)}")
    return bool(value)


def check_unit_interval(value: Any, name: str) -> float:
    """A finite real number in [0, 1] (e.g. a confidence level or a fraction)."""
    return _as_real(value, name, lambda out: 0.0 <= out <= 1.0, "lie in [0, 1]")


def check_probabilities(probabilities: Any, shape: tuple[int, ...], name: str) -> FloatArray:
    """Finite float64 probabilities of ``shape`` in [0, 1], summing to 1 (within 1e-3) on the last
    axis; logits are refused with a hint."""
    arr = _float_array(probabilities, name, "an array of probabilities")
    if arr.shape != tuple(shape):
        raise InputError(f"{name} must have shape {tuple(shape)}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise InputError(f"{name} must be finite (found NaN or inf)")
    if arr.size:
        if arr.min() < 0 or arr.max() > 1:
            raise InputError(
                f"{name} must lie in [0, 1], got values in [{float(arr.min())!r}, "
                f"{float(arr.max())!r}]; if these are logits apply a softmax first"
            )
        off = float(np.max(np.abs(arr.sum(axis=-1) - 1.0)))
        if off > 1e-3:
            raise InputError(
                f"{name} must sum to 1 over the last axis (within 0.001); a row is "
                f"off by {off:.3g}; apply a softmax first"
            )
    return arr


def check_embeddings(value: Any, name: str) -> FloatArray:
    """A finite float64 (items, features >= 1) array of embeddings (``pate.core.knn``,
    ``pate.core.mean_release``)."""
    arr = _float_array(value, name, "a 2-D array of embeddings")
    if arr.ndim != 2 or arr.shape[1] < 1:
        raise InputError(
            f"{name} must be 2-D with shape (items, features >= 1), got shape {arr.shape}"
        )
    if not np.all(np.isfinite(arr)):
        raise InputError(f"{name} must be finite (found NaN or inf)")
    return arr


def check_labels(value: Any, length: int, num_classes: int, name: str = "labels") -> IntArray:
    """Integer class labels, one per private record (``length``), in [0, ``num_classes``), as
    int64."""
    arr = np.asarray(value)
    if arr.ndim != 1 or arr.shape[0] != length:
        raise InputError(
            f"{name} must be 1-D with one label per private record ({length}), got "
            f"shape {arr.shape}"
        )
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise InputTypeError(f"{name} must be integers, got dtype {arr.dtype}")
    if arr.size and (arr.min() < 0 or arr.max() >= num_classes):
        bad = arr[(arr < 0) | (arr >= num_classes)][0]
        raise InputError(
            f"{name} must lie in [0, num_classes={num_classes}), got a label {int(bad)}"
        )
    return arr.astype(np.int64, copy=False)


def check_moment(value: Any, name: str = "moment") -> float:
    """One moment l: a finite real number >= 1."""
    expected = "be a finite number >= 1 (the moments of [P17] are l = 1, 2, ...)"
    return _as_real(value, name, lambda out: out >= 1.0, expected)


def check_moments(moments: Any, name: str = "moments") -> FloatArray:
    """A non-empty 1-D array of finite moments, each >= 1."""
    arr = _float_array(moments, name, "a 1-D array of numbers >= 1")
    if arr.ndim != 1 or arr.size == 0:
        raise InputError(
            f"{name} must be a non-empty 1-D array of moments, got shape {arr.shape}; "
            "e.g. moments=range(1, 9)"
        )
    if not np.all(np.isfinite(arr)) or np.any(arr < 1.0):
        bad = arr[~(np.isfinite(arr) & (arr >= 1.0))][0]
        raise InputError(
            f"{name} must all be finite and >= 1, got a moment {bad!r}; e.g. moments=range(1, 9)"
        )
    return arr


def check_distances(k: Any, name: str = "k") -> tuple[IntArray, bool]:
    """k: an int >= 0 or a 1-D array of them. Returns (int64 array, was_scalar)."""
    if np.ndim(k) == 0:
        return np.array([check_int(k, name, minimum=0)], dtype=np.int64), True
    arr = np.asarray(k)
    if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
        raise InputTypeError(
            f"{name} must be an int >= 0 or a non-empty 1-D array of ints, got {describe(k)}"
        )
    if arr.min() < 0:
        raise InputError(
            f"{name} must be >= 0 (a distance between histograms), got {int(arr.min())}"
        )
    return arr.astype(np.int64), False
