"""The student's files: the per-epoch checkpoint and the saved weights, written atomically and
read back with ``weights_only=True`` (no code in a file runs).

More: docs/student.md, "pate.student.checkpoint".
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np

from pate.analysis.errors import InputTypeError

__all__ = [
    "CHECKPOINT_NAME",
    "FORMAT",
    "WEIGHTS_KEYS",
    "CHECKPOINT_KEYS",
    "atomic_save",
    "load_student_file",
    "not_a_checkpoint",
    "plain_classes",
]

CHECKPOINT_NAME = "student_checkpoint.pt"
FORMAT = "pate-learn-student/1"


def plain_classes(classes: np.ndarray) -> list:
    """``classes_`` as a list of Python str / int / float / bool (what a weights-only file holds)."""
    out = [c.item() if isinstance(c, np.generic) else c for c in classes.tolist()]
    bad = [c for c in out if not isinstance(c, (str, int, float, bool))]
    if bad:
        raise InputTypeError(
            f"cannot save a Student whose classes_ hold {type(bad[0]).__name__} labels "
            f"({bad[0]!r}); use str or int labels to save it"
        )
    return out


def atomic_save(obj: Any, path: pathlib.Path) -> None:
    """``torch.save(obj)`` to ``path`` atomically (a run output: never commit it)."""
    from pate.teachers.checkpoint import atomic_torch_save

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_torch_save(path, obj)


#: The keys of the files :meth:`pate.student.train.Student.save` and the per-epoch checkpoint
#: write (checked on load).
WEIGHTS_KEYS = frozenset(
    {
        "format",
        "model_name",
        "input_shape",
        "num_classes",
        "settings",
        "seed",
        "history",
        "n_labelled",
        "classes",
        "rule_product",
        "state_dict",
    }
)
CHECKPOINT_KEYS = frozenset(
    {
        "format",
        "fingerprint",
        "seed",
        "epoch",
        "model",
        "ema",
        "optimizer",
        "generators",
        "prediction_mean",
        "history",
    }
)


def not_a_checkpoint(path, exc: BaseException, *, remedy: str):
    from pate.teachers.checkpoint import CheckpointError

    detail = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else "no details"
    return CheckpointError(
        f"{str(path)!r} is not a student file written by pate-learn ({type(exc).__name__}: "
        f"{detail}); {remedy.rstrip('.')}.",
        path=path,
    )


def load_student_file(path, keys: frozenset, *, remedy: str) -> dict:
    """A student file of pate-learn, read with ``weights_only=True`` (no code runs): a dict of
    format ``FORMAT`` holding ``keys``. Anything else (a pickle of other objects, a damaged or
    foreign file) raises ``CheckpointError`` naming the file, saying it was not written by
    pate-learn, and what to do (``remedy``)."""
    from pate.teachers.checkpoint import CheckpointError, load_torch

    blob = load_torch(path, remedy=remedy)
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        raise CheckpointError(
            f"{str(path)!r} is not a student file written by pate-learn "
            f"(format {FORMAT}); {remedy.rstrip('.')}.",
            path=path,
        )
    missing = sorted(keys - set(blob))
    if missing:
        raise CheckpointError(
            f"{str(path)!r} is not a student file written by pate-learn (it "
            f"lacks {', '.join(missing)}); {remedy.rstrip('.')}.",
            path=path,
        )
    return blob
