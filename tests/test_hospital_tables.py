"""Issue #50's "Done when", end to end: the hospital scenario (benchmarks/messy_tables.py, at
1 200 private / 500 public / 300 evaluation rows: patient_id, 14 numeric columns on scales
0.25 .. 20 000, sex / region / smoker as text, about 2 % gaps written as empty cells or NA, the
text label outcome) runs with no preprocessing by the user from DataFrames and from CSV files
through ``pate.fit``, and through ``pate run`` with a ``[data]`` table naming the files, the
label, the id and the classes; the released student predicts on raw rows of the evaluation file;
the three runs on the same patients charge one dataset of the ledger."""

from __future__ import annotations

import importlib.util
import json
import pathlib

import numpy as np
import pandas as pd
import pytest

import pate
from pate.cli import main as cli_main
from pate.ledger import Ledger
from pate.run import rundir

ROOT = pathlib.Path(__file__).resolve().parents[1]
CLASSES = ["home", "readmitted", "died"]
TARGET_EPS = 2.0
#: a short student (100 steps instead of the default's 1 000 or more): the test is about the
#: table's way through, kept under a minute for the three runs on one core
STUDENT_EPOCHS = 50


def _messy_tables():
    """benchmarks/messy_tables.py (not a package: loaded from its file), for the scenario."""
    path = ROOT / "benchmarks" / "messy_tables.py"
    spec = importlib.util.spec_from_file_location("_hospital_messy_tables", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MESSY = _messy_tables()


@pytest.fixture(scope="module")
def hospital(tmp_path_factory):
    """The scenario's frames and its three CSV files (gaps as empty cells or NA)."""
    table = MESSY.hospital(1_500, seed=50, public_rows=500)
    folder = tmp_path_factory.mktemp("hospital")
    files = {
        name: MESSY.write_csv(getattr(table, name), folder / f"{name}.csv", seed=index)
        for index, name in enumerate(MESSY.SPLITS)
    }
    return table, files, folder


def _fit(private, public, evaluation, folder: pathlib.Path, run: str):
    """pate.fit with the table's names and the declared facts, no preprocessing (the ledger
    shared by the three runs; budget 8 so that one dataset can pay for all three)."""
    return pate.fit(
        private,
        public,
        evaluation=evaluation,
        label="outcome",
        id="patient_id",
        classes=CLASSES,
        records=1_200,
        target_eps=TARGET_EPS,
        budget_eps=8.0,
        ledger=folder / "ledger.sqlite3",
        run_dir=folder / run,
        seed=0,
        student_params={"epochs": STUDENT_EPOCHS},
    )


@pytest.fixture(scope="module")
def from_frames(hospital):
    table, _, folder = hospital
    return _fit(table.private, table.public, table.evaluation, folder, "frames")


@pytest.fixture(scope="module")
def from_csv(hospital, from_frames):
    _, files, folder = hospital
    return _fit(
        files["private"],  # a pathlib.Path
        str(files["public"]),  # a str ending in .csv
        f"csv:{files['evaluation']}",  # a prefixed source
        folder,
        "csv",
    )


@pytest.fixture(scope="module")
def from_cli(hospital, from_csv):
    """``pate run --config`` on a config whose [data] table names the three CSV files."""
    _, files, folder = hospital
    config = folder / "hospital.toml"
    config.write_text(
        f"""
[run]
name = "hospital"
run_dir = "{folder / "cli"}"
seed = 0

[data]
name = "csv:{files["private"]}"
public = "csv:{files["public"]}"
evaluation = "csv:{files["evaluation"]}"
label = "outcome"
id = "patient_id"
classes = {CLASSES!r}
records = 1200

[aggregator]
mechanism = "auto"
target_eps = {TARGET_EPS}

[student]
epochs = {STUDENT_EPOCHS}

[privacy]
delta = 1e-5
release_order = 10.0
release_beta = 0.04
release_sigma_ss = 10.0
ledger = "{folder / "ledger.sqlite3"}"
""".replace("'", '"')
    )
    assert cli_main(["run", "--config", str(config)]) == 0
    return folder / "cli"


def _raw_evaluation_rows(files) -> tuple[pd.DataFrame, np.ndarray]:
    """The evaluation file's rows as pandas reads them (gaps NaN, text as text), the outcome
    column taken off: what a user holds when asking the student."""
    raw = pd.read_csv(files["evaluation"])
    truth = raw.pop("outcome").to_numpy(dtype=object)
    assert raw.isna().to_numpy().any() and raw["patient_id"].dtype != float  # messy as written
    return raw, truth


def _check_raw_predictions(student, files, reported_accuracy: float) -> None:
    """The released student on raw rows: one class name per row, and the run's own accuracy
    on the evaluation rows (one row's difference at most: float32 rounding)."""
    raw, truth = _raw_evaluation_rows(files)
    predicted = MESSY.predicted_names(student.predict(raw), tuple(CLASSES))
    assert predicted.shape == (len(raw),) and set(predicted) <= set(CLASSES)
    assert abs(float(np.mean(predicted == truth)) - reported_accuracy) <= 1 / len(raw) + 1e-9


def test_the_scenario_is_the_issues(hospital):
    table, files, _ = hospital
    assert [len(table.private), len(table.public), len(table.evaluation)] == [1_200, 500, 300]
    assert "outcome" not in table.public.columns  # the public file is unlabelled
    text = files["private"].read_text()
    assert ",NA," in text and ",," in text  # gaps both ways, as exports write them


def test_from_dataframes_the_student_predicts_raw_rows(hospital, from_frames):
    _, files, _ = hospital
    assert from_frames.epsilon <= TARGET_EPS + 1e-9
    assert np.asarray(from_frames.answered_mask).sum() > 0
    _check_raw_predictions(from_frames.student, files, from_frames.utility["student_accuracy"])


def test_from_csv_files_the_same(hospital, from_csv):
    _, files, _ = hospital
    assert from_csv.epsilon <= TARGET_EPS + 1e-9
    _check_raw_predictions(from_csv.student, files, from_csv.utility["student_accuracy"])


def test_pate_run_from_a_config_naming_the_files(hospital, from_cli):
    from pate.student.raw_rows import RawRowStudent  # the released student of a run directory

    _, files, _ = hospital
    report = json.loads((from_cli / rundir.REPORT_JSON).read_text())
    assert float(report["privacy"]["eps_guarantee"]) <= TARGET_EPS + 1e-9
    # the report names the public-fitted encoding, that the guarantee covers people, and that
    # the ledger knows the records by their people
    assert (
        report["utility"]["preprocessing"] and report["privacy"]["neighbouring_relation"] == "unit"
    )
    text = (from_cli / rundir.REPORT_MD).read_text()
    assert "fitted on the public rows only" in text and "their people's ids" in text
    internal = json.loads((from_cli / rundir.REPORT_INTERNAL_JSON).read_text())
    student = RawRowStudent.load(from_cli)
    _check_raw_predictions(student, files, float(internal["utility"]["student_accuracy"]))


def test_the_same_patients_are_one_dataset_of_the_ledger(hospital, from_cli):
    """DataFrames, CSV files and ``pate run`` on the same patients: one dataset, three runs."""
    _, _, folder = hospital
    ledger = Ledger(folder / "ledger.sqlite3")
    try:
        datasets = ledger.datasets()
        assert len(datasets) == 1, datasets
        runs = {event.run_id for event in ledger.events(datasets[0]["digest"])}
    finally:
        ledger.close()
    assert len(runs) == 3
