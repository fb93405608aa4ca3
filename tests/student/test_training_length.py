"""The student's training length: "auto" (epochs unset) trains at least MIN_STUDENT_STEPS
optimiser steps, whatever the number of public or labelled items; a too-short student set by
hand is warned about (issue #31: digits' automatic student trained 20 epochs x 2 steps)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from pate.student.train import (MIN_STUDENT_STEPS, Student, auto_epochs, short_training_warning,
                                train_student)


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
    student = train_student(x, first_k_labels(digits.public.y, 300), method="supervised",
                            random_state=0, progress=False, device="cpu")
    s = student.settings_
    assert s["epochs"] * s["steps_per_epoch"] >= MIN_STUDENT_STEPS
    assert len(student.history_) == s["epochs"]
    ex = digits.evaluation.x.reshape(len(digits.evaluation), -1)
    assert student.score(ex, digits.evaluation.y) > 0.8


def test_a_too_short_student_is_warned_about(digits, first_k_labels, caplog):
    labels = first_k_labels(digits.public.y, 300)
    with caplog.at_level(logging.WARNING, logger="pate.student"):
        short = train_student(digits.public.x, labels, method="supervised", epochs=1,
                              random_state=0, progress=False, device="cpu")
    s = short.settings_
    assert s["epochs"] * s["steps_per_epoch"] < MIN_STUDENT_STEPS
    assert short_training_warning(s["epochs"], s["steps_per_epoch"]) in caplog.text
    assert "Leave epochs unset" in caplog.text and "student_params" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pate.student"):
        train_student(digits.public.x, labels, method="supervised", epochs=1,
                      steps_per_epoch=MIN_STUDENT_STEPS, random_state=0, progress=False,
                      device="cpu", batch_size=8)
    assert "optimiser steps" not in caplog.text


def test_epochs_none_is_refused_nowhere_and_zero_still_is():
    with pytest.raises(ValueError, match="epochs"):
        Student(epochs=0).fit(np.random.default_rng(0).random((10, 3)).astype(np.float32),
                              np.array([0, 1] * 5))
