"""Training the student: supervised or semi-supervised (FixMatch) on the privately labelled public split.

The student is the only model PATE releases. It is trained on the *public* inputs only: the
items the aggregator answered carry its noisy labels, the unanswered ones are unlabelled data.
Nothing else may reach it -- never the private split, the teachers' votes or the teachers'
weights -- and :func:`train_student` enforces this at the API: it takes an array of public
inputs and a 1-D array of released labels, and refuses anything else with a ``TypeError``.

Symbols
-------
``train_student(public_x, labels, *, model="auto", method="fixmatch", **settings) -> Student``
    ``public_x``: (N_public, C, H, W) images in [0, 1] or (N_public, F) tabular float features;
    ``labels``: (N_public,) int64, the released label of each public item or ``-1`` where the
    aggregator did not answer. Returns a fitted :class:`Student`.
``Student(...)``
    A scikit-learn classifier (``ClassifierMixin`` + ``BaseEstimator``): the constructor stores
    settings (keyword-only), ``fit(X, y)`` returns ``self``, ``random_state`` is None, a
    non-negative int or a ``numpy.random.Generator`` such as
    ``pate.rng.make_streams(seed).student`` (consumed by ``fit``, like a ``RandomState``).
    Fitted attributes end in ``_``: ``classes_``, ``n_features_in_`` (``X.shape[1]`` as
    scikit-learn counts it: features of tabular inputs, channels of images), ``model_``,
    ``model_name_``, ``num_classes_``, ``input_shape_``, ``history_``, ``seed_``, ``device_``,
    ``settings_``, ``n_labelled_``. ``predict_proba(X)``, ``predict(X)``, ``score(X, y)``
    (accuracy, from ``ClassifierMixin``), ``save(path)``, ``Student.load(path)``,
    ``get_params()`` / ``set_params()`` / ``sklearn.base.clone``. Works in
    ``sklearn.pipeline.make_pipeline`` and ``sklearn.model_selection.cross_val_score``.
``STUDENT_CHECKS_EXPECTED_TO_FAIL``
    ``{check name: reason}``: the scikit-learn estimator checks
    (``sklearn.utils.estimator_checks``) the Student fails by design, for
    ``expected_failed_checks=``.
``STUDENT_CHECKS_PLATFORM_DEPENDENT``
    ``{check name: reason}``: checks that pass or fail by float32 rounding of the platform's
    kernels (expected failures where they fail, never silently skipped).
``logger``: ``logging.getLogger("pate.student")`` (shown by the pate CLI).

Labels (``y``)
--------------
``-1`` marks an unlabelled item (the aggregator did not answer); it is never a class.
Integer labels (and floats with integral values) are class indices ``0 .. num_classes - 1``:
``classes_`` is ``arange(num_classes)`` with ``num_classes`` the parameter or
``max(y) + 1`` -- a class with no answered item is still a class (PATE's released labels).
Any other labels (strings, booleans, objects; ``-1`` in an object array = unlabelled) are
encoded by their sorted distinct answered values, which become ``classes_``; ``predict``
returns them. Continuous targets are refused (``ValueError: Unknown label type``).

Soft targets (``fit(X, y, soft_targets=P)``)
-------------------------------------------
``P`` (N, len(classes_)) float class probabilities per public item (rows of the labelled items
non-negative, summing to 1, their largest entry at the item's label in ``y``; unlabelled rows
are ignored). The labelled loss is then the cross-entropy to ``P``'s row instead of to the
one-hot label: a labelling rule's confidence (``pate.class_means``: the noisy class means'
logistic rule, whose released class scores are post-processing of the charged release) tells
the student which released labels are doubtful. Integer matrices are refused (votes never reach
the student), as are rows that are not probabilities (a float votes matrix sums to the number of
teachers).

``METHODS``: ``("fixmatch", "supervised")``.
``resolve_device(spec)``: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"``, ``"cuda:N"``.
``auto_model_name(input_shape)``: the zoo model used for ``model="auto"``.
``CHECKPOINT_NAME``: file name of the per-epoch checkpoint inside ``checkpoint_dir``.

Methods
-------
* ``"supervised"``: cross-entropy on the answered items, with the weak augmentation.
* ``"fixmatch"`` (Sohn et al. 2020, "FixMatch: Simplifying Semi-Supervised Learning with
  Consistency and Confidence", NeurIPS): each step draws ``batch_size`` labelled items and
  ``unlabeled_ratio * batch_size`` items of the whole public pool. The loss is the
  cross-entropy on the weakly augmented labelled batch plus ``unlabeled_weight`` times the
  cross-entropy between the model's prediction on a *strongly* augmented view and the hard
  pseudo-label of the *weakly* augmented view, kept only where the pseudo-label's confidence
  is at least ``threshold``. SGD with Nesterov momentum, cosine decay ``lr * cos(7 pi k / 16 K)``,
  optional exponential moving average of the weights (``ema_decay``) used for prediction.
  Images use :func:`pate.student.augment.weak_augment` / :func:`pate.student.augment.strong_augment`;
  tabular features use Gaussian jitter and SCARF-style feature corruption
  (:mod:`pate.student.augment`).

Inputs are standardised inside the model by the public pool's per-channel (images) or
per-feature (tabular) mean and standard deviation (public statistics only).

Reproducibility and resume: every random draw (initialisation, batches, augmentations) comes
from one seed. With ``checkpoint_dir`` a checkpoint (model, EMA, optimiser, generator state,
history) is written atomically after every epoch; ``resume=True`` continues from it and gives
the same weights as an uninterrupted run. A checkpoint is tied to a fingerprint of the
inputs, labels and settings; resuming with anything different is refused.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import math
import numbers
import os
import pathlib
import sys
import time
from typing import Any, Callable

import numpy as np
import scipy.sparse
import torch
import torch.nn.functional as F
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import NotFittedError
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import column_or_1d, validate_data
from torch import nn

from pate.analysis.validation import (check_choice, check_int, check_nonnegative, check_positive,
                                      describe)
from pate.student import augment as aug

__all__ = ["train_student", "Student", "METHODS", "resolve_device", "auto_model_name",
           "auto_epochs", "short_training_warning", "MIN_STUDENT_STEPS",
           "CHECKPOINT_NAME", "STUDENT_CHECKS_EXPECTED_TO_FAIL", "STUDENT_CHECKS_PLATFORM_DEPENDENT"]

logger = logging.getLogger("pate.student")  # shown by the pate CLI

#: ``epochs=None`` (the default, "auto"): at least this many optimiser steps in all, whatever the
#: number of labelled or public items (docs/student.md, "Training length"). Before, a fixed 20
#: epochs gave scikit-learn digits' 597 public items 2 FixMatch steps per epoch: 40 steps, and a
#: student at 14.5 % while its labels were 53 % right.
MIN_STUDENT_STEPS = 1000
#: ... and at least this many epochs (the former fixed default).
MIN_STUDENT_EPOCHS = 20


def auto_epochs(steps_per_epoch: int) -> int:
    """Epochs of ``epochs=None``: ``max(MIN_STUDENT_EPOCHS, ceil(MIN_STUDENT_STEPS /
    steps_per_epoch))``."""
    return max(MIN_STUDENT_EPOCHS, math.ceil(MIN_STUDENT_STEPS / max(1, int(steps_per_epoch))))


def short_training_warning(epochs: int, steps_per_epoch: int) -> str:
    """The warning for a student trained fewer than :data:`MIN_STUDENT_STEPS` steps."""
    return (f"the student trains only {epochs * steps_per_epoch} optimiser steps ({epochs} epochs "
            f"x {steps_per_epoch} steps), fewer than {MIN_STUDENT_STEPS}: it may stay far below "
            f"its labels. Leave epochs unset (auto: at least {MIN_STUDENT_STEPS} steps) or raise "
            f"it (student_params={{'epochs': ...}} in pate.fit, [student] epochs in a config)")

METHODS = ("fixmatch", "supervised")
CHECKPOINT_NAME = "student_checkpoint.pt"
_FORMAT = "pate-learn-student/1"
_ALIGNMENT_MOMENTUM = 0.99    # distribution alignment's running mean: about the last 100 steps

# Settings that change the trained weights (part of the checkpoint fingerprint).
_TRAINING_PARAMS = ("model", "method", "epochs", "steps_per_epoch", "batch_size", "unlabeled_ratio",
                    "threshold", "unlabeled_weight", "learning_rate", "momentum", "weight_decay",
                    "ema_decay", "flip", "pad", "strong_ops", "cutout", "num_classes",
                    "distribution_alignment")
_OTHER_PARAMS = ("device", "random_state", "progress", "checkpoint_dir", "resume", "on_epoch_end",
                 "validation")


# --------------------------------------------------------------------------- helpers

def resolve_device(spec: Any = "auto") -> torch.device:
    """``"auto"`` -> CUDA if available else CPU; ``"cpu"``; ``"cuda"`` / ``"cuda:N"`` (must exist).

    The same rules and messages as the teachers (``pate.teachers.ensemble.resolve_device``).
    """
    from pate.teachers.ensemble import resolve_device as _resolve

    if isinstance(spec, torch.device):
        spec = str(spec)
    return torch.device(_resolve(spec))


def auto_model_name(input_shape: tuple[int, ...]) -> str:
    """The zoo model for ``model="auto"``: cnn28 / cnn32 / cnn8 by image side, else the MLP."""
    if len(input_shape) == 3:
        side = input_shape[1:]
        if side == (28, 28):
            return "cnn28"
        if side == (32, 32):
            return "cnn32"
        if side == (8, 8):
            return "cnn8"
    return "mlp"


def _looks_like_pate_data(obj: Any) -> bool:
    return all(hasattr(obj, a) for a in ("private", "public", "evaluation"))


def _looks_like_split(obj: Any) -> bool:
    return hasattr(obj, "x") and hasattr(obj, "y") and not isinstance(obj, np.ndarray)


def _is_model_like(obj: Any) -> bool:
    if isinstance(obj, nn.Module):
        return True
    if isinstance(obj, (list, tuple)) and obj and all(isinstance(o, nn.Module) for o in obj):
        return True
    if isinstance(obj, dict) and len(obj) > 0 and all(isinstance(v, torch.Tensor) for v in obj.values()):
        return True   # a state dict (teacher weights)
    return False


def _refuse_non_public(obj: Any, name: str) -> None:
    """TypeError for the things that must never reach the student."""
    if _looks_like_pate_data(obj):
        raise TypeError(
            f"{name} is a PateData object, which holds the private split; the student may only see "
            "the public inputs. Pass data.public.x as public_x and the released labels "
            "(e.g. <run_dir>/labels.npy) as labels")
    if _looks_like_split(obj):
        raise TypeError(
            f"{name} is an ArraySplit ({type(obj).__name__}), which carries true labels; pass the "
            "public inputs array (split.x) as public_x and the aggregator's released labels as labels")
    if hasattr(obj, "public_predictions") or hasattr(obj, "teacher_accuracy"):
        raise TypeError(
            f"{name} is a teacher ensemble result ({type(obj).__name__}); the student must never "
            "receive the teachers' predictions or weights. Vote and aggregate (pate vote, pate "
            "aggregate) and pass the public inputs and the released labels only")
    if _is_model_like(obj):
        raise TypeError(
            f"{name} is a model / teacher ensemble / state dict; the student must never receive "
            "teacher weights. Pass the public inputs and the released labels only")


def _plain_classes(classes: np.ndarray) -> list:
    """``classes_`` as a list of Python str / int / float / bool (what a weights-only file holds)."""
    out = [c.item() if isinstance(c, np.generic) else c for c in classes.tolist()]
    bad = [c for c in out if not isinstance(c, (str, int, float, bool))]
    if bad:
        raise TypeError(f"cannot save a Student whose classes_ hold {type(bad[0]).__name__} labels "
                        f"({bad[0]!r}); use str or int labels to save it")
    return out


def _as_array(obj: Any, name: str, what: str) -> np.ndarray:
    """A numpy array from an array-like (list, tensor, DataFrame); sparse matrices are refused."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().numpy()
    if scipy.sparse.issparse(obj):
        raise TypeError(f"{name} is a scipy sparse matrix; sparse input is not supported: pass a "
                        f"dense array ({name}.toarray())")
    if isinstance(obj, np.ndarray):
        return obj
    if isinstance(obj, (list, tuple)) or hasattr(obj, "__array__"):
        return np.asarray(obj)
    raise TypeError(f"{name} must be {what}, got {describe(obj)} of type {type(obj).__name__}")


