"""The student's training length: "auto" (epochs unset) trains at least MIN_STUDENT_STEPS
optimiser steps, whatever the number of public or labelled items; a too-short student set by
hand is warned about (issue #31: digits' automatic student trained 20 epochs x 2 steps)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from pate.run import rundir
from pate.student.settings import MIN_STUDENT_STEPS, auto_epochs, short_training_warning
from pate.student.train import Student, train_student


def test_auto_epochs_reach_the_minimum_number_of_steps():
    assert auto_epochs(2) == MIN_STUDENT_STEPS // 2
    assert auto_epochs(1) == MIN_STUDENT_STEPS
    assert auto_epochs(500) == 20  # never fewer than the former default
    for steps in (1, 2, 3, 7, 30, 49, 51, 1000):
        assert auto_epochs(steps) * steps >= MIN_STUDENT_STEPS or auto_epochs(steps) == 20
    assert Student().epochs is None  # "auto" is the default


def test_the_auto_student_trains_enough_steps_on_a_small_public_set(digits, first_k_labels):
    # digits as a table: 597 public items, FixMatch draws 64 x 7 unlabelled items per step: 2 steps
    # per epoch, 40 steps in the former 20 epochs
    x = digits.public.x.reshape(len(digits.public), -1)
    student = train_student(
        x,
        first_k_labels(digits.public.y, 300),
        method="supervised",
        random_state=0,
        progress=False,
        device="cpu",
    )
    s = student.settings_
    assert s["epochs"] * s["steps_per_epoch"] >= MIN_STUDENT_STEPS
    assert len(student.history_) == s["epochs"]
    ex = digits.evaluation.x.reshape(len(digits.evaluation), -1)
    assert student.score(ex, digits.evaluation.y) > 0.8


def test_a_too_short_student_is_warned_about(digits, first_k_labels, caplog):
    labels = first_k_labels(digits.public.y, 300)
    with caplog.at_level(logging.WARNING, logger="pate.student"):
        short = train_student(
            digits.public.x,
            labels,
            method="supervised",
            epochs=1,
            random_state=0,
            progress=False,
            device="cpu",
        )
    s = short.settings_
    assert s["epochs"] * s["steps_per_epoch"] < MIN_STUDENT_STEPS
    assert short_training_warning(s["epochs"], s["steps_per_epoch"]) in caplog.text
    assert "Leave epochs unset" in caplog.text and "student_params" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pate.student"):
        train_student(
            digits.public.x,
            labels,
            method="supervised",
            epochs=1,
            steps_per_epoch=MIN_STUDENT_STEPS,
            random_state=0,
            progress=False,
            device="cpu",
            batch_size=8,
        )
    assert "optimiser steps" not in caplog.text


def test_epochs_none_is_refused_nowhere_and_zero_still_is():
    with pytest.raises(ValueError, match="epochs"):
        Student(epochs=0).fit(
            np.random.default_rng(0).random((10, 3)).astype(np.float32), np.array([0, 1] * 5)
        )


def test_pate_fit_names_a_too_short_student_and_a_raw_teacher_on_unscaled_inputs(tmp_path):
    """Two planted causes in one run: a student of 5 steps and a raw LogisticRegression teacher
    on features whose public scales differ by 1e5; both are in PateResult.warnings, the report's
    first section and analysis.json, with what to change."""
    import json

    from sklearn.datasets import make_classification
    from sklearn.linear_model import LogisticRegression

    import pate

    x, y = make_classification(
        n_samples=900, n_features=8, n_informative=5, n_redundant=0, n_classes=3, random_state=5
    )
    x = (x * np.logspace(-2, 3, 8)).astype(np.float32)
    result = pate.fit(
        (x[:500], y[:500]),
        x[500:800],
        evaluation=(x[800:], y[800:]),
        records=500,
        classes=["a", "b", "c"],
        teacher=LogisticRegression(max_iter=200),
        num_teachers=5,
        mechanism="gnmax",
        target_eps=200.0,
        queries=100,
        ledger=False,
        run_dir=tmp_path / "run",
        student_params={"epochs": 1, "steps_per_epoch": 5, "method": "supervised"},
    )
    text = " ".join(result.warnings)
    assert "The student trained only 5 optimiser steps" in text and "student_params" in text
    assert "LogisticRegression gets the tabular inputs unscaled" in text
    assert "make_pipeline(StandardScaler()" in text
    assert result.utility["student_steps"] == 5
    analysis = json.loads((result.run_dir / rundir.ANALYSIS).read_text())
    assert (
        analysis["utility"]["warnings"] == result.warnings[: len(analysis["utility"]["warnings"])]
    )
    md = (result.run_dir / "report.md").read_text()
    assert md.index("trained only 5 optimiser steps") < md.index("## Privacy statement")
