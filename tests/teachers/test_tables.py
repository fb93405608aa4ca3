"""Tables with named columns (issue #50): the hospital-style scenario from CSV, Parquet and
DataFrames, the columns' roles from the public rows, and every bad table refused in the
table's words (file, row as the file counts it, column, value) before anything is fitted."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pandas as pd
import pytest

from pate.analysis.errors import InputError, InputTypeError
from pate.teachers.data import load_pate_data, table_data
from pate.teachers.table_encoding import FittedOnPublic
from pate.teachers.tables import TableSpec, column_lines, load_tables

OUTCOMES = ["home", "readmitted", "died"]


def hospital(rows: int, seed: int, *, first_id: int = 100000) -> pd.DataFrame:
    """A hospital-style export: a text patient id, numeric columns on scales 0.25 .. 20 000,
    text columns sex / region / smoker, about 2 % empty or NA cells, a text label outcome
    that depends on the columns."""
    rng = np.random.default_rng(seed)
    age = rng.uniform(18, 90, rows)
    creatinine = rng.lognormal(0, 0.5, rows) * 0.25 * 4
    charges = rng.lognormal(8, 0.8, rows).clip(0, 20000)
    stay = rng.poisson(4, rows).astype(float)
    smoker = rng.choice(["yes", "no"], rows)
    score = (age - 50) / 20 + (creatinine - 1) + (smoker == "yes") + rng.normal(0, 0.5, rows)
    outcome = np.where(score < 0.3, "home", np.where(score < 1.5, "readmitted", "died"))
    frame = pd.DataFrame(
        {
            "patient_id": [f"P{first_id + i}" for i in range(rows)],
            "age": age.round(1),
            "creatinine": creatinine.round(2),
            "charges": charges.round(0),
            "stay_days": stay,
            "sex": rng.choice(["F", "M"], rows),
            "region": rng.choice(["North", "South", "East", "Central"], rows),
            "smoker": smoker,
            "outcome": outcome,
        }
    )
    for column in ("age", "creatinine", "charges", "sex", "region"):
        gaps = rng.random(rows) < 0.02
        frame[column] = frame[column].astype(object).where(~gaps, None)
    return frame


@pytest.fixture(scope="module")
def frames():
    return hospital(600, 0), hospital(300, 1, first_id=200000), hospital(200, 2, first_id=300000)


@pytest.fixture
def files(frames, tmp_path):
    """The three tables as CSV files (the public one unlabelled; some gaps written NA)."""
    private, public, evaluation = frames
    paths = {}
    for split, frame in zip(("private", "public", "evaluation"), frames):
        if split == "public":
            frame = frame.assign(outcome="")
        paths[split] = tmp_path / f"{split}.csv"
        frame.to_csv(paths[split], index=False, na_rep="NA" if split == "private" else "")
    return paths


SPEC = dict(label="outcome", id="patient_id")


def test_csv_tables_are_read_checked_and_encoded(files):
    data = load_pate_data(
        f"csv:{files['private']}",
        classes=OUTCOMES,
        table=TableSpec(public=str(files["public"]), evaluation=files["evaluation"], **SPEC),
    )
    assert data.columns.numeric == ("age", "creatinine", "charges", "stay_days")
    assert data.columns.categorical == ("sex", "region", "smoker")
    assert (len(data.private), len(data.public), len(data.evaluation)) == (600, 300, 200)
    assert data.class_names == tuple(OUTCOMES) and data.num_classes == 3
    assert (data.public.y == -1).all() and set(np.unique(data.private.y)) == {0, 1, 2}
    assert data.private.x.dtype == np.float32 and np.isfinite(data.private.x).all()
    assert data.unit_ids[0] == "P100000" and len(data.unit_ids) == 600
    assert data.name == f"csv:{files['private']}"
    lines = column_lines(data.columns, data.encoder)
    assert "numeric     age, creatinine, charges, stay_days" in lines
    assert any(line.startswith("encoding") for line in lines)


def test_frames_and_parquet_give_the_same_rows(frames, files, tmp_path):
    private, public, evaluation = frames
    parquet = tmp_path / "public.parquet"
    public.drop(columns="outcome").to_parquet(parquet)
    spec = TableSpec(public=parquet, evaluation=evaluation, **SPEC)
    from_frames = table_data(private, spec, name="memory:hospital", classes=OUTCOMES)
    from_csv = load_tables(files["private"], spec, OUTCOMES)
    np.testing.assert_allclose(from_frames.private.x, from_csv.x["private"], atol=1e-5)
    # the public labels, where given, give the classes (sorted) when none are declared
    labelled = load_tables(private, TableSpec(public=public, **SPEC))
    assert labelled.class_names == sorted(OUTCOMES)


def test_without_evaluation_a_tenth_of_the_people_is_held_out(frames):
    private, public, _ = frames
    data = table_data(private, TableSpec(public=public, **SPEC), name="t", split_key=b"k" * 32)
    assert 30 < len(data.evaluation) < 100 and len(data.private) == len(data.unit_ids)
    assert len(data.private) + len(data.evaluation) == 600


def bad(files, change, split="private", **spec):
    """The one-line error of loading the CSV tables after ``change(frame)`` of ``split``."""
    frame = pd.read_csv(files[split], dtype=str)
    change(frame)
    frame.to_csv(files[split], index=False)
    spec = dict(SPEC, **spec)
    with pytest.raises(InputError) as caught:
        load_tables(
            files["private"], TableSpec(files["public"], files["evaluation"], **spec), OUTCOMES
        )
    message = str(caught.value)
    assert "\n" not in message and "nothing was trained" in message
    return message


def test_an_undeclared_text_id_is_refused_by_file_row_and_column(files):
    message = bad(files, lambda frame: None, id=None)
    assert f"file {files['public']}, row 2, column 'patient_id': 'P200000'" in message
    assert "id='patient_id'" in message


def test_a_missing_label_column_is_refused(files):
    message = bad(files, lambda frame: None, label="Outcome")
    assert f"file {files['private']}, row 1 (the header), column 'Outcome'" in message


def test_a_text_value_in_a_numeric_column_is_refused(files):
    def typo(frame):
        frame.loc[41, "charges"] = "12 300"

    message = bad(files, typo, split="evaluation")
    assert f"file {files['evaluation']}, row 43, column 'charges': '12 300'" in message


def test_a_public_file_with_other_columns_is_refused(files):
    def rename(frame):
        frame.columns = ["area" if c == "region" else c for c in frame.columns]

    message = bad(files, rename, "public")
    assert f"file {files['public']}, row 1 (the header), column 'region'" in message
    assert "not in the private table: ['area']" in message


def test_a_label_outside_the_classes_is_refused(files):
    def label(frame):
        frame.loc[9, "outcome"] = "transferred"

    message = bad(files, label)
    assert f"file {files['private']}, row 11, column 'outcome' has label 'transferred'" in message


def test_preprocess_none_and_a_transformer(frames):
    private, public, evaluation = frames
    numeric = [c for c in private.columns if c not in ("sex", "region", "smoker")]
    clean = [f[numeric].dropna() for f in frames]
    spec = TableSpec(public=clean[1], evaluation=clean[2], preprocess="none", **SPEC)
    tables = load_tables(clean[0], spec, OUTCOMES)
    assert tables.encoder is None and tables.x["private"].shape[1] == 4
    with pytest.raises(InputError, match="column 'sex': holds text, and preprocess=.none."):
        load_tables(private, TableSpec(public=public, preprocess="none", **SPEC), OUTCOMES)
    from sklearn.compose import make_column_transformer
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder

    transformer = make_column_transformer(
        (SimpleImputer(), ["age", "creatinine", "charges", "stay_days"]),
        (
            make_pipeline(SimpleImputer(strategy="most_frequent"), OneHotEncoder()),
            ["sex", "region", "smoker"],
        ),
    )
    spec = TableSpec(public=public, evaluation=evaluation, preprocess=transformer, **SPEC)
    assert load_tables(private, spec, OUTCOMES).x["private"].shape == (600, 4 + 2 + 4 + 2)
    declared = FittedOnPublic(transformer.fit(public))  # the user's, declared public-only
    spec = TableSpec(public=public, evaluation=evaluation, preprocess=declared, **SPEC)
    assert load_tables(private, spec, OUTCOMES).encoder.transformer is declared.transformer
    with pytest.raises(InputTypeError, match="preprocess must be"):
        load_tables(private, TableSpec(public=public, preprocess="scale", **SPEC), OUTCOMES)


# ------------------------------------------------------------------- through pate.fit and pate run

FIT = dict(classes=OUTCOMES, target_eps=2.0, records=600, seed=0, **SPEC)
QUICK = dict(student_params={"epochs": 200})


def test_fit_runs_the_hospital_tables_from_frames_and_from_csv(frames, files, tmp_path):
    import pate

    private, public, evaluation = frames
    unlabelled = public.assign(outcome=None)
    ledger = tmp_path / "ledger.sqlite3"
    result = pate.fit(
        private,
        unlabelled,
        evaluation=evaluation,
        ledger=ledger,
        run_dir=tmp_path / "a",
        **FIT,
        **QUICK,
    )
    assert result.epsilon <= 2.0 + 1e-9 and result.labels.shape == (300,)
    majority = evaluation["outcome"].value_counts(normalize=True).max()
    assert result.internal_report["utility"]["student_accuracy"] > majority
    config = json.loads((tmp_path / "a" / "config.json").read_text())
    assert config["data"]["name"] == "memory:in-memory data"
    assert config["data"]["label"] == "outcome" and config["data"]["id"] == "patient_id"
    paths = [str(files[split]) for split in ("private", "public", "evaluation")]
    result = pate.fit(
        paths[0],
        paths[1],
        evaluation=paths[2],
        ledger=False,
        run_dir=tmp_path / "b",
        **FIT,
        **QUICK,
    )
    config = json.loads((tmp_path / "b" / "config.json").read_text())
    assert config["data"]["name"] == f"csv:{paths[0]}"
    assert config["data"]["public"] == f"csv:{paths[1]}"


def template(paths, ledger) -> str:
    """The own-data template pointed at the three CSV tables (600 private rows declared)."""
    import pate

    text = (pathlib.Path(pate.__file__).parent / "configs" / "own_data.toml").read_text()
    for name, path in zip(("private", "public", "evaluation"), paths):
        text = text.replace(f'"csv:{name}.csv"', f'"csv:{path}"')
    text = text.replace("records = 5000", "records = 600")
    return text.replace("[privacy]\n", f'[privacy]\nledger = "{ledger}"\n')


def test_pate_plan_and_pate_plan_from_python_show_the_columns_the_same_way(files, tmp_path, capsys):
    """issue #50: "The same through the CLI and Python": both print which columns are used, how."""
    import pate
    from pate.cli import main

    paths = [str(files[s]) for s in ("private", "public", "evaluation")]
    config = tmp_path / "run.toml"
    config.write_text(template(paths, tmp_path / "ledger.sqlite3"))
    assert main(["plan", "--config", str(config)]) == 0
    printed = capsys.readouterr().out
    plan = pate.plan(
        *paths[:2], evaluation=paths[2], label="outcome", id="patient_id",
        classes=OUTCOMES, records=600, target_eps=2.0, ledger=tmp_path / "ledger.sqlite3",
    )  # fmt: skip
    assert plan.columns and "numeric     age, creatinine, charges, stay_days" in plan.columns
    assert all(line in printed for line in plan.columns) and str(plan).endswith(plan.columns[-1])
    assert plan.to_dict()["columns"] == list(plan.columns)
    assert not (tmp_path / "ledger.sqlite3").exists()  # a plan charges nothing


