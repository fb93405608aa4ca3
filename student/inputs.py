"""What may reach the student, checked: its public inputs, released labels and soft targets.

More: docs/student.md, "pate.student.inputs".
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import scipy.sparse
import torch
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import column_or_1d
from torch import nn

from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.validation import describe


def refuse_non_public(obj: Any, name: str) -> None:
    """TypeError for the things that must never reach the student."""
    if all(hasattr(obj, a) for a in ("private", "public", "evaluation")):  # a PateData
        raise InputTypeError(
            f"{name} is a PateData object, which holds the private split; the student may only see "
            "the public inputs. Pass data.public.x as public_x and the released labels "
            "(e.g. <run_dir>/labels.npy) as labels"
        )
    if hasattr(obj, "x") and hasattr(obj, "y") and not isinstance(obj, np.ndarray):
        raise InputTypeError(
            f"{name} is an ArraySplit ({type(obj).__name__}), which carries true labels; pass the "
            "public inputs array (split.x) as public_x and the aggregator's released labels as labels"
        )
    if hasattr(obj, "public_predictions") or hasattr(obj, "teacher_accuracy"):
        raise InputTypeError(
            f"{name} is a teacher ensemble result ({type(obj).__name__}); the student must never "
            "receive the teachers' predictions or weights. Vote and aggregate (pate vote, pate "
            "aggregate) and pass the public inputs and the released labels only"
        )
    # a model, a non-empty list of models, or a state dict (teacher weights)
    parts = list(obj.values()) if isinstance(obj, dict) else obj
    kind = torch.Tensor if isinstance(obj, dict) else nn.Module
    if isinstance(obj, nn.Module) or (
        isinstance(obj, (list, tuple, dict)) and parts and all(isinstance(p, kind) for p in parts)
    ):
        raise InputTypeError(
            f"{name} is a model / teacher ensemble / state dict; the student must never receive "
            "teacher weights. Pass the public inputs and the released labels only"
        )


def as_array(obj: Any, name: str, what: str) -> np.ndarray:
    """A numpy array from an array-like (list, tensor, DataFrame); sparse matrices are refused."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().numpy()
    if scipy.sparse.issparse(obj):
        raise InputTypeError(
            f"{name} is a scipy sparse matrix; sparse input is not supported: pass a "
            f"dense array ({name}.toarray())"
        )
    if isinstance(obj, np.ndarray):
        return obj
    if isinstance(obj, (list, tuple)) or hasattr(obj, "__array__"):
        return np.asarray(obj)
    raise InputTypeError(f"{name} must be {what}, got {describe(obj)} of type {type(obj).__name__}")


def check_inputs(x: Any, name: str, *, fit: bool) -> np.ndarray:
    """Inputs as a C-contiguous, writeable float32 array (N, C, H, W) or (N, F). Refused: what
    must never reach the student (:func:`refuse_non_public`), integer arrays (a 2-D one looks
    like a votes matrix), complex, sparse, NaN/inf, other ranks, and (``fit``) no rows or
    (tabular) no features."""
    refuse_non_public(x, name)
    x = as_array(x, name, "a numpy array of public inputs (or an array-like of floats)")
    if x.dtype == object:
        x = x.astype(np.float64)  # TypeError naming the bad element when it is not a number
    if np.iscomplexobj(x):
        raise InputError(
            f"Complex data not supported: {name} has dtype {x.dtype}; pass real "
            "images in [0, 1] or real tabular features"
        )
    if not np.issubdtype(x.dtype, np.floating):
        hint = (
            "; a 2-D integer array looks like a votes matrix: aggregate the votes first "
            "(pate aggregate) and pass the released labels"
            if x.ndim == 2 and np.issubdtype(x.dtype, np.integer)
            else f"; convert it with {name}.astype(np.float32) if these are really features"
        )
        raise InputTypeError(
            f"{name} must be a float array (images in [0, 1] or tabular features), "
            f"got {describe(x)}{hint}"
        )
    if x.ndim not in (2, 4):
        extra = {
            3: " (for grayscale (N, H, W) images pass x[:, None])",
            1: ". Reshape your data either using x.reshape(-1, 1) if it has a single feature or "
            "x.reshape(1, -1) if it contains a single sample",
        }.get(x.ndim, "")
        raise InputError(f"{name} must have shape (N, C, H, W) or (N, F), got {x.shape}{extra}")
    if fit and x.shape[0] == 0:
        raise InputError(f"{name} is empty (shape {x.shape}): the student needs public inputs")
    if x.ndim == 2 and x.shape[1] == 0:
        raise InputError(
            f"{name} has 0 feature(s) (shape={x.shape}) while a minimum of 1 is required."
        )
    if not np.all(np.isfinite(x)):
        raise InputError(f"{name} contains NaN or infinite values")
    x = np.ascontiguousarray(x, dtype=np.float32)
    return x if x.flags.writeable else x.copy()


