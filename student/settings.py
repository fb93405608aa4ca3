"""The student's settings: their names, their checks and the training length they leave open.

More: docs/student.md, "pate.student.settings".
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
import torch

from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.validation import (
    check_bool,
    check_choice,
    check_int,
    check_nonnegative,
    check_positive,
    check_unit_interval,
    describe,
)
from pate.student import augment as aug
from pate.student.inputs import refuse_non_public

METHODS = ("fixmatch", "supervised")


#: ``epochs=None`` (the default, "auto"): at least this many optimiser steps in all, whatever the
#: number of labelled or public items (why, measured: docs/student.md, "Training length").
MIN_STUDENT_STEPS = 1000
#: ... and at least this many epochs (the former fixed default).
MIN_STUDENT_EPOCHS = 20


def auto_epochs(steps_per_epoch: int) -> int:
    """The epochs of ``epochs=None``: both :data:`MIN_STUDENT_EPOCHS` and the steps' minimum."""
    return max(MIN_STUDENT_EPOCHS, math.ceil(MIN_STUDENT_STEPS / max(1, int(steps_per_epoch))))


def short_training_warning(epochs: int, steps_per_epoch: int) -> str:
    """The warning for a student trained fewer than :data:`MIN_STUDENT_STEPS` steps."""
    return (
        f"the student trains only {epochs * steps_per_epoch} optimiser steps ({epochs} epochs "
        f"x {steps_per_epoch} steps), fewer than {MIN_STUDENT_STEPS}: it may stay far below "
        f"its labels. Leave epochs unset (auto: at least {MIN_STUDENT_STEPS} steps) or raise "
        f"it (student_params={{'epochs': ...}} in pate.fit, [student] epochs in a config)"
    )


def fill_training_length(settings: dict, x: np.ndarray, num_labelled: int) -> bool:
    """Fill the settings left open (``pad``, ``steps_per_epoch``, ``epochs``); True when the
    epochs given make fewer than :data:`MIN_STUDENT_STEPS` steps (warned about)."""
    if x.ndim == 4 and settings["pad"] is None:
        settings["pad"] = aug.default_pad(x.shape[2])
    if settings["steps_per_epoch"] is None:  # one pass over the pool, or the labelled items
        rows, per_step = num_labelled, settings["batch_size"]
        if settings["method"] == "fixmatch":
            rows, per_step = x.shape[0], settings["batch_size"] * settings["unlabeled_ratio"]
        settings["steps_per_epoch"] = max(1, math.ceil(rows / per_step))
    short = settings["epochs"] is not None and (
        settings["epochs"] * settings["steps_per_epoch"] < MIN_STUDENT_STEPS
    )
    if settings["epochs"] is None:
        settings["epochs"] = auto_epochs(settings["steps_per_epoch"])
    return short


#: The integer settings and their minimum.
_INTEGERS = {
    "epochs": 1,
    "steps_per_epoch": 1,
    "batch_size": 1,
    "unlabeled_ratio": 1,
    "pad": 0,
    "strong_ops": 0,
    "num_classes": 2,
}
#: The real settings and their check; ``momentum`` and ``ema_decay`` must also be below 1.
_REALS = {
    "threshold": check_unit_interval,  # a confidence
    "unlabeled_weight": check_nonnegative,
    "learning_rate": check_positive,
    "momentum": check_nonnegative,
    "weight_decay": check_nonnegative,
    "ema_decay": check_positive,
    "cutout": check_unit_interval,  # a fraction of the image side
}
#: The settings whose default, None, is filled in or means "off".
_OPTIONAL = ("epochs", "steps_per_epoch", "pad", "num_classes", "ema_decay")


