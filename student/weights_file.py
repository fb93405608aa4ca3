"""The released student's weights file: what :meth:`pate.student.train.Student.save` writes and
:meth:`pate.student.train.Student.load` reads back (its format, atomic writing and checks:
:mod:`pate.student.checkpoint`).
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

import numpy as np
import torch

from pate.analysis.errors import InputError, InputTypeError
from pate.student.checkpoint import FORMAT, atomic_save, load_student_file, not_a_checkpoint
from pate.student.settings import resolve_device
from pate.student.trainer import Standardize


def write_student(student: Any, path: str | os.PathLike) -> pathlib.Path:
    """Write the fitted ``student``'s weights and settings to ``path`` atomically; its
    ``classes_`` must be plain str / int / float / bool labels (what a weights-only file holds)."""
    classes = [c.item() if isinstance(c, np.generic) else c for c in student.classes_.tolist()]
    bad = [c for c in classes if not isinstance(c, (str, int, float, bool))]
    if bad:
        raise InputTypeError(
            f"cannot save a Student whose classes_ hold {type(bad[0]).__name__} labels "
            f"({bad[0]!r}); use str or int labels to save it"
        )
    return atomic_save(
        {
            "format": FORMAT,
            "model_name": student.model_name_,
            "input_shape": list(student.input_shape_),
            "num_classes": student.num_classes_,
            "settings": student.settings_,
            "seed": student.seed_,
            "classes": classes,
            "history": student.history_,
            "n_labelled": student.n_labelled_,
            "rule_product": getattr(student, "rule_product_", None),
            "state_dict": {k: v.detach().cpu() for k, v in student.model_.state_dict().items()},
        },
        pathlib.Path(path),
    )


def read_student(cls: type, path: str | os.PathLike, *, device: str = "cpu", model=None) -> Any:
    """A fitted ``cls`` (the Student class) from a file written by :func:`write_student`; any
    other file raises :class:`pate.teachers.checkpoint.CheckpointError` naming it."""
    path = pathlib.Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"no student weights at {path}; train one with `pate train-student`"
        )
    remedy = (
        "train the student again (`pate train-student --run-dir DIR`), or load a file "
        "written by Student.save"
    )
    blob = load_student_file(path, remedy=remedy)
    try:
        return _from_blob(cls, path, blob, device=device, model=model)
    except (RuntimeError, KeyError, TypeError, AttributeError, IndexError) as exc:
        # tensors and plain containers only (weights_only), but not the ones Student.save
        # writes: a damaged or crafted file
        raise not_a_checkpoint(path, exc, remedy=remedy) from None


def _from_blob(cls: type, path: pathlib.Path, blob: dict, *, device: str, model) -> Any:
    """The saved network rebuilt (with the rule head of a class-means run), its weights loaded,
    in a fitted ``cls``."""
    from pate.teachers.models import build_model

    settings = dict(blob["settings"])
    input_shape = tuple(int(s) for s in blob["input_shape"])
    num_classes = int(blob["num_classes"])
    name = blob["model_name"]
    if name.startswith("python:"):
        if model is None:
            raise InputError(
                f"{path}: the student's network was built by the Python factory "
                f"{name[7:]}; pass it again: Student.load(path, model=factory)"
            )
        name = model
    net = build_model(name, input_shape=input_shape, num_classes=num_classes)
    state = blob["state_dict"]
    product = blob["rule_product"]  # None: no labelling-rule head
    prefix = "student." if product else ""
    network: torch.nn.Module = Standardize(
        net, torch.zeros_like(state[prefix + "mean"]), torch.ones_like(state[prefix + "std"])
    )
    if product:
        from pate.student.rule_product import RuleHead, RuleProduct

        head = RuleHead(
            input_shape=input_shape,
            features=product["features"],
            rule=product["rule"],
            dims=int(product["dims"]),
            num_classes=num_classes,
        )
        network = RuleProduct(network, head, float(product["temperature"]))
    network.load_state_dict(state)
    dev = resolve_device(device)
    network.to(dev).eval()
    student = cls(
        **{k: settings[k] for k in cls._get_param_names() if k in settings},
        random_state=blob["seed"],
        device=str(dev),
        progress=False,
    )
    student.model = settings["model"]
    student.model_ = network
    student.classes_ = np.asarray(blob["classes"])
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
