"""Training the student, the only model PATE releases, on the public inputs and their released
labels alone (:func:`train_student`, the scikit-learn estimator :class:`Student`; more:
docs/student.md).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pathlib
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import validate_data
from torch import nn

from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.validation import check_int
from pate.core.threads import cpu_budget
from pate.student.checkpoint import (
    CHECKPOINT_KEYS,
    CHECKPOINT_NAME,
    load_student_file,
    start_over,
)
from pate.student.draws import Batches, rows_independent, saved_shards, step_shards
from pate.student.epochs import CheckpointTarget, EpochLoop, train_epochs
from pate.student.inputs import (
    check_inputs,
    check_labels,
    check_soft_targets,
)
from pate.student.parallel import choose_processes
from pate.student.settings import (
    fill_training_length,
    resolve_device,
    seed_from,
    short_training_warning,
    validated_settings,
)
from pate.student.trainer import Training, build_network
from pate.student.weights_file import read_student, write_student
from pate.teachers.models import auto_model_name

__all__ = [
    "train_student",
    "Student",
    "CHECKPOINT_NAME",
]

logger = logging.getLogger("pate.student")  # shown by the pate CLI


class Student(ClassifierMixin, BaseEstimator):
    """The student model, a scikit-learn classifier: ``fit(X, y)`` on the public inputs ``X``,
    (N, C, H, W) images in [0, 1] or (N, F) float features, and one released label per item in
    ``y``, ``-1`` where unlabelled. Its contract, and what each parameter means:
    docs/student.md, "The estimator's contract" and "Parameters". Every clone of a
    cross-validation trains from scratch (leave ``checkpoint_dir`` None there).
    """

    def __init__(
        self,
        *,
        model: str = "auto",
        method: str = "fixmatch",
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        batch_size: int = 64,
        unlabeled_ratio: int = 7,
        threshold: float = 0.95,
        unlabeled_weight: float = 1.0,
        learning_rate: float = 0.03,
        momentum: float = 0.9,
        weight_decay: float = 5e-4,
        ema_decay: float | None = None,
        distribution_alignment: bool = False,
        amp: bool = True,
        flip: bool = False,
        pad: int | None = None,
        strong_ops: int = 2,
        cutout: float = 0.5,
        num_classes: int | None = None,
        device: str = "auto",
        processes: int | str = "auto",
        random_state: Any = None,
        progress: bool = True,
        checkpoint_dir: str | os.PathLike | None = None,
        resume: bool = False,
        on_epoch_end: Callable[[int, dict], None] | None = None,
        validation: tuple[Any, Any] | None = None,
    ) -> None:
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
        self.amp = amp
        self.flip = flip
        self.pad = pad
        self.strong_ops = strong_ops
        self.cutout = cutout
        self.num_classes = num_classes
        self.device = device
        self.processes = processes
        self.random_state = random_state
        self.progress = progress
        self.checkpoint_dir = checkpoint_dir
        self.resume = resume
        self.on_epoch_end = on_epoch_end
        self.validation = validation

    def set_params(self, **params: Any) -> Student:
        valid = self._get_param_names()
        for name in params:
            if name not in valid:
                raise InputError(f"unknown Student parameter {name!r}; valid: {', '.join(valid)}")
        return super().set_params(**params)

    def __sklearn_tags__(self):
        # A classifier's defaults hold: (N, F) inputs (no tag for (N, C, H, W) images), no NaN,
        # no sparse input, a required target, multi-class. A fixed random_state gives the same
        # weights on the CPU; CUDA kernels are not bitwise reproducible.
        tags = super().__sklearn_tags__()
        try:
            tags.non_deterministic = resolve_device(self.device).type != "cpu"
        except (TypeError, ValueError):
            tags.non_deterministic = True
        return tags

    def _validated(self) -> dict:
        """All settings checked (before any work), the training settings as plain values (also
        the config's check of ``[student]``)."""
        return validated_settings(self)

    def fit(self, X: Any, y: Any, *, soft_targets: Any = None) -> Student:
        """Train on the public inputs ``X`` and their released labels ``y`` (-1 = unanswered);
        ``soft_targets``: None, or (N, len(classes_)) class probabilities replacing the one-hot
        labels. Anything else that reaches it (the private split, votes, teachers) is refused
        with a ``TypeError`` (docs/student.md, "The estimator's contract")."""
        return self._fit(X, y, names=("X", "y"), soft_targets=soft_targets)

    def _fit(self, X: Any, y: Any, *, names: tuple[str, str], soft_targets: Any = None) -> Student:
        """Check everything, resume or start a run, train it, set the fitted attributes."""
        settings = self._validated()
        x_np, y_np, classes, targets_np = self._checked_data(X, y, soft_targets, settings, names)
        num_classes = settings["num_classes"]
        device = resolve_device(self.device)
        seed = seed_from(self.random_state)
        input_shape = tuple(int(s) for s in x_np.shape[1:])
        model_name = (
            auto_model_name(input_shape) if settings["model"] == "auto" else settings["model"]
        )
        labelled = np.flatnonzero(y_np >= 0)
        short = fill_training_length(settings, x_np, labelled.size)
        fingerprint = _fingerprint({**settings, "model_name": model_name}, x_np, y_np, targets_np)
        checkpoint_path = (
            None
            if self.checkpoint_dir is None
            else pathlib.Path(self.checkpoint_dir) / CHECKPOINT_NAME
        )
        state, seed = self._saved_state(checkpoint_path, fingerprint, seed)

        model, std = build_network(
            self.model if model_name.startswith("python:") else model_name,
            seed=seed,
            x=x_np,
            input_shape=input_shape,
            num_classes=num_classes,
            device=device,
        )
        resumed = None if state is None else saved_shards(state)
        shards = step_shards(model, settings["batch_size"], device=device, resumed=resumed)
        training = Training.start(
            model, settings, seed=seed, num_classes=num_classes, device=device, shards=shards
        )
        if state is not None:
            training.restore(state, device=device, checkpoint_path=checkpoint_path)
        batches = Batches(
            x_np,
            y_np,
            targets_np,
            labelled,
            std,
            settings,
            generator=training.generators[0],
            device=device,
            # On a GPU the wasted rows cost less than the synchronisation that finding them needs.
            skip_unconfident=device.type == "cpu" and rows_independent(model),
        )
        if short:  # warned once the checkpoint (if any) is accepted, as training starts
            logger.warning(
                "student: %s",
                short_training_warning(settings["epochs"], settings["steps_per_epoch"]),
                extra={"short_training": True},  # a smoke test's run leaves it out
            )
        budget = cpu_budget()
        processes = choose_processes(self.processes, shards=shards, device=device, cpus=budget)
        train_epochs(
            training,
            batches,
            EpochLoop(settings, num_classes, device, self.validation),
            checkpoint=CheckpointTarget(checkpoint_path, fingerprint, seed),
            progress=self.progress,
            on_epoch_end=self.on_epoch_end,
            processes=processes,
            threads_each=max(1, budget // processes),
        )

        training.final.eval()
        self.model_, self.classes_, self.model_name_ = training.final, classes, model_name
        self.num_classes_, self.input_shape_ = num_classes, input_shape
        self.history_, self.seed_, self.device_ = training.history, seed, device
        self.settings_, self.n_labelled_ = settings, int(labelled.size)
        self.precision_ = "bfloat16 autocast" if training.amp else "float32"
        self.processes_ = processes
        return self

    def _checked_data(
        self, X: Any, y: Any, soft_targets: Any, settings: dict, names: tuple[str, str]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """``(x, y, classes, soft targets or None)`` checked (``settings`` gets ``num_classes``
        and ``soft_targets``); ``n_features_in_`` set, scikit-learn's way."""
        x_np = check_inputs(X, names[0], fit=True)
        y_np, classes = check_labels(y, x_np.shape[0], settings["num_classes"], names[1])
        num_classes = int(classes.shape[0])
        settings["num_classes"] = num_classes
        targets_np = (
            None if soft_targets is None else check_soft_targets(soft_targets, y_np, num_classes)
        )
        settings["soft_targets"] = targets_np is not None
        validate_data(self, X if hasattr(X, "columns") else x_np, reset=True, skip_check_array=True)
        return x_np, y_np, classes, targets_np

    def _saved_state(
        self, checkpoint_path: pathlib.Path | None, fingerprint: str, seed: int | None
    ) -> tuple[dict | None, int]:
        """``(checkpoint, seed)``: with ``resume`` the checkpoint of the same data and settings
        (else refused) and its seed; else None and ``seed`` (drawn when None)."""
        state = None
        if self.resume and checkpoint_path is not None and checkpoint_path.exists():
            state = load_student_file(
                checkpoint_path, keys=CHECKPOINT_KEYS, remedy=start_over(checkpoint_path)
            )
            if state.get("fingerprint") != fingerprint:
                raise InputError(
                    f"checkpoint {checkpoint_path} was written for different public data, labels or "
                    "settings; delete it (or use a new run directory) to start over, or resume with "
                    "the original settings"
                )
            if seed is not None and seed != state["seed"]:
                raise InputError(
                    f"checkpoint {checkpoint_path} was written with another random_state "
                    f"(seed {state['seed']}, now {seed}); resume with the same seed"
                )
            seed = int(state["seed"])
        elif self.resume and checkpoint_path is not None:
            logger.info("student: no checkpoint at %s; starting from scratch", checkpoint_path)
        if seed is None:
            seed = int(np.random.SeedSequence().generate_state(1, np.uint64)[0] >> np.uint64(1))
        return state, seed

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "model_")

    def _check_fitted(self) -> None:
        if not hasattr(self, "model_"):
            raise NotFittedError(
                "this Student is not fitted yet; call fit(X, y) or Student.load(path)"
            )

    def predict_proba(self, X: Any, *, batch_size: int = 1024) -> np.ndarray:
        """Class probabilities (N, len(classes_)) as float64, columns in the order of ``classes_``."""
        self._check_fitted()
        batch_size = check_int(batch_size, "batch_size", minimum=1)
        x = check_inputs(X, "X", fit=False)
        validate_data(self, X if hasattr(X, "columns") else x, reset=False, skip_check_array=True)
        if tuple(x.shape[1:]) != self.input_shape_:
            raise InputError(
                f"X must have shape (N, {', '.join(map(str, self.input_shape_))}) as in "
                f"fit, got {x.shape}"
            )
        device = next(self.model_.parameters()).device
        out = []
        self.model_.eval()
        with torch.no_grad():
            for start in range(0, x.shape[0], batch_size):
                chunk = torch.from_numpy(x[start : start + batch_size])
                out.append(
                    torch.softmax(self.model_(chunk.to(device)).float(), dim=1).cpu().numpy()
                )
        if not out:
            return np.zeros((0, self.num_classes_), dtype=np.float64)
        return np.concatenate(out).astype(np.float64)

    def predict(self, X: Any) -> np.ndarray:
        """Predicted labels (N,), taken from ``classes_`` (int64 class indices for integer labels)."""
        proba = self.predict_proba(X)
        return self.classes_[proba.argmax(axis=1)]

    def combine_with_rule(self, head: nn.Module, *, temperature: float) -> Student:
        """Release ``softmax(log p_S + log softmax(temperature * head(x)))``, the fitted student
        times its labelling rule (``head``, a ``RuleHead``), once; :meth:`save` keeps it."""
        from pate.student.rule_product import RuleHead, RuleProduct

        self._check_fitted()
        if getattr(self, "rule_product_", None) is not None:
            raise InputError("this Student is already combined with a labelling rule")
        if not isinstance(head, RuleHead):
            raise InputTypeError(
                f"head must be a pate.student.rule_product.RuleHead, got {type(head).__name__}"
            )
        device = next(self.model_.parameters()).device
        self.model_ = RuleProduct(self.model_, head.to(device), temperature).eval()
        self.rule_product_ = {
            "features": head.features,
            "rule": head.rule,
            "dims": int(head.pca_axes.shape[0]),
            "temperature": float(temperature),
        }
        return self

    def save(self, path: str | os.PathLike) -> pathlib.Path:
        """Write the fitted weights and settings to ``path`` atomically."""
        self._check_fitted()
        return write_student(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike, *, device: str = "cpu", model=None) -> Student:
        """A fitted Student from a file written by :meth:`save` (no code in the file runs;
        :func:`pate.student.weights_file.read_student`)."""
        return read_student(cls, path, device=device, model=model)


def _fingerprint(settings: dict, x: np.ndarray, *arrays: np.ndarray | None) -> str:
    """What a checkpoint is checked against: the inputs' shape, dtype and bytes, the other
    arrays' bytes (None: left out) and the settings."""
    digest = hashlib.sha256(repr((x.shape, str(x.dtype))).encode())
    for array in (x, *arrays):
        if array is not None:
            digest.update(array.tobytes())
    digest.update(json.dumps(settings, sort_keys=True).encode())
    return digest.hexdigest()


def train_student(
    public_x: Any,
    labels: Any,
    *,
    model: str = "auto",
    method: str = "fixmatch",
    soft_targets: Any = None,
    **settings: Any,
) -> Student:
    """:meth:`Student.fit` of a ``Student(model=model, method=method, **settings)``; an unknown
    setting (``votes=``, ``teachers=``, ...) is refused with a ``TypeError``."""
    valid = set(Student._get_param_names()) - {"model", "method"}
    unknown = sorted(set(settings) - valid)
    if unknown:
        never = {"votes", "teachers", "teacher", "private", "private_x", "data"} & set(unknown)
        hint = (
            " -- the student must never receive the teachers' votes, models or private data"
            if never
            else ""
        )
        raise InputTypeError(
            f"train_student got unexpected argument(s) {', '.join(unknown)}{hint}; "
            f"valid settings: {', '.join(sorted(valid))}"
        )
    return Student(model=model, method=method, **settings)._fit(
        public_x, labels, names=("public_x", "labels"), soft_targets=soft_targets
    )