def check_public_x(public_x: Any) -> np.ndarray:
    """:func:`check_inputs` for fitting, with the argument named ``public_x``."""
    return check_inputs(public_x, "public_x", fit=True)


def check_labels(
    labels: Any, num_public: int, num_classes: int | None, name: str = "labels"
) -> tuple[np.ndarray, np.ndarray]:
    """``(encoded, classes)``: int64 class indices (-1 = unlabelled) and ``classes_``
    (docs/student.md, "The estimator's contract"). Refused: votes, per-teacher predictions,
    probabilities, continuous targets, labels below -1 or at/above ``num_classes``, no answered
    item, and a single class when ``num_classes`` is not given."""
    refuse_non_public(labels, name)
    if labels is None:
        raise InputError(
            f"Student requires y to be passed, but the target y is None: pass {name}, "
            "the released label of each public item (-1 = unanswered)"
        )
    labels = as_array(labels, name, "a 1-D array of released labels (-1 = unanswered)")
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = column_or_1d(labels, warn=True)  # a column vector: DataConversionWarning
    _check_label_shape(labels, name, num_public)
    kind = labels.dtype.kind
    if kind == "f":
        if not np.all(np.isfinite(labels)):
            raise InputError(f"{name} contains NaN or infinite values")
        # Integral floats are class indices; anything else is a regression target.
        if np.any(labels != -1):
            check_classification_targets(labels[labels != -1])  # ValueError: Unknown label type
        labels, kind = labels.astype(np.int64), "i"
    if kind in "iu":
        return _encode_class_indices(labels, name, num_classes)
    return _encode_class_labels(labels, name, num_classes)


def _check_label_shape(labels: np.ndarray, name: str, num_public: int) -> None:
    """Refuse what is not one released label per public item (votes, predictions, ...)."""
    if labels.ndim == 2:
        if np.issubdtype(labels.dtype, np.integer):
            raise InputTypeError(
                f"{name} has shape {labels.shape}, which looks like a votes matrix (queries, classes) "
                "or per-teacher predictions (teachers, queries); the student must never see the "
                "teachers' votes or predictions. Aggregate them (pate aggregate) and pass the "
                "released labels, shape (N_public,), -1 where unanswered"
            )
        raise InputTypeError(
            f"{name} has shape {labels.shape} (probabilities or one-hot?); pass hard "
            "released labels of shape (N_public,), -1 where unanswered"
        )
    if labels.ndim == 3:
        raise InputTypeError(
            f"{name} has shape {labels.shape}, which looks like per-teacher predictions; "
            "the student may only receive the aggregator's released labels (N_public,)"
        )
    if labels.ndim != 1:
        raise InputError(f"{name} must be 1-D (N_public,), got shape {labels.shape}")
    if labels.shape[0] != num_public:
        raise InputError(
            f"{name} has {labels.shape[0]} entries but the inputs have {num_public} "
            "items: pass one released label per public item (-1 = unanswered)"
        )


