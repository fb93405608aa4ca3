"""The table encoder: fitted on the public rows only, its output, its JSON, a user's transformer."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import make_column_transformer
from sklearn.impute import SimpleImputer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from pate.analysis.errors import InputError, InputTypeError
from pate.teachers.table_encoding import FittedOnPublic, TableColumns, TableEncoder

COLUMNS = TableColumns(
    label="outcome",
    id="patient_id",
    numeric=("age", "income"),
    categorical=("sex", "region"),
    dropped=("note",),
)


def hospital(rows: int, seed: int) -> pd.DataFrame:
    """Rows of a messy table: an id, a wildly scaled skewed column, gaps, text categories."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "patient_id": [f"P{seed}{index:05d}" for index in range(rows)],
            "age": rng.normal(50, 12, rows),
            "income": rng.lognormal(10, 1.5, rows),
            "sex": rng.choice(["F", "M"], rows),
            "region": rng.choice(["North", "South", "East"], rows),
            "note": ["free text"] * rows,
            "outcome": rng.choice(["home", "died"], rows),
        }
    )
    frame.loc[rng.random(rows) < 0.1, "age"] = np.nan
    frame.loc[rng.random(rows) < 0.1, "region"] = None
    return frame


def test_the_public_rows_alone_decide_the_encoding():
    public, private = hospital(300, 0), hospital(200, 1)
    encoder = TableEncoder.fit_public(public, COLUMNS)
    assert encoder.feature_names == (
        "age",
        "age_missing",
        "income",
        "sex=F",
        "sex=M",
        "region=East",
        "region=North",
        "region=South",
    )
    x = encoder.transform(private)
    assert x.dtype == np.float32 and x.shape == (200, 8) and np.isfinite(x).all()
    # private rows that are wildly out of the public range change no statistic: same encoder
    wild = private.copy()
    wild["income"] *= 1e6
    assert encoder.to_json() == TableEncoder.fit_public(public, COLUMNS).to_json()
    assert np.abs(encoder.transform(wild)[:, 2]).max() <= 5.2  # bounded normal scores
    # the skewed, wildly scaled column becomes a bell on the public rows
    scores = encoder.transform(public)[:, 2]
    assert abs(float(np.mean(scores))) < 0.1 and 0.8 < float(np.std(scores)) < 1.3
    # a gap is the public median with its indicator; a gap in a category is the most frequent
    gap = private["age"].isna().to_numpy()
    assert gap.any() and (x[gap, 1] == 1).all() and (x[~gap, 1] == 0).all()
    assert np.ptp(x[gap, 0]) == 0
    assert (x[:, 5:].sum(axis=1) == 1).all()


def test_an_unseen_category_is_all_zeros_and_other_columns_are_ignored():
    encoder = TableEncoder.fit_public(hospital(100, 0), COLUMNS)
    rows = hospital(3, 2).drop(columns=["outcome", "patient_id", "note"])
    rows.loc[0, "region"] = "Atlantis"
    x = encoder.transform(rows)
    assert (x[0, 5:] == 0).all() and (x[1:, 5:].sum(axis=1) == 1).all()


def test_json_round_trip_is_exact_and_plain():
    public = hospital(150, 0)
    encoder = TableEncoder.fit_public(public, COLUMNS)
    state = json.loads(json.dumps(encoder.to_json()))
    again = TableEncoder.from_json(state)
    assert again.feature_names == encoder.feature_names and again.columns == COLUMNS
    assert np.array_equal(again.transform(hospital(50, 3)), encoder.transform(hospital(50, 3)))
    assert again.describe() == encoder.describe()
    with pytest.raises(InputError, match="format"):
        TableEncoder.from_json({"format": "pickle"})
    state["numeric"][0]["median"] = float("nan")
    with pytest.raises(InputError, match="finite"):
        TableEncoder.from_json(state)


def test_describe_says_what_was_fitted_on_what():
    lines = TableEncoder.fit_public(hospital(120, 0), COLUMNS).describe()
    text = "\n".join(lines)
    assert "fitted on the 120 public rows only" in lines[0]
    assert "missing indicator for ['age']" in text and "quantiles" in text
    assert "region: 3" in text and "'patient_id' (never a feature)" in text
    assert "8 features from 4 columns" in text


def test_bad_tables_are_refused_naming_the_column():
    public = hospital(50, 0)
    with pytest.raises(InputError, match="'income'"):
        TableEncoder.fit_public(public.drop(columns=["income"]), COLUMNS)
    empty = public.assign(age=np.nan)
    with pytest.raises(InputError, match="'age' has no value in the public rows"):
        TableEncoder.fit_public(empty, COLUMNS)
    encoder = TableEncoder.fit_public(public, COLUMNS)
    with pytest.raises(InputError, match="'age'.*not a number"):
        encoder.transform(public.assign(age="old"))
    with pytest.raises(InputTypeError, match="DataFrame"):
        encoder.transform(public.to_numpy())


def _user_transformer():
    return make_column_transformer(
        (make_pipeline(SimpleImputer(), StandardScaler()), ["age", "income"]),
        (OneHotEncoder(handle_unknown="ignore"), ["sex", "region"]),
    )


def test_a_users_transformer_is_cloned_and_fitted_on_public_rows_only():
    public = hospital(200, 0)
    given = _user_transformer()
    encoder = TableEncoder.fit_public(public, COLUMNS, transformer=given)
    assert encoder.transformer is not given and not hasattr(given, "transformers_")
    expected = _user_transformer().fit(public[list(COLUMNS.features)]).transform(public)
    assert np.allclose(encoder.transform(public), expected, atol=1e-6)
    assert encoder.feature_names[0] == "pipeline__age" and len(encoder.feature_names) == 8
    assert (
        "the user's ColumnTransformer, fitted on the 200 public rows only"
        in (encoder.describe()[0])
    )
    with pytest.raises(InputError, match="cannot be stored as JSON"):
        encoder.to_json()


def test_an_already_fitted_transformer_is_refused_unless_declared_public():
    public = hospital(100, 0)
    fitted = _user_transformer().fit(hospital(100, 9))  # it may have seen private rows
    with pytest.raises(InputError, match="already fitted.*FittedOnPublic"):
        TableEncoder.fit_public(public, COLUMNS, transformer=fitted)
    declared = TableEncoder.fit_public(public, COLUMNS, transformer=FittedOnPublic(fitted))
    assert declared.transformer is fitted  # used as it is, not refitted
    assert "declared public" in declared.describe()[0]
    with pytest.raises(InputTypeError, match="scikit-learn transformer"):
        TableEncoder.fit_public(public, COLUMNS, transformer="standard")
