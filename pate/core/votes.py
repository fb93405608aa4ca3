"""Teacher votes: from predictions to the (queries, classes) vote matrix, saved only as
``<run_dir>/votes.npy`` and never printed (sensitive).

``num_classes`` is always explicit, never inferred from the data, so a class no teacher predicts
still has a column. Every row of a vote matrix sums to the number of teachers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.validation import check_int, check_probabilities, check_votes, describe
from pate.core.io import atomic_save_npy

__all__ = [
    "votes_from_predictions",
    "votes_from_probabilities",
    "save_votes",
    "load_votes",
    "describe_votes",
    "VOTES_FILENAME",
]

VOTES_FILENAME = "votes.npy"


def votes_from_predictions(predictions: Any, *, num_classes: int) -> np.ndarray:
    """(queries, num_classes) int64 counts of the teachers' labels, every row summing to the
    number of teachers; ``predictions[t, q]`` is teacher t's label for query q, in
    [0, num_classes), ``num_classes`` >= 2."""
    num_classes = check_int(num_classes, "num_classes", minimum=2)
    if isinstance(predictions, (str, bytes)) or predictions is None:
        raise InputTypeError(
            f"predictions must be a (teachers, queries) integer array, got {describe(predictions)}"
        )
    preds = _to_numpy(predictions)
    if preds.dtype == np.bool_ or not np.issubdtype(preds.dtype, np.integer):
        raise InputTypeError(
            f"predictions must hold integer class labels, got {describe(preds)}; "
            "for per-class scores use votes_from_probabilities"
        )
    if preds.ndim != 2:
        raise InputError(
            f"predictions must be 2-D with shape (teachers, queries), got shape {preds.shape}"
        )
    num_teachers, num_queries = preds.shape
    if num_teachers < 1:
        raise InputError("predictions has no teachers (shape[0] == 0)")
    preds = preds.astype(np.int64, copy=False)
    bad = (preds < 0) | (preds >= num_classes)
    if np.any(bad):
        t, q = np.unravel_index(int(np.argmax(bad)), preds.shape)
        raise InputError(
            f"predictions must lie in [0, num_classes={num_classes}); teacher {t} "
            f"predicted {int(preds[t, q])} for query {q}"
        )
    flat = (np.arange(num_queries, dtype=np.int64)[None, :] * num_classes + preds).ravel()
    votes = np.bincount(flat, minlength=num_queries * num_classes).reshape(num_queries, num_classes)
    votes = votes.astype(np.int64, copy=False)
    _check_row_sums(votes, num_teachers)
    return votes


def votes_from_probabilities(
    probabilities: Any, *, num_classes: int, atol: float = 1e-3
) -> np.ndarray:
    """Each teacher votes for its most probable class (ties: the lowest index, as ``argmax``).

    ``probabilities``: (teachers, queries, num_classes), non-negative and summing to 1 (within
    ``atol``) over the last axis; logits are refused (apply a softmax first, or pass
    ``logits.argmax(-1)`` to :func:`votes_from_predictions`). ``num_classes`` >= 2.
    """
    num_classes = check_int(num_classes, "num_classes", minimum=2)
    if isinstance(probabilities, (str, bytes)) or probabilities is None:
        raise InputTypeError(
            "probabilities must be a (teachers, queries, classes) array, "
            f"got {describe(probabilities)}"
        )
    probs = _to_numpy(probabilities)
    if (
        not (np.issubdtype(probs.dtype, np.floating) or np.issubdtype(probs.dtype, np.integer))
        or probs.dtype == np.bool_
    ):
        raise InputTypeError(f"probabilities must be a float array, got {describe(probs)}")
    if probs.ndim != 3:
        raise InputError(
            "probabilities must be 3-D with shape (teachers, queries, classes), got "
            f"shape {probs.shape}"
        )
    if probs.shape[2] != num_classes:
        raise InputError(
            f"probabilities has {probs.shape[2]} classes (last axis) but num_classes={num_classes}"
        )
    if probs.shape[0] < 1:
        raise InputError("probabilities has no teachers (shape[0] == 0)")
    probs = check_probabilities(probs, probs.shape, "probabilities", atol=atol)
    return votes_from_predictions(np.argmax(probs, axis=2), num_classes=num_classes)


def _to_numpy(x: Any) -> np.ndarray:
    # Accept torch tensors without importing torch.
    if hasattr(x, "detach") and hasattr(x, "cpu") and hasattr(x, "numpy"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _check_row_sums(votes: np.ndarray, num_teachers: int) -> None:
    sums = votes.sum(axis=1)
    if np.any(sums != num_teachers):  # pragma: no cover - guaranteed by construction
        raise RuntimeError("vote rows do not sum to the number of teachers")


def describe_votes(votes: Any) -> str:
    """``'1000 queries x 10 classes, 250 teachers'`` - never the counts themselves."""
    arr = check_votes(votes)
    teachers = int(arr[0].sum()) if arr.shape[0] else 0
    return f"{arr.shape[0]} queries x {arr.shape[1]} classes, {teachers} teachers"


def save_votes(run_dir: str | os.PathLike[str], votes: Any) -> Path:
    """Write ``votes`` to ``<run_dir>/votes.npy`` atomically (temp file + ``os.replace``)."""
    arr = check_votes(votes)
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {str(run_dir)!r} does not exist; create it first")
    path = run_dir / VOTES_FILENAME
    atomic_save_npy(path, arr)
    return path


def load_votes(path: str | os.PathLike[str], *, num_classes: int | None = None) -> np.ndarray:
    """Read and validate a vote matrix saved as ``.npy`` (no pickles).

    With ``num_classes`` the number of columns is checked against it.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no votes file at {str(path)!r}")
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InputError(f"{str(path)!r} is not a readable .npy vote matrix ({exc})") from None
    votes = check_votes(arr, name=f"votes in {path.name}")
    if num_classes is not None:
        num_classes = check_int(num_classes, "num_classes", minimum=2)
        if votes.shape[1] != num_classes:
            raise InputError(
                f"votes in {path.name} have {votes.shape[1]} classes, expected "
                f"num_classes={num_classes}"
            )
    return votes