def _check_inputs(x: Any, name: str, *, fit: bool) -> np.ndarray:
    """Inputs as a C-contiguous, writeable float32 array (N, C, H, W) or (N, F).

    Refused: the things that must never reach the student (:func:`_refuse_non_public`),
    integer arrays (a 2-D one looks like a votes matrix), complex, sparse, NaN/inf, other ranks,
    and (``fit``) no rows or (tabular) no features.
    """
    _refuse_non_public(x, name)
    x = _as_array(x, name, "a numpy array of public inputs (or an array-like of floats)")
    if x.dtype == object:
        x = x.astype(np.float64)   # TypeError naming the bad element when it is not a number
    if np.iscomplexobj(x):
        raise ValueError(f"Complex data not supported: {name} has dtype {x.dtype}; pass real "
                         "images in [0, 1] or real tabular features")
    if not np.issubdtype(x.dtype, np.floating):
        hint = ("; a 2-D integer array looks like a votes matrix: aggregate the votes first "
                "(pate aggregate) and pass the released labels" if x.ndim == 2
                and np.issubdtype(x.dtype, np.integer) else
                f"; convert it with {name}.astype(np.float32) if these are really features")
        raise TypeError(f"{name} must be a float array (images in [0, 1] or tabular features), "
                        f"got {describe(x)}{hint}")
    if x.ndim not in (2, 4):
        extra = (" (for grayscale (N, H, W) images pass x[:, None])" if x.ndim == 3 else
                 ". Reshape your data either using x.reshape(-1, 1) if it has a single feature or "
                 "x.reshape(1, -1) if it contains a single sample" if x.ndim == 1 else "")
        raise ValueError(f"{name} must have shape (N, C, H, W) or (N, F), got {x.shape}{extra}")
    if fit and x.shape[0] == 0:
        raise ValueError(f"{name} is empty (shape {x.shape}): the student needs public inputs")
    if x.ndim == 2 and x.shape[1] == 0:
        raise ValueError(f"{name} has 0 feature(s) (shape={x.shape}) while a minimum of 1 is "
                         "required.")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} contains NaN or infinite values")
    x = np.ascontiguousarray(x, dtype=np.float32)
    return x if x.flags.writeable else x.copy()