def _encode_class_indices(
    labels: np.ndarray, name: str, num_classes: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """``(encoded, classes)`` of integer class indices (-1 = unanswered), checked."""
    labels = labels.astype(np.int64)
    if labels.min() < -1:
        raise InputError(
            f"{name} must be -1 (unanswered) or a class index, got {int(labels.min())}"
        )
    if num_classes is not None and labels.max() >= num_classes:
        raise InputError(f"{name} must be < num_classes={num_classes}, got {int(labels.max())}")
    if not np.any(labels >= 0):
        raise InputError(
            f"{name} has no answered item (all -1): the student needs at least one label"
        )
    k = num_classes if num_classes is not None else int(labels.max()) + 1
    if k < 2:
        raise InputError(
            f"only one class (class 0) was answered in {name}; pass num_classes= "
            "explicitly (the student needs at least 2 classes)"
        )
    return labels, np.arange(k, dtype=np.int64)


def _encode_class_labels(
    labels: np.ndarray, name: str, num_classes: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """``(encoded, classes)`` of class labels (strings, booleans, objects; -1 or None =
    unanswered in an object array): indices into the sorted ``classes``."""
    kind = labels.dtype.kind
    if kind not in "OUSb":
        raise InputTypeError(
            f"{name} must hold class indices (-1 = unanswered) or class labels "
            f"(strings, booleans), got {describe(labels)}"
        )
    answered = np.ones(labels.shape[0], dtype=bool)
    if kind == "O":  # an integer -1 (not True, not -1.0) marks an unlabelled item
        integer = (numbers.Integral, np.integer)
        answered = np.array(
            [not (isinstance(v, integer) and not isinstance(v, bool) and v == -1) for v in labels],
            dtype=bool,
        )
    if not answered.any():
        raise InputError(
            f"{name} has no answered item (all -1): the student needs at least one label"
        )
    check_classification_targets(labels[answered])
    try:
        classes, encoded = np.unique(labels[answered], return_inverse=True)
    except TypeError as exc:
        raise InputTypeError(
            f"{name} mixes label types that cannot be ordered ({exc}); use one type "
            "(e.g. all strings), -1 for unanswered items"
        ) from exc
    if classes.shape[0] < 2:
        raise InputError(
            f"only one class ({classes[0]!r}) was answered in {name}; the student "
            "needs at least 2 classes"
        )
    if num_classes is not None and num_classes != classes.shape[0]:
        raise InputError(
            f"num_classes={num_classes} but {name} holds {classes.shape[0]} distinct "
            f"labels {classes.tolist()!r}; num_classes only applies to integer class "
            "indices: leave it None for other labels"
        )
    out = np.full(labels.shape[0], -1, dtype=np.int64)
    out[answered] = encoded.reshape(-1)
    return out, classes


def check_soft_targets(soft_targets: Any, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Soft targets checked against the encoded ``labels``, as float64 (N, num_classes) with the
    unlabelled rows zeroed (docs/student.md, "The estimator's contract")."""
    refuse_non_public(soft_targets, "soft_targets")
    targets = as_array(soft_targets, "soft_targets", "an (N, classes) array of class probabilities")
    if targets.dtype.kind in "iub":
        raise InputTypeError(
            f"soft_targets has integer dtype {targets.dtype} (a votes matrix?); the "
            "student never sees votes: pass float class probabilities, or none"
        )
    if targets.dtype.kind != "f":
        raise InputTypeError(
            f"soft_targets must be float class probabilities, got {describe(targets)}"
        )
    expected = (labels.shape[0], num_classes)
    if targets.shape != expected:
        raise InputError(
            f"soft_targets must have shape {expected} (one row of class "
            f"probabilities per item, columns in the order of classes_), got "
            f"{targets.shape}"
        )
    targets = targets.astype(np.float64)
    rows = labels >= 0
    labelled = targets[rows]
    if not np.all(np.isfinite(labelled)) or labelled.min(initial=0.0) < 0:
        raise InputError("soft_targets must be finite and non-negative on the labelled items")
    sums = labelled.sum(axis=1)
    if not np.allclose(sums, 1.0, rtol=0, atol=1e-6):
        worst = int(np.argmax(np.abs(sums - 1.0)))
        raise InputError(
            f"soft_targets' rows must sum to 1 (class probabilities); the labelled "
            f"item {int(np.flatnonzero(rows)[worst])} sums to {sums[worst]:.6g}"
        )
    below_max = labelled[np.arange(labelled.shape[0]), labels[rows]] < labelled.max(axis=1)
    if np.any(below_max):
        bad = int(np.flatnonzero(rows)[int(np.argmax(below_max))])
        raise InputError(
            f"soft_targets disagree with y: item {bad} is labelled "
            f"{int(labels[bad])} but its largest probability is at class "
            f"{int(np.argmax(targets[bad]))}; pass the probabilities the labels "
            "were taken from"
        )
    out = np.zeros(expected)
    out[rows] = labelled / sums[:, None]
    return out