def validated_settings(student: Any) -> dict:
    """The training settings of ``student`` (a :class:`pate.student.train.Student`) as plain
    values, all its settings checked (a ``TypeError`` or ``ValueError`` names the first bad one)."""
    s = {"model": _checked_model(student.model)}
    s["method"] = check_choice(student.method, "method", METHODS)
    for name in (*_INTEGERS, *_REALS, "distribution_alignment", "amp", "flip"):
        value = getattr(student, name)
        if value is None and name in _OPTIONAL:
            s[name] = None
        elif name in _INTEGERS:
            s[name] = check_int(value, name, minimum=_INTEGERS[name])
        else:
            s[name] = _REALS[name](value, name) if name in _REALS else check_bool(value, name)
    for name, interval in (("momentum", "[0, 1)"), ("ema_decay", "(0, 1) or None")):
        if s[name] is not None and s[name] >= 1:
            raise InputError(f"{name} must be in {interval}, got {s[name]!r}")
    _check_run_options(student)
    return s


def _checked_model(model: Any) -> str:
    """The model setting as a plain string: a zoo or ``module:factory`` name, or
    ``"python:<name>"`` for a factory given from Python."""
    refuse_non_public(model, "model")
    if callable(model) and not isinstance(model, str):
        from pate.teachers.models import factory_name

        # a factory given from Python: recorded by name (settings stay plain values)
        return "python:" + factory_name(model)
    if not isinstance(model, str):
        raise InputTypeError(
            f"model must be a model name string ('auto', 'cnn28', 'mlp', ... or "
            f"'package.module:factory') or a factory returning a torch.nn.Module, "
            f"got {describe(model)}"
        )
    from pate.teachers.models import MODEL_NAMES, is_model_name

    if not is_model_name(model):
        raise InputError(
            f"model must be 'auto', one of {', '.join(MODEL_NAMES)} or "
            f"'package.module:factory', got {model!r}"
        )
    return model


def _check_run_options(st: Any) -> None:
    """The settings of how the run goes (processes, progress, resume, on_epoch_end, validation)."""
    if not (isinstance(st.processes, str) and st.processes == "auto"):
        if isinstance(st.processes, str):
            raise InputError(f"processes must be 'auto' or an int >= 1, got {st.processes!r}")
        check_int(st.processes, "processes", minimum=1)
    check_bool(st.progress, "progress")
    if check_bool(st.resume, "resume") and st.checkpoint_dir is None:
        raise InputError("resume=True needs checkpoint_dir (where the checkpoint is)")
    if st.on_epoch_end is not None and not callable(st.on_epoch_end):
        raise InputTypeError(
            f"on_epoch_end must be callable or None, got {describe(st.on_epoch_end)}"
        )
    if st.validation is not None:
        if not (isinstance(st.validation, tuple) and len(st.validation) == 2):
            raise InputTypeError(
                f"validation must be a tuple (x, y) or None, got {describe(st.validation)}"
            )
        vx, vy = st.validation
        arrays = isinstance(vx, np.ndarray) and isinstance(vy, np.ndarray)
        if not arrays or vy.ndim != 1 or vx.shape[0] != vy.shape[0]:
            raise InputError("validation must be (x, y) numpy arrays with one label per row of x")


def resolve_device(spec: Any = "auto") -> torch.device:
    """``spec`` (or its ``str``, a ``torch.device``) by the teachers' rules and messages
    (:func:`pate.teachers.devices.resolve_device`)."""
    from pate.teachers.devices import resolve_device as _resolve

    return torch.device(_resolve(str(spec) if isinstance(spec, torch.device) else spec))


def seed_from(random_state: Any) -> int | None:
    """The seed of ``random_state``: None, an int >= 0, or a draw from a numpy ``Generator``."""
    if random_state is None:
        return None
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(0, 2**63 - 1))
    if isinstance(random_state, (numbers.Integral, np.integer)) and not isinstance(
        random_state, bool
    ):
        return check_int(random_state, "random_state", minimum=0)
    raise InputTypeError(
        f"random_state must be None, a non-negative int or a numpy.random.Generator "
        f"(e.g. pate.core.rng.make_streams(seed).student), got {describe(random_state)}"
    )