def _check_public_x(public_x: Any) -> np.ndarray:
    """:func:`_check_inputs` for fitting, with the argument named ``public_x``."""
    return _check_inputs(public_x, "public_x", fit=True)


def _unlabelled_mask(y: np.ndarray) -> np.ndarray:
    """Where an object array holds the integer -1 (the unlabelled marker)."""
    return np.fromiter((isinstance(v, (numbers.Integral, np.integer)) and not isinstance(v, bool)
                        and v == -1 for v in y), dtype=bool, count=y.shape[0])


def _check_labels(labels: Any, num_public: int, num_classes: int | None,
                  name: str = "labels") -> tuple[np.ndarray, np.ndarray]:
    """``(encoded, classes)``: int64 class indices (-1 = unlabelled) and ``classes_``.

    See "Labels" in the module docstring. Refused: votes matrices, per-teacher predictions,
    probabilities, continuous targets, labels below -1 or at/above ``num_classes``, no answered
    item, and a single class when ``num_classes`` is not given.
    """
    _refuse_non_public(labels, name)
    if labels is None:
        raise ValueError(f"Student requires y to be passed, but the target y is None: pass {name}, "
                         "the released label of each public item (-1 = unanswered)")
    labels = _as_array(labels, name, "a 1-D array of released labels (-1 = unanswered)")
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = column_or_1d(labels, warn=True)   # a column vector: DataConversionWarning
    if labels.ndim == 2:
        if np.issubdtype(labels.dtype, np.integer):
            raise TypeError(
                f"{name} has shape {labels.shape}, which looks like a votes matrix (queries, classes) "
                "or per-teacher predictions (teachers, queries); the student must never see the "
                "teachers' votes or predictions. Aggregate them (pate aggregate) and pass the "
                "released labels, shape (N_public,), -1 where unanswered")
        raise TypeError(f"{name} has shape {labels.shape} (probabilities or one-hot?); pass hard "
                        "released labels of shape (N_public,), -1 where unanswered")
    if labels.ndim == 3:
        raise TypeError(f"{name} has shape {labels.shape}, which looks like per-teacher predictions; "
                        "the student may only receive the aggregator's released labels (N_public,)")
    if labels.ndim != 1:
        raise ValueError(f"{name} must be 1-D (N_public,), got shape {labels.shape}")
    if labels.shape[0] != num_public:
        raise ValueError(f"{name} has {labels.shape[0]} entries but the inputs have {num_public} "
                         "items: pass one released label per public item (-1 = unanswered)")
    kind = labels.dtype.kind
    if kind == "f":
        if not np.all(np.isfinite(labels)):
            raise ValueError(f"{name} contains NaN or infinite values")
        # Integral floats are class indices; anything else is a regression target.
        if np.any(labels != -1):
            check_classification_targets(labels[labels != -1])   # ValueError: Unknown label type
        labels, kind = labels.astype(np.int64), "i"
    if kind in "iu":
        labels = labels.astype(np.int64)
        if labels.min() < -1:
            raise ValueError(f"{name} must be -1 (unanswered) or a class index, got "
                             f"{int(labels.min())}")
        if num_classes is not None and labels.max() >= num_classes:
            raise ValueError(f"{name} must be < num_classes={num_classes}, got {int(labels.max())}")
        if not np.any(labels >= 0):
            raise ValueError(f"{name} has no answered item (all -1): the student needs at least "
                             "one label")
        k = num_classes if num_classes is not None else int(labels.max()) + 1
        if k < 2:
            raise ValueError(f"only one class (class 0) was answered in {name}; pass num_classes= "
                             "explicitly (the student needs at least 2 classes)")
        return labels, np.arange(k, dtype=np.int64)
    if kind not in "OUSb":
        raise TypeError(f"{name} must hold class indices (-1 = unanswered) or class labels "
                        f"(strings, booleans), got {describe(labels)}")
    answered = ~_unlabelled_mask(labels) if kind == "O" else np.ones(labels.shape[0], dtype=bool)
    if not answered.any():
        raise ValueError(f"{name} has no answered item (all -1): the student needs at least one label")
    check_classification_targets(labels[answered])
    try:
        classes, encoded = np.unique(labels[answered], return_inverse=True)
    except TypeError as exc:
        raise TypeError(f"{name} mixes label types that cannot be ordered ({exc}); use one type "
                        "(e.g. all strings), -1 for unanswered items") from exc
    if classes.shape[0] < 2:
        raise ValueError(f"only one class ({classes[0]!r}) was answered in {name}; the student "
                         "needs at least 2 classes")
    if num_classes is not None and num_classes != classes.shape[0]:
        raise ValueError(f"num_classes={num_classes} but {name} holds {classes.shape[0]} distinct "
                         f"labels {classes.tolist()!r}; num_classes only applies to integer class "
                         "indices: leave it None for other labels")
    out = np.full(labels.shape[0], -1, dtype=np.int64)
    out[answered] = encoded.reshape(-1)
    return out, classes


