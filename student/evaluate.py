"""Evaluation of the student on the held-out evaluation split (numpy only).

More: docs/student.md, "pate.student.evaluate".
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.validation import check_int, describe

__all__ = ["confusion_matrix", "evaluation_metrics"]


def _check_class_labels(values: Any, name: str, num_classes: int) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise InputError(f"{name} must be a 1-D array of class labels, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise InputTypeError(f"{name} must hold integer class labels, got {describe(arr)}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and (arr.min() < 0 or arr.max() >= num_classes):
        bad = int(arr[(arr < 0) | (arr >= num_classes)][0])
        raise InputError(
            f"{name} must lie in [0, {num_classes - 1}] (num_classes={num_classes}), "
            f"got a label {bad}"
        )
    return arr


def confusion_matrix(y_true: Any, y_pred: Any, *, num_classes: int) -> np.ndarray:
    """Counts ``[true class, predicted class]``; rows sum to the support of each class."""
    num_classes = check_int(num_classes, "num_classes", minimum=2)
    y_true = _check_class_labels(y_true, "y_true", num_classes)
    y_pred = _check_class_labels(y_pred, "y_pred", num_classes)
    if y_true.shape != y_pred.shape:
        raise InputError(
            f"y_true and y_pred must have the same length, got {y_true.shape[0]} "
            f"and {y_pred.shape[0]}"
        )
    flat = np.bincount(y_true * num_classes + y_pred, minlength=num_classes * num_classes)
    return flat.reshape(num_classes, num_classes).astype(np.int64)


def evaluation_metrics(y_true: Any, y_pred: Any, *, num_classes: int) -> dict:
    """Accuracy, per-class accuracy and confusion matrix as a JSON-able dict."""
    cm = confusion_matrix(y_true, y_pred, num_classes=num_classes)
    support = cm.sum(axis=1)
    total = int(support.sum())
    if total == 0:
        raise InputError("y_true is empty: evaluation needs at least one labelled example")
    correct = np.diag(cm)
    per_class = [float(c / s) if s > 0 else None for c, s in zip(correct, support)]
    return {
        "accuracy": float(correct.sum() / total),
        "num_examples": total,
        "num_classes": int(num_classes),
        "per_class_accuracy": per_class,
        "per_class_support": [int(s) for s in support],
        "confusion_matrix": cm.tolist(),
    }