def test_pate_run_runs_the_hospital_csv_files(files, tmp_path):
    from pate.cli import main

    paths = [str(files[s]) for s in ("private", "public", "evaluation")]
    config = tmp_path / "run.toml"
    text = template(paths, tmp_path / "ledger.sqlite3")
    config.write_text(text.replace("[student]\n", "[student]\nepochs = 200\n"))
    assert main(["run", "--config", str(config), "--run-dir", str(tmp_path / "run")]) == 0
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["privacy"]["eps_guarantee"] <= 2.0 + 1e-9
    saved = json.loads((tmp_path / "run" / "config.json").read_text())["data"]
    assert saved["public"] == f"csv:{paths[1]}" and saved["id"] == "patient_id"


@pytest.mark.parametrize(
    "case, change, split, spec",
    [
        ("id", lambda frame: None, "public", {"id": None}),
        ("label", lambda frame: None, "private", {"label": "result"}),
        (
            "number",
            lambda frame: frame.__setitem__("age", frame["age"].fillna("old")),
            "private",
            {},
        ),
        ("columns", lambda frame: frame.insert(1, "ward", "B"), "public", {}),
    ],
)
def test_a_bad_table_charges_nothing_through_fit_and_pate_run(
    case, change, split, spec, files, tmp_path, capsys
):
    """Each bad-table case of issue #50: one line naming file, row and column; no run, no
    ledger entry, through pate.fit and through `pate run --config`."""
    import pate
    from pate.cli import main

    frame = pd.read_csv(files[split], dtype=str)
    change(frame)
    frame.to_csv(files[split], index=False)
    ledger = tmp_path / "ledger.sqlite3"
    keywords = dict(FIT, **spec, ledger=ledger, run_dir=tmp_path / "run")
    paths = [str(files[s]) for s in ("private", "public", "evaluation")]
    with pytest.raises(InputError) as caught:
        pate.fit(paths[0], paths[1], evaluation=paths[2], **keywords)
    assert f"file {files[split]}, row " in str(caught.value) and "column '" in str(caught.value)
    config = tmp_path / "run.toml"
    text = template(paths, ledger)
    if "id" in spec:
        text = text.replace('id = "patient_id"', "")
    config.write_text(
        text.replace('label = "outcome"', f'label = "{spec.get("label", "outcome")}"')
    )
    assert main(["run", "--config", str(config), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"file {files[split]}, row " in err and "column '" in err
    assert not (tmp_path / "run").exists() and not ledger.exists()
