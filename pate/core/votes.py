"""Teacher votes: from predictions to the (queries, classes) vote matrix (sensitive: saved only
in the run directory, never printed).

``num_classes`` is always explicit, never inferred from the data, so a class no teacher predicts
still has a column. Every row of a vote matrix sums to the number of teachers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.validation import check_int, describe

__all__ = ["votes_from_predictions"]


def votes_from_predictions(predictions: Any, *, num_classes: int) -> np.ndarray:
    """(queries, num_classes) int64 counts of the teachers' labels, every row summing to the
    number of teachers; ``predictions[t, q]`` is teacher t's label for query q, in
    [0, num_classes), ``num_classes`` >= 2."""
    num_classes = check_int(num_classes, "num_classes", minimum=2)
    if hasattr(predictions, "detach"):  # a torch tensor, without importing torch
        predictions = predictions.detach().cpu().numpy()
    preds = np.asarray(predictions)
    if preds.dtype == np.bool_ or not np.issubdtype(preds.dtype, np.integer):
        raise InputTypeError(
            f"predictions must hold integer class labels, got {describe(preds)}; "
            "for per-class scores pass their argmax over classes"
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
    return votes.astype(np.int64, copy=False)
