"""The released student on raw table rows: its encoder file beside student.pt, written by the
student stage, and loaded back with or without the user's own transformer."""

from __future__ import annotations

import json
import types

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import make_column_transformer
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from pate.analysis.errors import InputError, InputTypeError
from pate.run import rundir
from pate.run.stages.student import save_encoder
from pate.student.raw_rows import ENCODER_FILE, RawRowStudent, write_encoder_file
from pate.student.train import train_student
from pate.teachers.table_encoding import TableColumns, TableEncoder

COLUMNS = TableColumns(
    label="outcome", id="patient_id", numeric=("age", "dose"), categorical=("ward",)
)
CLASSES = ("home", "readmitted", "died")


def table(rows: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    age = rng.normal(60, 15, rows)
    frame = pd.DataFrame(
        {
            "patient_id": [f"P{seed}-{index}" for index in range(rows)],
            "age": age,
            "dose": rng.lognormal(3, 1, rows),
            "ward": rng.choice(["A", "B", "C"], rows),
            "outcome": np.array(CLASSES)[np.digitize(age, [50, 70])],
        }
    )
    frame.loc[::7, "age"] = np.nan
    return frame


def _trained(encoder: TableEncoder, public: pd.DataFrame):
    labels = np.digitize(public["age"].fillna(60).to_numpy(), [50, 70]).astype(np.int64)
    return train_student(
        encoder.transform(public),
        labels,
        model="mlp",
        epochs=1,
        steps_per_epoch=5,
        progress=False,
        device="cpu",
        num_classes=3,
        random_state=0,
    )


def test_the_saved_student_predicts_class_names_on_raw_rows(tmp_path):
    public, evaluation = table(200, 0), table(40, 1)
    encoder = TableEncoder.fit_public(public, COLUMNS)
    student = _trained(encoder, public)
    student.save(tmp_path / "student.pt")
    write_encoder_file(tmp_path / ENCODER_FILE, encoder, CLASSES)
    loaded = RawRowStudent.load(tmp_path)
    assert list(loaded.classes_) == list(CLASSES)
    names = loaded.predict(evaluation)  # the evaluation file's rows, label and id included
    indices = student.predict(encoder.transform(evaluation))
    assert list(names) == [CLASSES[index] for index in indices]
    assert np.allclose(
        loaded.predict_proba(evaluation),
        student.predict_proba(encoder.transform(evaluation)),
        atol=1e-6,
    )
    assert np.array_equal(RawRowStudent.load(tmp_path / "student.pt").predict(evaluation), names)
    with pytest.raises(InputTypeError, match="DataFrame"):
        loaded.predict(encoder.transform(evaluation))
    with pytest.raises(InputError, match="do not pass a transformer"):
        RawRowStudent.load(tmp_path, transformer=StandardScaler())


def test_a_users_transformer_is_not_stored_and_must_be_passed(tmp_path):
    public = table(150, 0)
    transformer = make_column_transformer(
        (StandardScaler(), ["dose"]), (OneHotEncoder(handle_unknown="ignore"), ["ward"])
    )
    encoder = TableEncoder.fit_public(public, COLUMNS, transformer=transformer)
    _trained(encoder, public).save(tmp_path / "student.pt")
    write_encoder_file(tmp_path / ENCODER_FILE, encoder)
    state = json.loads((tmp_path / ENCODER_FILE).read_text())
    assert state["encoder"] is None and state["transformer"] == "ColumnTransformer"
    with pytest.raises(InputError, match="never stored.*transformer="):
        RawRowStudent.load(tmp_path)
    loaded = RawRowStudent.load(tmp_path, transformer=encoder.transformer)
    assert loaded.predict(table(5, 3)).dtype == np.int64  # no class names declared: indices
    with pytest.raises(InputError, match="gives 2 features.*trained on 4"):
        RawRowStudent.load(tmp_path, transformer=StandardScaler().fit(public[["age", "dose"]]))


def test_a_student_without_encoder_file_is_pointed_to_student_load(tmp_path):
    public = table(60, 0)
    _trained(TableEncoder.fit_public(public, COLUMNS), public).save(tmp_path / "student.pt")
    with pytest.raises(InputError, match="trained on arrays.*Student.load"):
        RawRowStudent.load(tmp_path)


def test_the_student_stage_writes_the_encoder_beside_the_student(tmp_path):
    assert rundir.STUDENT_ENCODER == ENCODER_FILE
    encoder = TableEncoder.fit_public(table(80, 0), COLUMNS)
    run = types.SimpleNamespace(
        data=types.SimpleNamespace(encoder=encoder, class_names=CLASSES),
        path=lambda name: tmp_path / name,
    )
    save_encoder(run)
    state = json.loads((tmp_path / rundir.STUDENT_ENCODER).read_text())
    assert state["class_names"] == list(CLASSES)
    assert TableEncoder.from_json(state["encoder"]).to_json() == encoder.to_json()
    assert rundir.preprocessing_lines(tmp_path) == encoder.describe()
    arrays = types.SimpleNamespace(data=types.SimpleNamespace(encoder=None), path=run.path)
    (tmp_path / rundir.STUDENT_ENCODER).unlink()
    save_encoder(arrays)  # a run on arrays: no file
    assert not (tmp_path / rundir.STUDENT_ENCODER).exists()
    assert rundir.preprocessing_lines(tmp_path) == []
