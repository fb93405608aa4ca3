"""The teachers' training recipe: :class:`TeacherConfig`, and how its "auto" fields are decided.

More: docs/teachers.md, "pate.teachers.recipe".
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any

from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.validation import (
    check_choice,
    check_int,
    check_nonnegative,
    check_positive,
    describe,
)
from pate.teachers.devices import check_device_spelling
from pate.teachers.features import FEATURES
from pate.teachers.models import MODEL_NAMES, STUDENT_ONLY_MODELS, auto_model_name, is_model_name
from pate.teachers.optim import OPTIMIZERS
from pate.teachers.scaling import STANDARDIZE
from pate.teachers.schedule import AUGMENTATIONS

__all__ = [
    "TeacherConfig",
    "TRAINERS",
    "auto_epochs",
    "MIN_TEACHER_STEPS",
    "AUTO_EPOCHS_RANGE",
    "is_sklearn_model",
    "AUTO_AUGMENT",
]

TRAINERS = ("auto", "vectorized", "sequential")
# Fashion-MNIST: measured in the README (augmentation did not beat a higher learning rate there;
# horizontal flips hurt: shoes face one way in the test set). The others: common practice.
AUTO_AUGMENT = {
    "fashion-mnist": "none",
    "cifar10": "shift+flip",
    "mnist": "shift",
    "kmnist": "shift",
    "svhn": "shift",
    "digits": "shift",
}


def is_sklearn_model(model) -> bool:
    """A scikit-learn model: ``"sklearn:package.module.Class"`` or an estimator instance."""
    return (isinstance(model, str) and model.startswith("sklearn:")) or (
        not isinstance(model, str) and hasattr(model, "fit") and hasattr(model, "get_params")
    )


#: ``epochs=None``: at least this many optimiser steps per teacher, between these many epochs
#: (why these numbers: docs/teachers.md, "Training length").
MIN_TEACHER_STEPS = 200
AUTO_EPOCHS_RANGE = (20, 200)


def auto_epochs(shard_size: float | None, *, batch_size: int = 32) -> int:
    """Epochs of ``epochs=None``: ``ceil(MIN_TEACHER_STEPS / steps per epoch)`` clipped to
    :data:`AUTO_EPOCHS_RANGE`, where a step is one batch of ``batch_size`` shard records
    (docs/teachers.md, "Training length"). ``shard_size`` None: the lower end (20)."""
    lo, hi = AUTO_EPOCHS_RANGE
    if shard_size is None:
        return lo
    steps = max(1, math.ceil(float(shard_size) / batch_size))
    return int(min(hi, max(lo, math.ceil(MIN_TEACHER_STEPS / steps))))


@dataclass(frozen=True)
class TeacherConfig:
    """Training recipe of the teachers (docs/teachers.md)."""

    model: Any = "auto"
    epochs: int | None = None
    batch_size: int = 32
    lr: float = 2e-3
    optimizer: str = "adam"
    weight_decay: float = 0.0
    momentum: float = 0.9
    augment: str = "auto"
    label_smoothing: float = 0.0
    trainer: str = "auto"
    device: str = "auto"
    chunk_size: int | None = None
    memory_budget_mb: float | None = None
    checkpoint: str = "epoch"
    checkpoint_every_s: float = 0.0
    amp: bool = True
    n_jobs: int = 1
    model_params: dict = field(default_factory=dict)
    features: str = "none"
    standardize: str = "auto"

    def __post_init__(self) -> None:
        m = self.model
        if isinstance(m, str):
            if not is_model_name(m):
                raise InputError(
                    f"model must be 'auto', one of {', '.join(MODEL_NAMES)}, "
                    f"'module:factory' or 'sklearn:package.module.Class'; got {m!r}"
                )
            if m in STUDENT_ONLY_MODELS:
                raise InputError(
                    f"model {m!r} is a student model: its ScatterNet front-end "
                    "cannot be vectorized over teachers; for teachers set features "
                    '= "scatternet" with model = "scatter_cnn" or "linear"'
                )
        elif not is_sklearn_model(m) and not callable(m):
            raise InputTypeError(
                f"model must be a name, a scikit-learn estimator or a factory "
                f"returning a torch.nn.Module, got {describe(m)}"
            )
        if self.epochs is not None:
            check_int(self.epochs, "epochs", minimum=1)
        check_choice(self.standardize, "standardize", STANDARDIZE)
        check_int(self.batch_size, "batch_size", minimum=1)
        check_positive(self.lr, "lr")
        check_choice(self.optimizer, "optimizer", OPTIMIZERS)
        check_nonnegative(self.weight_decay, "weight_decay")
        check_nonnegative(self.momentum, "momentum")
        check_choice(self.augment, "augment", ("auto",) + AUGMENTATIONS)
        ls = check_nonnegative(self.label_smoothing, "label_smoothing")
        if ls >= 1:
            raise InputError(f"label_smoothing must be < 1, got {ls!r}")
        check_choice(self.trainer, "trainer", TRAINERS)
        check_device_spelling(self.device)
        if self.chunk_size is not None:
            check_int(self.chunk_size, "chunk_size", minimum=1)
        if self.memory_budget_mb is not None:
            check_positive(self.memory_budget_mb, "memory_budget_mb")
        check_choice(self.checkpoint, "checkpoint", ("epoch", "chunk"))
        every = check_nonnegative(self.checkpoint_every_s, "checkpoint_every_s")
        if not math.isfinite(every):
            raise InputError(
                f"checkpoint_every_s must be finite (0 = after every epoch), got {every!r}"
            )
        if not isinstance(self.amp, bool):
            raise InputTypeError(f"amp must be True or False, got {describe(self.amp)}")
        check_int(self.n_jobs, "n_jobs")
        if self.n_jobs == 0:
            raise InputError("n_jobs must be a positive number of workers or -1 (all cores), got 0")
        if not isinstance(self.model_params, dict):
            raise InputTypeError(f"model_params must be a dict, got {describe(self.model_params)}")
        check_choice(self.features, "features", FEATURES)
        if self.model_params and not is_sklearn_model(m):
            raise InputError(
                "model_params only apply to scikit-learn models "
                "(model='sklearn:package.module.Class')"
            )

    @property
    def is_sklearn(self) -> bool:
        return is_sklearn_model(self.model)

    def resolved(self, data, *, shard_size: float | None = None) -> TeacherConfig:
        """A copy with ``model="auto"``, ``augment="auto"``, ``epochs=None`` (from
        ``shard_size``, the mean number of records per teacher: :func:`auto_epochs`) and
        ``standardize="auto"`` decided for ``data`` (public facts only: the input shape, the
        dataset's name, the shard size)."""
        shape = tuple(data.input_shape)
        model = self.model
        if model == "auto" and self.features != "none":
            model = "linear"  # on fixed features (Tramer & Boneh 2021): see pate.teachers.features
        elif model == "auto":
            model = auto_model_name(shape)
        augment = self.augment
        if augment == "auto":
            augment = AUTO_AUGMENT.get(data.name, "none") if len(shape) == 3 else "none"
        if is_sklearn_model(model) or self.features != "none":
            augment = "none"  # image augmentations do not apply to features
        epochs = self.epochs
        if epochs is None:
            epochs = auto_epochs(shard_size, batch_size=self.batch_size)
        standardize = self.standardize
        if standardize == "auto":
            # zoo models on tabular inputs; a user's own model keeps its inputs (it may scale
            # them itself; pate.teachers.scaling.scale_warning says when it should)
            zoo = isinstance(model, str) and model in MODEL_NAMES
            standardize = (
                "public" if zoo and len(shape) == 1 and self.features == "none" else "none"
            )
        if standardize == "public" and (is_sklearn_model(model) or len(shape) != 1):
            standardize = "none"  # images are in [0, 1]; a scikit-learn model has its Pipeline
        return dataclasses.replace(
            self, model=model, augment=augment, epochs=epochs, standardize=standardize
        )

    def fingerprint(self) -> dict:
        """The fields that determine the trained teachers (not device, chunking or I/O)."""
        d = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name
            not in (
                "device",
                "chunk_size",
                "memory_budget_mb",
                "checkpoint",
                "checkpoint_every_s",
                "n_jobs",
                "trainer",
            )
        }
        if is_sklearn_model(d["model"]) and not isinstance(d["model"], str):
            d["model"] = f"{type(d['model']).__module__}.{type(d['model']).__qualname__}"
            d["model_params"] = {k: repr(v) for k, v in sorted(self.model.get_params().items())}
        elif callable(d["model"]):  # a torch model factory given from Python
            from pate.teachers.models import factory_name

            d["model"] = factory_name(d["model"])
        return json.loads(json.dumps(d, default=repr))