def _check_soft_targets(soft_targets: Any, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Soft targets as float64 (N, num_classes), checked ("Soft targets" in the module
    docstring); ``labels`` are the encoded labels (-1 = unlabelled). Unlabelled rows are zeroed."""
    _refuse_non_public(soft_targets, "soft_targets")
    targets = _as_array(soft_targets, "soft_targets", "an (N, classes) array of class probabilities")
    if targets.dtype.kind in "iub":
        raise TypeError(f"soft_targets has integer dtype {targets.dtype} (a votes matrix?); the "
                        "student never sees votes: pass float class probabilities, or none")
    if targets.dtype.kind != "f":
        raise TypeError(f"soft_targets must be float class probabilities, got {describe(targets)}")
    expected = (labels.shape[0], num_classes)
    if targets.shape != expected:
        raise ValueError(f"soft_targets must have shape {expected} (one row of class "
                         f"probabilities per item, columns in the order of classes_), got "
                         f"{targets.shape}")
    targets = targets.astype(np.float64)
    rows = labels >= 0
    labelled = targets[rows]
    if not np.all(np.isfinite(labelled)) or labelled.min(initial=0.0) < 0:
        raise ValueError("soft_targets must be finite and non-negative on the labelled items")
    sums = labelled.sum(axis=1)
    if not np.allclose(sums, 1.0, rtol=0, atol=1e-6):
        worst = int(np.argmax(np.abs(sums - 1.0)))
        raise ValueError(f"soft_targets' rows must sum to 1 (class probabilities); the labelled "
                         f"item {int(np.flatnonzero(rows)[worst])} sums to {sums[worst]:.6g}")
    below_max = labelled[np.arange(labelled.shape[0]), labels[rows]] < labelled.max(axis=1)
    if np.any(below_max):
        bad = int(np.flatnonzero(rows)[int(np.argmax(below_max))])
        raise ValueError(f"soft_targets disagree with y: item {bad} is labelled "
                         f"{int(labels[bad])} but its largest probability is at class "
                         f"{int(np.argmax(targets[bad]))}; pass the probabilities the labels "
                         "were taken from")
    out = np.zeros(expected)
    out[rows] = labelled / sums[:, None]
    return out


def _seed_from(random_state: Any) -> int | None:
    if random_state is None:
        return None
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(0, 2**63 - 1))
    if isinstance(random_state, (numbers.Integral, np.integer)) and not isinstance(random_state, bool):
        return check_int(random_state, "random_state", minimum=0)
    raise TypeError(f"random_state must be None, a non-negative int or a numpy.random.Generator "
                    f"(e.g. pate.rng.make_streams(seed).student), got {describe(random_state)}")


def _atomic_torch_save(obj: Any, path: pathlib.Path) -> None:
    from pate.teachers.checkpoint import atomic_torch_save

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_torch_save(path, obj)


class _Standardize(nn.Module):
    """Standardises inputs with the public pool's statistics, then applies the network."""

    def __init__(self, net: nn.Module, mean: torch.Tensor, std: torch.Tensor) -> None:
        super().__init__()
        self.net = net
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net((x - self.mean) / self.std)


def _input_stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (images) or per-feature (tabular) mean/std, shaped for broadcasting."""
    if x.ndim == 4:
        mean = x.mean(axis=(0, 2, 3), dtype=np.float64)[None, :, None, None]
        std = x.std(axis=(0, 2, 3), dtype=np.float64)[None, :, None, None]
    else:
        mean = x.mean(axis=0, dtype=np.float64)[None, :]
        std = x.std(axis=0, dtype=np.float64)[None, :]
    std = np.where(std > 1e-6, std, 1.0)
    return mean.astype(np.float32), std.astype(np.float32)


def _accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray, *, device: torch.device) -> float:
    model.eval()
    correct = 0
    with torch.no_grad():
        for start in range(0, x.shape[0], 1024):
            chunk = torch.from_numpy(np.ascontiguousarray(x[start:start + 1024], dtype=np.float32))
            pred = model(chunk.to(device)).argmax(dim=1).cpu().numpy()
            correct += int(np.sum(pred == y[start:start + 1024]))
    return correct / max(1, x.shape[0])


# --------------------------------------------------------------------------- the estimator

_INTEGER_X_REASON = (
    "integer X is refused by design: a 2-D integer array is what the teachers' votes matrix looks "
    "like, and votes must never reach the student (real integer features: X.astype(np.float32))")

STUDENT_CHECKS_EXPECTED_TO_FAIL = {
    "check_estimators_dtypes": _INTEGER_X_REASON,
    "check_classifier_data_not_an_array": _INTEGER_X_REASON + "; this check's X is an integer array",
    "check_classifiers_classes": (
        "-1 marks an unlabelled item (semi-supervised), so this check's labels {-1, 1} are one "
        "class plus unlabelled data, not two classes"),
}

STUDENT_CHECKS_PLATFORM_DEPENDENT = {
    "check_methods_subset_invariance": (
        "the network computes in float32 and some CPU BLAS kernels round a batch of one row "
        "differently from a larger batch, so predict_proba of a subset can differ from the full "
        "batch by a float32 rounding step (~1e-7), which this check's atol=1e-7, rtol=1e-7 "
        "rejects; seen on a 16-core machine with torch 2.11, not on a 2-core one with torch 2.14"),
}

class Student(ClassifierMixin, BaseEstimator):
    """The student model, a scikit-learn classifier; see the module docstring.

    ``fit(X, y)``: ``X`` the public inputs, (N, C, H, W) images in [0, 1] or (N, F) float
    features; ``y`` one label per item, ``-1`` where unlabelled (see "Labels" in the module
    docstring). In a cross-validation or a grid search every clone trains from scratch (leave
    ``checkpoint_dir`` None there: the clones would share one checkpoint).

    Parameters
    ----------
    model : str
        ``"auto"`` (cnn28 / cnn32 / cnn8 by image size, else mlp) or any name accepted by
        ``pate.teachers.models.build_model`` (including ``"package.module:factory"``). A model
        *instance* is refused: the student always starts from a fresh initialisation, never
        from teacher weights.
    method : ``"fixmatch"`` or ``"supervised"``.
    epochs : number of epochs (checkpoint granularity); None (default, "auto"):
        ``max(20, ceil(MIN_STUDENT_STEPS / steps_per_epoch))``, at least 1000 optimiser steps in
        all (:func:`auto_epochs`). Fewer than 1000 steps in all are logged as a warning.
    steps_per_epoch : optimiser steps per epoch; None = one pass over the public pool at
        ``unlabeled_ratio * batch_size`` per step (fixmatch) or one pass over the answered items
        (supervised).
    batch_size : labelled items per step. unlabeled_ratio : FixMatch's mu (unlabelled batch =
        mu * batch_size). threshold : FixMatch's confidence threshold tau for pseudo-labels.
    unlabeled_weight : FixMatch's lambda_u. learning_rate, momentum, weight_decay : SGD
        (Nesterov) settings; the rate decays as ``cos(7 pi k / 16 K)``.
    ema_decay : None, or the decay in (0, 1) of an exponential moving average of the weights
        used for prediction.
    distribution_alignment : FixMatch only: rescale the weak view's class probabilities by
        ``uniform / running mean of the predictions`` before taking the pseudo-label
        (ReMixMatch's distribution alignment, Berthelot et al. 2020, with a uniform target):
        counters a student that under-predicts classes the released labels rarely name. It
        assumes the public pool's classes are about balanced -- a public assumption, never a
        statistic of private data.
    flip : horizontal flips in the weak augmentation (only where a flip preserves the label,
        see ``pate.student.augment.FLIP_DATASETS``). pad : translation range in pixels (None = 12.5 %
        of the side). strong_ops : RandAugment operations per image. cutout : largest Cutout side
        as a fraction of the image side.
    num_classes : number of classes; None = ``max(labels) + 1`` (pass it explicitly when some
        class may have no answered item).
    device : ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:N"``.
    random_state : None, a non-negative int, or a ``numpy.random.Generator``.
    progress : show a tqdm progress bar on stderr.
    checkpoint_dir : directory for the per-epoch checkpoint (None = no checkpoints).
    resume : continue from ``checkpoint_dir``'s checkpoint when there is one.
    on_epoch_end : optional callable ``(epoch, record)`` called after each epoch's checkpoint
        (``record`` is the epoch's entry of ``history_``).
    validation : optional ``(x, y)`` held-out data whose accuracy is recorded in ``history_``
        after every epoch (monitoring only: it never influences training).
    """

    def __init__(self, *, model: str = "auto", method: str = "fixmatch", epochs: int | None = None,
                 steps_per_epoch: int | None = None, batch_size: int = 64, unlabeled_ratio: int = 7,
                 threshold: float = 0.95, unlabeled_weight: float = 1.0, learning_rate: float = 0.03,
                 momentum: float = 0.9, weight_decay: float = 5e-4, ema_decay: float | None = None,
                 distribution_alignment: bool = False, flip: bool = False, pad: int | None = None,
                 strong_ops: int = 2, cutout: float = 0.5,
                 num_classes: int | None = None, device: str = "auto", random_state: Any = None,
                 progress: bool = True, checkpoint_dir: str | os.PathLike | None = None,
                 resume: bool = False,
                 on_epoch_end: Callable[[int, dict], None] | None = None,
                 validation: tuple[Any, Any] | None = None) -> None:
        self.model = model
        self.method = method
        self.epochs = epochs
        self.steps_per_epoch = steps_per_epoch
        self.batch_size = batch_size
        self.unlabeled_ratio = unlabeled_ratio
        self.threshold = threshold
        self.unlabeled_weight = unlabeled_weight
        self.learning_rate = learning_rate
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.ema_decay = ema_decay
        self.distribution_alignment = distribution_alignment
        self.flip = flip
        self.pad = pad
        self.strong_ops = strong_ops
        self.cutout = cutout
        self.num_classes = num_classes
        self.device = device
        self.random_state = random_state
        self.progress = progress
        self.checkpoint_dir = checkpoint_dir
        self.resume = resume
        self.on_epoch_end = on_epoch_end
        self.validation = validation

    # ---- scikit-learn conventions (get_params, __repr__, score, clone: BaseEstimator / ClassifierMixin)

    def set_params(self, **params: Any) -> "Student":
        valid = set(_TRAINING_PARAMS + _OTHER_PARAMS)
        for name in params:
            if name not in valid:
                raise ValueError(f"unknown Student parameter {name!r}; valid: {', '.join(sorted(valid))}")
        return super().set_params(**params)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # Inputs: (N, F) features or (N, C, H, W) images (no tag for 4-D); no NaN, no sparse.
        tags.input_tags.two_d_array = True
        tags.input_tags.three_d_array = False
        tags.input_tags.allow_nan = False
        tags.input_tags.sparse = False
        tags.target_tags.required = True
        tags.classifier_tags.multi_class = True
        tags.classifier_tags.multi_label = False
        # Fixed random_state -> the same weights on the CPU; CUDA kernels are not bitwise
        # reproducible.
        try:
            tags.non_deterministic = resolve_device(self.device).type != "cpu"
        except (TypeError, ValueError):
            tags.non_deterministic = True
        return tags

    # ---- validation

    def _validated(self) -> dict:
        """All settings checked (before any work); returns the training settings as plain values."""
        model = self.model
        _refuse_non_public(model, "model")
        if callable(model) and not isinstance(model, str):
            from pate.teachers.models import factory_name

            # a factory given from Python: recorded by name (settings stay plain values)
            model = "python:" + factory_name(model)
        elif not isinstance(model, str):
            raise TypeError(f"model must be a model name string ('auto', 'cnn28', 'mlp', ... or "
                            f"'package.module:factory') or a factory returning a torch.nn.Module, "
                            f"got {describe(model)}")
        else:
            from pate.teachers.models import MODEL_NAMES, is_model_name

            if not is_model_name(model):
                raise ValueError(f"model must be 'auto', one of {', '.join(MODEL_NAMES)} or "
                                 f"'package.module:factory', got {model!r}")
        s = {"model": model, "method": check_choice(self.method, "method", METHODS)}
        s["epochs"] = None if self.epochs is None else check_int(self.epochs, "epochs", minimum=1)
        s["steps_per_epoch"] = (None if self.steps_per_epoch is None
                                else check_int(self.steps_per_epoch, "steps_per_epoch", minimum=1))
        s["batch_size"] = check_int(self.batch_size, "batch_size", minimum=1)
        s["unlabeled_ratio"] = check_int(self.unlabeled_ratio, "unlabeled_ratio", minimum=1)
        s["threshold"] = check_nonnegative(self.threshold, "threshold")
        if s["threshold"] > 1:
            raise ValueError(f"threshold is a confidence in [0, 1], got {s['threshold']!r}")
        s["unlabeled_weight"] = check_nonnegative(self.unlabeled_weight, "unlabeled_weight")
        s["learning_rate"] = check_positive(self.learning_rate, "learning_rate")
        s["momentum"] = check_nonnegative(self.momentum, "momentum")
        if s["momentum"] >= 1:
            raise ValueError(f"momentum must be in [0, 1), got {s['momentum']!r}")
        s["weight_decay"] = check_nonnegative(self.weight_decay, "weight_decay")
        if self.ema_decay is None:
            s["ema_decay"] = None
        else:
            s["ema_decay"] = check_positive(self.ema_decay, "ema_decay")
            if s["ema_decay"] >= 1:
                raise ValueError(f"ema_decay must be in (0, 1) or None, got {s['ema_decay']!r}")
        if not isinstance(self.distribution_alignment, (bool, np.bool_)):
            raise TypeError(f"distribution_alignment must be True or False, got "
                            f"{describe(self.distribution_alignment)}")
        s["distribution_alignment"] = bool(self.distribution_alignment)
        if not isinstance(self.flip, (bool, np.bool_)):
            raise TypeError(f"flip must be True or False, got {describe(self.flip)}")
        s["flip"] = bool(self.flip)
        s["pad"] = None if self.pad is None else check_int(self.pad, "pad", minimum=0)
        s["strong_ops"] = check_int(self.strong_ops, "strong_ops", minimum=0)
        s["cutout"] = check_nonnegative(self.cutout, "cutout")
        if s["cutout"] > 1:
            raise ValueError(f"cutout is a fraction of the image side in [0, 1], got {s['cutout']!r}")
        s["num_classes"] = (None if self.num_classes is None
                            else check_int(self.num_classes, "num_classes", minimum=2))
        if not isinstance(self.progress, (bool, np.bool_)):
            raise TypeError(f"progress must be True or False, got {describe(self.progress)}")
        if not isinstance(self.resume, (bool, np.bool_)):
            raise TypeError(f"resume must be True or False, got {describe(self.resume)}")
        if self.resume and self.checkpoint_dir is None:
            raise ValueError("resume=True needs checkpoint_dir (where the checkpoint is)")
        if self.on_epoch_end is not None and not callable(self.on_epoch_end):
            raise TypeError(f"on_epoch_end must be callable or None, got {describe(self.on_epoch_end)}")
        if self.validation is not None:
            if not (isinstance(self.validation, tuple) and len(self.validation) == 2):
                raise TypeError(f"validation must be a tuple (x, y) or None, got {describe(self.validation)}")
            vx, vy = self.validation
            if not isinstance(vx, np.ndarray) or not isinstance(vy, np.ndarray) or vy.ndim != 1 \
                    or vx.shape[0] != vy.shape[0]:
                raise ValueError("validation must be (x, y) numpy arrays with one label per row of x")
        return s

    # ---- training

    def fit(self, X: Any, y: Any, *, soft_targets: Any = None) -> "Student":
        """Train on the public inputs ``X`` and their released labels ``y`` (-1 = unanswered).

        ``soft_targets``: None, or (N, len(classes_)) class probabilities that replace the
        one-hot labels in the labelled loss ("Soft targets" in the module docstring).
        Returns ``self``. Only the public inputs and the released labels may be passed: the
        private split, a ``PateData``, an ``ArraySplit``, votes, teacher predictions or teacher
        models are refused with a ``TypeError``.
        """
        return self._fit(X, y, names=("X", "y"), soft_targets=soft_targets)

    def _fit(self, X: Any, y: Any, *, names: tuple[str, str], soft_targets: Any = None) -> "Student":
        settings = self._validated()
        x_np = _check_inputs(X, names[0], fit=True)
        y_np, classes = _check_labels(y, x_np.shape[0], settings["num_classes"], names[1])
        num_classes = int(classes.shape[0])
        settings["num_classes"] = num_classes
        targets_np = (None if soft_targets is None
                      else _check_soft_targets(soft_targets, y_np, num_classes))
        settings["soft_targets"] = targets_np is not None
        # n_features_in_ (and feature_names_in_ for a DataFrame), scikit-learn's way.
        validate_data(self, X if hasattr(X, "columns") else x_np, reset=True, skip_check_array=True)
        device = resolve_device(self.device)
        seed = _seed_from(self.random_state)
        input_shape = tuple(int(s) for s in x_np.shape[1:])
        model_name = auto_model_name(input_shape) if settings["model"] == "auto" else settings["model"]
        image = x_np.ndim == 4
        if image:
            if settings["pad"] is None:
                settings["pad"] = aug.default_pad(input_shape[1])
        labelled = np.flatnonzero(y_np >= 0)
        if settings["steps_per_epoch"] is None:
            if settings["method"] == "fixmatch":
                per_step = settings["batch_size"] * settings["unlabeled_ratio"]
                settings["steps_per_epoch"] = max(1, math.ceil(x_np.shape[0] / per_step))
            else:
                settings["steps_per_epoch"] = max(1, math.ceil(labelled.size / settings["batch_size"]))
        short = settings["epochs"] is not None and (
            settings["epochs"] * settings["steps_per_epoch"] < MIN_STUDENT_STEPS)
        if settings["epochs"] is None:
            settings["epochs"] = auto_epochs(settings["steps_per_epoch"])

        fingerprint = self._fingerprint(x_np, y_np, settings, model_name, targets_np)
        checkpoint_path = (None if self.checkpoint_dir is None
                           else pathlib.Path(self.checkpoint_dir) / CHECKPOINT_NAME)
        state = None
        if self.resume and checkpoint_path is not None and checkpoint_path.exists():
            state = _load_checkpoint(checkpoint_path, _CHECKPOINT_KEYS, remedy=(
                f"delete {checkpoint_path} (or use a new run directory) to train the student "
                "from scratch"))
            if state.get("fingerprint") != fingerprint:
                raise ValueError(
                    f"checkpoint {checkpoint_path} was written for different public data, labels or "
                    "settings; delete it (or use a new run directory) to start over, or resume with "
                    "the original settings")
            if seed is not None and seed != state["seed"]:
                raise ValueError(f"checkpoint {checkpoint_path} was written with another random_state "
                                 f"(seed {state['seed']}, now {seed}); resume with the same seed")
            seed = int(state["seed"])
        elif self.resume and checkpoint_path is not None:
            logger.info("student: no checkpoint at %s; starting from scratch", checkpoint_path)
        if seed is None:
            seed = int(np.random.SeedSequence().generate_state(1, np.uint64)[0] >> np.uint64(1))

        # ---- build (deterministic initialisation from the seed, global RNG untouched)
        from pate.teachers.models import build_model

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            net = build_model(self.model if model_name.startswith("python:") else model_name,
                              input_shape=input_shape, num_classes=num_classes)
        mean, std = _input_stats(x_np)
        model = _Standardize(net, torch.from_numpy(mean), torch.from_numpy(std)).to(device)
        ema = copy.deepcopy(model) if settings["ema_decay"] is not None else None
        if ema is not None:
            for p in ema.parameters():
                p.requires_grad_(False)
        optimizer = torch.optim.SGD(model.parameters(), lr=settings["learning_rate"],
                                    momentum=settings["momentum"], nesterov=settings["momentum"] > 0,
                                    weight_decay=settings["weight_decay"])
        generator = torch.Generator().manual_seed(seed)
        # Distribution alignment: running mean of the weak views' predicted class probabilities.
        prediction_mean = torch.full((num_classes,), 1.0 / num_classes, device=device)
        history: list[dict] = []
        start_epoch = 0
        if state is not None:
            try:
                model.load_state_dict(state["model"])
                if ema is not None:
                    ema.load_state_dict(state["ema"])
                optimizer.load_state_dict(state["optimizer"])
                generator.set_state(state["generator"])
                if state.get("prediction_mean") is not None:
                    prediction_mean = state["prediction_mean"].to(device)
                history = list(state["history"])
                start_epoch = int(state["epoch"])
            except (RuntimeError, KeyError, TypeError, ValueError, AttributeError) as exc:
                raise _not_a_checkpoint(checkpoint_path, exc, remedy=(
                    f"delete {checkpoint_path} (or use a new run directory) to train the "
                    "student from scratch")) from None

        x_all = torch.from_numpy(x_np).to(device)
        y_all = torch.from_numpy(y_np).to(device)
        targets_all = (None if targets_np is None
                       else torch.from_numpy(targets_np.astype(np.float32)).to(device))

        def labelled_loss(logits, rows):
            """Cross-entropy of the labelled batch: to the one-hot label, or to the soft target."""
            if targets_all is None:
                return F.cross_entropy(logits, y_all[rows])
            return -(targets_all[rows] * F.log_softmax(logits, dim=1)).sum(dim=1).mean()
        labelled_t = torch.from_numpy(labelled)
        feature_std = torch.from_numpy(std.reshape(-1)).to(device) if not image else None

        def weak(batch):
            if image:
                return aug.weak_augment(batch, generator=generator, flip=settings["flip"], pad=settings["pad"])
            return aug.weak_augment_tabular(batch, generator=generator, feature_std=feature_std)

        def strong(batch):
            if image:
                batch = aug.weak_augment(batch, generator=generator, flip=settings["flip"], pad=settings["pad"])
                return aug.strong_augment(batch, generator=generator, num_ops=settings["strong_ops"],
                                          cutout=settings["cutout"])
            return aug.strong_augment_tabular(batch, generator=generator, feature_std=feature_std)

        total_steps = settings["epochs"] * settings["steps_per_epoch"]
        if short:  # warned once the checkpoint (if any) is accepted, as training starts
            logger.warning("student: %s", short_training_warning(
                settings["epochs"], settings["steps_per_epoch"]))
        base_lr = settings["learning_rate"]
        fixmatch = settings["method"] == "fixmatch"
        bs = settings["batch_size"]
        ubs = bs * settings["unlabeled_ratio"]

        from tqdm.auto import tqdm

        bar = tqdm(total=total_steps, initial=start_epoch * settings["steps_per_epoch"],
                   desc=f"student ({settings['method']})", unit="step", file=sys.stderr,
                   disable=not self.progress, leave=False)
        model.train()
        try:
            for epoch in range(start_epoch, settings["epochs"]):
                t0 = time.perf_counter()
                sums = {"loss_labelled": 0.0, "loss_unlabelled": 0.0, "mask_rate": 0.0}
                for i in range(settings["steps_per_epoch"]):
                    step = epoch * settings["steps_per_epoch"] + i
                    lr = base_lr * math.cos(7.0 * math.pi * step / (16.0 * total_steps))
                    for group in optimizer.param_groups:
                        group["lr"] = lr
                    pick = labelled_t[torch.randint(0, labelled_t.numel(), (bs,), generator=generator)]
                    rows = pick.to(device)
                    xb = x_all[rows]
                    if fixmatch:
                        upick = torch.randint(0, x_all.shape[0], (ubs,), generator=generator).to(device)
                        xu = x_all[upick]
                        xu_weak, xu_strong = weak(xu), strong(xu)
                        with torch.no_grad():
                            probs = torch.softmax(model(xu_weak), dim=1)
                            if settings["distribution_alignment"]:
                                prediction_mean.mul_(_ALIGNMENT_MOMENTUM).add_(
                                    probs.mean(dim=0), alpha=1.0 - _ALIGNMENT_MOMENTUM)
                                probs = probs / (prediction_mean * num_classes)
                                probs = probs / probs.sum(dim=1, keepdim=True)
                            confidence, pseudo = probs.max(dim=1)
                            mask = (confidence >= settings["threshold"]).float()
                        logits = model(torch.cat([weak(xb), xu_strong]))
                        loss_x = labelled_loss(logits[:bs], rows)
                        loss_u = (F.cross_entropy(logits[bs:], pseudo, reduction="none") * mask).mean()
                        loss = loss_x + settings["unlabeled_weight"] * loss_u
                        sums["loss_unlabelled"] += loss_u.item()
                        sums["mask_rate"] += float(mask.mean())
                    else:
                        loss_x = labelled_loss(model(weak(xb)), rows)
                        loss = loss_x
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
                    if ema is not None:
                        with torch.no_grad():
                            d = settings["ema_decay"]
                            for pe, pm in zip(ema.parameters(), model.parameters()):
                                pe.mul_(d).add_(pm.detach(), alpha=1.0 - d)
                    sums["loss_labelled"] += loss_x.item()
                    bar.update(1)
                n = settings["steps_per_epoch"]
                record = {"epoch": epoch + 1, "steps": (epoch + 1) * n, "lr": lr,
                          "loss_labelled": sums["loss_labelled"] / n,
                          "seconds": time.perf_counter() - t0}
                if fixmatch:
                    record["loss_unlabelled"] = sums["loss_unlabelled"] / n
                    record["mask_rate"] = sums["mask_rate"] / n
                if self.validation is not None:
                    record["validation_accuracy"] = _accuracy(
                        ema if ema is not None else model, *self.validation, device=device)
                    model.train()
                history.append(record)
                bar.set_postfix(loss=f"{record['loss_labelled']:.3f}")
                if checkpoint_path is not None:
                    _atomic_torch_save({
                        "format": _FORMAT, "fingerprint": fingerprint, "seed": seed,
                        "epoch": epoch + 1, "model": model.state_dict(),
                        "ema": ema.state_dict() if ema is not None else None,
                        "optimizer": optimizer.state_dict(), "generator": generator.get_state(),
                        "prediction_mean": prediction_mean.cpu(), "history": history}, checkpoint_path)
                if self.on_epoch_end is not None:
                    self.on_epoch_end(epoch + 1, record)
        finally:
            bar.close()

        final = ema if ema is not None else model
        final.eval()
        self.model_ = final
        self.classes_ = classes
        self.model_name_ = model_name
        self.num_classes_ = num_classes
        self.input_shape_ = input_shape
        self.history_ = history
        self.seed_ = seed
        self.device_ = device
        self.settings_ = settings
        self.n_labelled_ = int(labelled.size)
        return self

    def _fingerprint(self, x: np.ndarray, y: np.ndarray, settings: dict, model_name: str,
                     soft_targets: np.ndarray | None = None) -> str:
        h = hashlib.sha256()
        h.update(repr((x.shape, str(x.dtype))).encode())
        h.update(x.tobytes())
        h.update(y.tobytes())
        if soft_targets is not None:
            h.update(soft_targets.tobytes())
        h.update(json.dumps({**settings, "model_name": model_name}, sort_keys=True).encode())
        return h.hexdigest()

    # ---- prediction

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "model_")

    def _check_fitted(self) -> None:
        if not hasattr(self, "model_"):
            raise NotFittedError("this Student is not fitted yet; call fit(X, y) or Student.load(path)")

    def predict_proba(self, X: Any, *, batch_size: int = 1024) -> np.ndarray:
        """Class probabilities (N, len(classes_)) as float64, columns in the order of ``classes_``."""
        self._check_fitted()
        batch_size = check_int(batch_size, "batch_size", minimum=1)
        x = _check_inputs(X, "X", fit=False)
        validate_data(self, X if hasattr(X, "columns") else x, reset=False, skip_check_array=True)
        if tuple(x.shape[1:]) != self.input_shape_:
            raise ValueError(f"X must have shape (N, {', '.join(map(str, self.input_shape_))}) as in "
                             f"fit, got {x.shape}")
        device = next(self.model_.parameters()).device
        out = []
        self.model_.eval()
        with torch.no_grad():
            for start in range(0, x.shape[0], batch_size):
                chunk = torch.from_numpy(x[start:start + batch_size])
                out.append(torch.softmax(self.model_(chunk.to(device)).float(), dim=1).cpu().numpy())
        if not out:
            return np.zeros((0, self.num_classes_), dtype=np.float64)
        return np.concatenate(out).astype(np.float64)

    def predict(self, X: Any) -> np.ndarray:
        """Predicted labels (N,), taken from ``classes_`` (int64 class indices for integer labels)."""
        proba = self.predict_proba(X)
        return self.classes_[proba.argmax(axis=1)]

    # ---- the released model of a class-means run: the student times its labelling rule

    def combine_with_rule(self, head: nn.Module, *, temperature: float) -> "Student":
        """Release ``softmax(log p_S + log softmax(temperature * head(x)))`` instead of p_S: the
        fitted student times its labelling rule (:mod:`pate.student.rule_product`; ``head`` a
        ``RuleHead``). Done once, after fitting; :meth:`save` and :meth:`load` keep it."""
        from pate.student.rule_product import RuleHead, RuleProduct

        self._check_fitted()
        if getattr(self, "rule_product_", None) is not None:
            raise ValueError("this Student is already combined with a labelling rule")
        if not isinstance(head, RuleHead):
            raise TypeError(f"head must be a pate.student.rule_product.RuleHead, got "
                            f"{type(head).__name__}")
        device = next(self.model_.parameters()).device
        self.model_ = RuleProduct(self.model_, head.to(device), temperature).eval()
        self.rule_product_ = {"features": head.features, "rule": head.rule,
                              "dims": int(head.pca_axes.shape[0]),
                              "temperature": float(temperature)}
        return self

    # ---- persistence

    def save(self, path: str | os.PathLike) -> pathlib.Path:
        """Write the fitted weights and settings to ``path`` atomically (a run output: never commit it)."""
        self._check_fitted()
        path = pathlib.Path(path)
        state = {k: v.detach().cpu() for k, v in self.model_.state_dict().items()}
        _atomic_torch_save({
            "format": _FORMAT, "model_name": self.model_name_, "input_shape": list(self.input_shape_),
            "num_classes": self.num_classes_, "settings": self.settings_, "seed": self.seed_,
            "classes": _plain_classes(self.classes_), "history": self.history_, "n_labelled": self.n_labelled_,
            "rule_product": getattr(self, "rule_product_", None), "state_dict": state}, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, *, device: str = "cpu", model=None) -> "Student":
        """A fitted Student from a file written by :meth:`save`, read with ``weights_only=True``
        (no code in the file runs). Any other file -- a pickle of other objects, a damaged or
        foreign one -- raises :class:`pate.teachers.checkpoint.CheckpointError` naming it."""
        path = pathlib.Path(path)
        if not path.exists():
            raise FileNotFoundError(f"no student weights at {path}; train one with `pate train-student`")
        remedy = ("train the student again (`pate train-student --run-dir DIR`), or load a file "
                  "written by Student.save")
        blob = _load_checkpoint(path, _WEIGHTS_KEYS, remedy=remedy)
        try:
            return cls._from_blob(path, blob, device=device, model=model)
        except (RuntimeError, KeyError, TypeError, AttributeError, IndexError) as exc:
            # tensors and plain containers only (weights_only), but not the ones Student.save
            # writes: a damaged or crafted file
            raise _not_a_checkpoint(path, exc, remedy=remedy) from None

    @classmethod
    def _from_blob(cls, path: pathlib.Path, blob: dict, *, device: str, model) -> "Student":
        from pate.teachers.models import build_model

        settings = dict(blob["settings"])
        input_shape = tuple(int(s) for s in blob["input_shape"])
        num_classes = int(blob["num_classes"])
        name = blob["model_name"]
        if name.startswith("python:"):
            if model is None:
                raise ValueError(f"{path}: the student's network was built by the Python factory "
                                 f"{name[7:]}; pass it again: Student.load(path, model=factory)")
            name = model
        net = build_model(name, input_shape=input_shape, num_classes=num_classes)
        state = blob["state_dict"]
        product = blob.get("rule_product")   # absent in files written before it existed
        prefix = "student." if product else ""
        model = _Standardize(net, torch.zeros_like(state[prefix + "mean"]),
                             torch.ones_like(state[prefix + "std"]))
        if product:
            from pate.student.rule_product import RuleHead, RuleProduct

            head = RuleHead(input_shape=input_shape, features=product["features"],
                            rule=product["rule"], dims=int(product["dims"]),
                            num_classes=num_classes)
            model = RuleProduct(model, head, float(product["temperature"]))
        model.load_state_dict(state)
        dev = resolve_device(device)
        model.to(dev).eval()
        student = cls(**{k: settings[k] for k in _TRAINING_PARAMS if k in settings},
                      random_state=blob["seed"], device=str(dev), progress=False)
        student.model = settings["model"]
        student.model_ = model
        classes = blob.get("classes")   # absent in files written before classes_ existed
        student.classes_ = (np.arange(num_classes, dtype=np.int64) if classes is None
                            else np.asarray(classes))
        student.n_features_in_ = input_shape[0]
        student.model_name_ = blob["model_name"]
        student.num_classes_ = num_classes
        student.input_shape_ = input_shape
        student.history_ = list(blob["history"])
        student.seed_ = blob["seed"]
        student.device_ = dev
        student.settings_ = settings
        student.n_labelled_ = int(blob["n_labelled"])
        student.rule_product_ = product or None
        return student


#: The keys of the files :meth:`Student.save` and the per-epoch checkpoint write (checked on load).
_WEIGHTS_KEYS = frozenset({"format", "model_name", "input_shape", "num_classes", "settings", "seed",
                           "history", "n_labelled", "state_dict"})
_CHECKPOINT_KEYS = frozenset({"format", "fingerprint", "seed", "epoch", "model", "ema", "optimizer",
                              "generator", "history"})


def _not_a_checkpoint(path, exc: BaseException, *, remedy: str):
    from pate.teachers.checkpoint import CheckpointError

    detail = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else "no details"
    return CheckpointError(
        f"{str(path)!r} is not a student file written by pate-learn ({type(exc).__name__}: "
        f"{detail}); {remedy.rstrip('.')}.", path=path)


def _load_checkpoint(path, keys: frozenset, *, remedy: str) -> dict:
    """A student file of pate-learn, read with ``weights_only=True`` (no code runs): a dict of
    format ``_FORMAT`` holding ``keys``. Anything else (a pickle of other objects, a damaged or
    foreign file) raises ``CheckpointError`` naming the file, saying it was not written by
    pate-learn, and what to do (``remedy``)."""
    from pate.teachers.checkpoint import CheckpointError, load_torch

    blob = load_torch(path, remedy=remedy)
    if not isinstance(blob, dict) or blob.get("format") != _FORMAT:
        raise CheckpointError(f"{str(path)!r} is not a student file written by pate-learn "
                              f"(format {_FORMAT}); {remedy.rstrip('.')}.", path=path)
    missing = sorted(keys - set(blob))
    if missing:
        raise CheckpointError(f"{str(path)!r} is not a student file written by pate-learn (it "
                              f"lacks {', '.join(missing)}); {remedy.rstrip('.')}.", path=path)
    return blob


def train_student(public_x: Any, labels: Any, *, model: str = "auto", method: str = "fixmatch",
                  soft_targets: Any = None, **settings: Any) -> Student:
    """Fit a :class:`Student` on the public inputs and the released labels (-1 = unanswered).

    ``soft_targets``: None, or class probabilities per item (:meth:`Student.fit`).
    ``settings`` are the other :class:`Student` parameters (``epochs``, ``random_state``,
    ``device``, ...). Anything but an array of public inputs and a 1-D labels array is refused
    with a ``TypeError``: the private split, a ``PateData``, a votes matrix, teacher models.
    """
    valid = set(_TRAINING_PARAMS + _OTHER_PARAMS) - {"model", "method"}
    unknown = sorted(set(settings) - valid)
    if unknown:
        hint = (" -- the student must never receive the teachers' votes, models or private data"
                if any(k in ("votes", "teachers", "teacher", "private", "private_x", "data")
                       for k in unknown) else "")
        raise TypeError(f"train_student got unexpected argument(s) {', '.join(unknown)}{hint}; "
                        f"valid settings: {', '.join(sorted(valid))}")
    return Student(model=model, method=method, **settings)._fit(
        public_x, labels, names=("public_x", "labels"), soft_targets=soft_targets)
