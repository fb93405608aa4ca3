"""The released student that takes raw table rows: the public-fitted table encoder
(:mod:`pate.teachers.table_encoding`) in front of the student and the declared class names
behind it, stored as ``student_encoder.json`` beside ``student.pt`` (a user's own transformer
is never stored, no pickles: its loader takes it as an argument; docs/publishing.md).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Any

import numpy as np
import pandas as pd

from pate.analysis.errors import InputError, InputTypeError
from pate.core.io import atomic_write_json
from pate.teachers.table_encoding import TableColumns, TableEncoder

__all__ = ["ENCODER_FILE", "RawRowStudent", "write_encoder_file"]

ENCODER_FILE = "student_encoder.json"  # pate.run.rundir.STUDENT_ENCODER
_FORMAT = "pate-student-encoder"


def write_encoder_file(
    path: str | os.PathLike, encoder: TableEncoder, class_names: Any = None
) -> pathlib.Path:
    """Write what turns raw rows into the student's inputs, and the declared class names, to
    ``path`` as JSON (public facts only: the encoder was fitted on public rows)."""
    state = {
        "format": _FORMAT,
        "class_names": None if class_names is None else [str(name) for name in class_names],
        "columns": dataclasses.asdict(encoder.columns),
        "feature_names": list(encoder.feature_names),
        "encoder": encoder.to_json() if encoder.builtin else None,
        "transformer": None if encoder.builtin else type(encoder.transformer).__name__,
        "describe": encoder.describe(),
    }
    return atomic_write_json(path, state)


class RawRowStudent:
    """A fitted student with its table encoder, predicting from a DataFrame of raw rows (label,
    id and dropped columns ignored): ``predict`` gives the declared class names when known (else
    class indices); ``classes_`` is the order of ``predict_proba``'s columns."""

    def __init__(self, student: Any, encoder: TableEncoder, class_names: Any = None) -> None:
        self.student = student
        self.encoder = encoder
        self.class_names = None if class_names is None else np.asarray(list(class_names))
        classes = np.asarray(getattr(student, "classes_", []))
        self.classes_ = self.class_names[classes] if self.class_names is not None else classes

    def encode(self, rows: pd.DataFrame) -> np.ndarray:
        """``rows`` as the student's inputs (float32), through the public-fitted encoder."""
        if not isinstance(rows, pd.DataFrame):
            raise InputTypeError(
                f"the student takes raw rows as a pandas DataFrame with the columns "
                f"{list(self.encoder.columns.features)}, got {type(rows).__name__} (for encoded "
                f"arrays, call .student.predict)"
            )
        return self.encoder.transform(rows)

    def predict_proba(self, rows: pd.DataFrame) -> np.ndarray:
        return np.asarray(self.student.predict_proba(self.encode(rows)))

    def predict(self, rows: pd.DataFrame) -> np.ndarray:
        indices = np.asarray(self.student.predict(self.encode(rows)), dtype=np.int64)
        return indices if self.class_names is None else self.class_names[indices]

    @classmethod
    def load(
        cls, path: str | os.PathLike, *, transformer: Any = None, device: str = "cpu", model=None
    ) -> RawRowStudent:
        """The released student of a run directory or exported bundle (``path``: the folder or its
        ``student.pt``); ``transformer``: the run's own fitted transformer, when it had one (it is
        not stored); ``device``, ``model``: as :meth:`pate.student.train.Student.load`."""
        from pate.student.train import Student

        path = pathlib.Path(path)
        weights = path / "student.pt" if path.is_dir() else path
        state = _read_state(weights.parent / ENCODER_FILE)
        encoder = _encoder(state, transformer, weights.parent / ENCODER_FILE)
        student = Student.load(weights, device=device, model=model)
        width = tuple(student.input_shape_)
        if width != (len(encoder.feature_names),):
            raise InputError(
                f"{weights}: the student takes inputs of shape {width}, but the encoder gives "
                f"{len(encoder.feature_names)} features; pass the transformer the run was fitted "
                f"with, or keep {ENCODER_FILE} and student.pt from the same run"
            )
        return cls(student, encoder, state["class_names"])


def _read_state(path: pathlib.Path) -> dict:
    if not path.is_file():
        raise InputError(
            f"no {ENCODER_FILE} at {path}: this student was trained on arrays, not on a table; "
            f"load it with pate.student.Student.load and give it encoded inputs"
        )
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"{path} cannot be read as JSON ({error}); export the run again") from None
    if not isinstance(state, dict) or state.get("format") != _FORMAT:
        raise InputError(f"{path} is not a pate-learn student encoder ({_FORMAT!r} expected)")
    return state


def _encoder(state: dict, transformer: Any, path: pathlib.Path) -> TableEncoder:
    if state.get("encoder") is not None:
        if transformer is not None:
            raise InputError(f"{path} holds the run's built-in encoder; do not pass a transformer")
        return TableEncoder.from_json(state["encoder"])
    if transformer is None:
        raise InputError(
            f"{path}: the run used the user's own transformer {state.get('transformer')!r}, which "
            f"is never stored (no pickles); pass the fitted one: "
            f"RawRowStudent.load(path, transformer=...)"
        )
    if not (hasattr(transformer, "transform") and hasattr(transformer, "fit")):
        raise InputTypeError(
            f"transformer must be the user's fitted scikit-learn transformer of the run, got "
            f"{type(transformer).__name__}"
        )
    try:
        columns = TableColumns.from_json(state["columns"])
        names = tuple(str(name) for name in state["feature_names"])
    except (KeyError, TypeError) as error:
        raise InputError(
            f"{path} is incomplete or malformed ({error}); export the run again"
        ) from None
    try:
        given = tuple(str(name) for name in transformer.get_feature_names_out())
    except (AttributeError, ValueError, TypeError):
        given = names  # a transformer that does not name its features: the student checks
    if given != names:
        raise InputError(
            f"{path}: the transformer gives {len(given)} features {list(given)[:4]}..., the "
            f"student was trained on {len(names)} {list(names)[:4]}...; pass the fitted "
            f"transformer the run used"
        )
    encoder = TableEncoder(columns, public_rows=0, transformer=transformer)
    encoder.feature_names = names
    return encoder
