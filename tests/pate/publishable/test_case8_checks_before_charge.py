"""Issue #48, case 8: everything that can fail after the charge is checked before it.

A class-means run whose ``[student] model`` only looks right (``"sklearn:..."``: the student is a
torch network or an estimator given from Python) used to draw and charge its release, then die
with "unknown model"; its resume repeated the error and refused the corrected config. Now it is
refused before any stage runs -- through ``pate run``, a stage command and ``pate.fit`` --,
naming the key and the value, with nothing written and no ledger event; a run whose release was
charged resumes with a corrected ``[student]`` table.
"""

from __future__ import annotations

import json
import pathlib

import pytest

import pate
from pate.cli import main
from pate.ledger import Ledger
from pate.run import rundir
from pate.run.config import build, load
from pate.run.pipeline import Pipeline
from pate.teachers.errors import ConfigError

BAD_STUDENT = "sklearn:sklearn.linear_model.LogisticRegression"
CONFIDENT = 'mechanism = "confident-gnmax"\nthreshold = 7.0\nsigma1 = 2.0\nsigma2 = 2.0'
PARTITION = (
    '[partition]\nnum_teachers = 10            # 100 private images per teacher\nmode = "random"\n'
)


def class_means(small_digits, folder, *, student_model=None) -> pathlib.Path:
    """configs/digits.toml with the class-means mechanism (no teachers) and, when given, the
    student's model."""
    replace = [(PARTITION, ""), (CONFIDENT, 'mechanism = "class-means"\nsigma = 3.0')]
    if student_model is not None:
        replace.append(
            (
                '[student]\nmethod = "fixmatch"',
                f'[student]\nmodel = "{student_model}"\nmethod = "fixmatch"',
            )
        )
    return small_digits(
        folder, replace=replace, extra='\n[knn]\nfeatures = "none"\ndims = 16\n', name="cm.toml"
    )


def events(ledger: pathlib.Path) -> list:
    """Every event the ledger holds (none when it was never created)."""
    if not ledger.exists():
        return []
    with Ledger(ledger) as book:
        return [e for d in book.datasets() for e in book.events(d["digest"])]


def test_pate_run_refuses_an_unbuildable_student_before_the_charge(tmp_path, small_digits, capsys):
    config = class_means(small_digits, tmp_path, student_model=BAD_STUDENT)
    run_dir, ledger = tmp_path / "run", tmp_path / "ledger.sqlite3"
    code = main(
        [
            "run",
            "--config",
            str(config),
            "--run-dir",
            str(run_dir),
            "--ledger",
            str(ledger),
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert f'[student] model = "{BAD_STUDENT}"' in err and "unknown model" in err
    assert "before anything was written, drawn or charged" in err
    assert events(ledger) == []
    assert not (run_dir / rundir.STATE).exists()  # nothing half-written: no run was started


def test_a_stage_command_refuses_it_before_the_release(tmp_path, small_digits, capsys):
    config = class_means(small_digits, tmp_path, student_model=BAD_STUDENT)
    run_dir, ledger = tmp_path / "run", tmp_path / "ledger.sqlite3"
    common = ["--run-dir", str(run_dir), "--ledger", str(ledger), "--no-progress"]
    assert main(["partition", "--config", str(config), *common]) == 2
    assert "unknown model" in capsys.readouterr().err
    assert events(ledger) == [] and not (run_dir / rundir.STATE).exists()


def test_pate_fit_refuses_it_before_the_charge(tmp_path):
    ledger = tmp_path / "ledger.sqlite3"
    with pytest.raises(ConfigError) as caught:
        pate.fit(
            "digits",
            mechanism="class-means",
            sigma=3.0,
            knn={"features": "none", "dims": 16},
            budget_eps=1000.0,
            student=BAD_STUDENT,
            ledger=str(ledger),
            run_dir=tmp_path / "run",
        )
    assert f"student='{BAD_STUDENT}'" in str(caught.value)
    assert "unknown model" in str(caught.value)
    assert events(ledger) == []
    assert not (tmp_path / "run" / rundir.STATE).exists()


def test_a_charged_run_resumes_with_a_corrected_student(tmp_path, small_digits):
    """The release is charged (the run stopped after the aggregate stage); the student's settings
    change on resume (allowed until the student trained), are checked, saved, and used."""
    config_path = class_means(small_digits, tmp_path)
    run_dir, ledger = tmp_path / "run", tmp_path / "ledger.sqlite3"
    first = load(config_path, run_dir=str(run_dir), ledger=str(ledger))
    Pipeline(first).run(until="aggregate")
    first = first.to_dict()
    charged = events(ledger)
    assert len(charged) == 1

    bad = dict(first, student=dict(first["student"], model=BAD_STUDENT))
    bad = build(bad, run_dir=str(run_dir), ledger=str(ledger))
    with pytest.raises(ConfigError, match="unknown model"):
        Pipeline(bad, resume=True).run()
    assert not (run_dir / rundir.STUDENT_WEIGHTS).exists()

    fixed = build(
        dict(first, student=dict(first["student"], model="mlp")),
        run_dir=str(run_dir),
        ledger=str(ledger),
    )
    Pipeline(fixed, resume=True).run()
    assert json.loads((run_dir / rundir.CONFIG).read_text())["student"]["model"] == "mlp"
    assert json.loads((run_dir / rundir.STUDENT_METRICS).read_text())["model"] == "mlp"
    assert len(events(ledger)) == len(charged)  # charged once, never again

    # once the student trained, its settings are fixed like every other
    other = build(
        dict(first, student=dict(first["student"], model="linear")),
        run_dir=str(run_dir),
        ledger=str(ledger),
    )
    with pytest.raises(ConfigError, match=r"\[student\] model"):
        Pipeline(other, resume=True)


def test_an_unwritable_run_folder_is_refused_before_the_ledger(tmp_path, small_digits):
    """A file where the run directory's parent folder would go: refused by the preflight,
    naming the flag and the path, before the ledger registers the records or charges anything."""
    config = class_means(small_digits, tmp_path)
    (tmp_path / "in-the-way").write_text("a file")
    run_dir, ledger = tmp_path / "in-the-way" / "run", tmp_path / "ledger.sqlite3"
    with pytest.raises(pate.PateError, match=r"--run-dir .*in-the-way/run: .* is not a directory"):
        Pipeline(load(config, run_dir=str(run_dir), ledger=str(ledger))).run()
    assert not ledger.exists() or Ledger(ledger).datasets() == []
