"""Warnings that are right (issue #51): each names a cause true for the run and advice that would
help -- the student's training length only when its given epochs were short, the labels when
they are the problem, no optimiser-step warning for a smoke test, no scale warning for trees."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from pate.run.utility_warnings import split_utility_warnings, utility_warnings
from pate.teachers.scaling import handles_scale, scale_warning

HEALTHY = {
    "student_accuracy": 0.88,
    "plurality_vote_accuracy": 0.93,
    "label_accuracy_answered": 0.9,
    "answered_plurality_agreement": 0.95,
    "majority_class_rate": 0.12,
    "student_steps": 4000,
    "scale_warnings": [],
}


def warned(**change) -> str:
    return " ".join(utility_warnings({**HEALTHY, **change}, num_classes=10, answered=320))


def test_train_longer_is_advised_only_when_the_given_epochs_were_short():
    assert "Train it longer: its epochs give 120 optimiser steps" in warned(
        student_accuracy=0.15, student_steps=120
    )
    # a smoke test trains short on purpose: the student below its labels is still said, the
    # advice to train longer is not (a fresh-clone run's smoke test drew it under load)
    smoke = " ".join(
        utility_warnings(
            {**HEALTHY, "student_accuracy": 0.6, "label_accuracy_answered": 0.98,
             "student_steps": 120},
            num_classes=10, answered=320, smoke_test=True,
        )
    )  # fmt: skip
    assert "far below the accuracy of its own labels" in smoke
    assert "optimiser steps" not in smoke and "short on purpose" in smoke
    unset = warned(student_accuracy=0.15)  # auto epochs: at least 1000 steps
    assert "near chance" in unset and "longer" not in unset and "epochs" not in unset
    assert "longer" not in warned(student_accuracy=0.3, label_accuracy_answered=0.53)


def test_labels_near_chance_are_named_as_the_problem_not_the_student():
    """Issue #51: every label one class (33 % right on 3 classes), class-means (no votes)."""
    u = {
        "student_accuracy": 0.34,
        "label_accuracy_answered": 0.333,
        "majority_class_rate": 0.34,
        "student_steps": 3000,
    }
    text = " ".join(utility_warnings(u, num_classes=3, answered=3000))
    assert "Its labels are near chance too (33.3 %)" in text and "larger target epsilon" in text
    assert "longer" not in text and "epochs" not in text
    unknown = dict(u, label_accuracy_answered=None)  # public labels unknown: not claimed better
    text = " ".join(utility_warnings(unknown, num_classes=3, answered=3000))
    assert "could not be checked" in text and "Its labels are better" not in text
    assert "longer" not in text


def test_a_smoke_test_is_not_warned_about_its_own_optimiser_steps():
    short = dict(HEALTHY, student_steps=120)
    assert "120 optimiser steps" in " ".join(utility_warnings(short, num_classes=10, answered=320))
    assert utility_warnings(short, num_classes=10, answered=320, smoke_test=True) == []
    public, internal = split_utility_warnings(short, num_classes=10, answered=320, smoke_test=True)
    assert public == internal == []


@pytest.mark.parametrize(
    "build",
    [
        lambda sk: sk["HistGradientBoostingClassifier"](),
        lambda sk: sk["make_pipeline"](sk["HistGradientBoostingClassifier"]()),
        lambda sk: sk["make_pipeline"]("passthrough", sk["RandomForestClassifier"]()),
        lambda sk: sk["BaggingClassifier"](sk["RandomForestClassifier"]()),
        lambda sk: sk["make_pipeline"](sk["StandardScaler"](), sk["LogisticRegression"]()),
    ],
)
def test_no_scale_warning_for_trees_or_a_pipeline_that_scales(build):
    sk = _sklearn()
    public = np.random.default_rng(0).normal(size=(50, 3)) * np.array([1e-3, 1.0, 1e3])
    model = build(sk)
    assert handles_scale(model)
    assert scale_warning(public, model, role="student") is None


def test_a_scale_sensitive_model_is_still_warned_even_beside_a_tree():
    sk = _sklearn()
    public = np.random.default_rng(0).normal(size=(50, 3)) * np.array([1e-3, 1.0, 1e3])
    for model in (
        sk["make_pipeline"](sk["LogisticRegression"]()),
        sk["make_pipeline"](sk["PCA"](), sk["RandomForestClassifier"]()),
    ):
        assert not handles_scale(model)
        assert "unscaled" in scale_warning(public, model, role="teacher")


def _sklearn() -> dict:
    from sklearn.decomposition import PCA
    from sklearn.ensemble import (
        BaggingClassifier,
        HistGradientBoostingClassifier,
        RandomForestClassifier,
    )
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return {
        "PCA": PCA,
        "BaggingClassifier": BaggingClassifier,
        "HistGradientBoostingClassifier": HistGradientBoostingClassifier,
        "RandomForestClassifier": RandomForestClassifier,
        "LogisticRegression": LogisticRegression,
        "make_pipeline": make_pipeline,
        "StandardScaler": StandardScaler,
    }


@pytest.mark.parametrize(
    "fallback, warns",
    [
        ("[privacy] release = false: only the data-independent epsilon is reported", False),
        ("conditions C5/C6 do not hold at this order and sigma2", True),
    ],
)
def test_the_sanitized_fallback_is_warned_only_when_a_release_was_asked_for(fallback, warns):
    """Issue #51: every teacher run from pate.fit warned that the sanitized epsilon fell back
    because [privacy] release = false -- its default."""
    from pate.run.report.report_warnings import report_warnings

    privacy = {
        "mechanism": "gnmax",
        "orders": [2.0, 8.0, 32.0],
        "order_data_independent": 8.0,
        "eps_guarantee": 2.0,
        "eps_data_independent": 2.0,
        "sanitized": {"fallback": fallback},
        "delta": 1e-5,
        "num_teachers": 50,
        "budget": {"basis": "data-independent", "stop_reason": None},
    }
    a = {"run": {}, "privacy": privacy, "utility": {}, "queries": {"answered": 100}}
    text = " ".join(report_warnings(a))
    assert ("fell back to the data-independent one" in text) is warns


@pytest.mark.parametrize("smoke_test", [True, False])
def test_the_shipped_smoke_test_does_not_warn_about_its_own_short_student(
    smoke_test, tmp_path, caplog
):
    """configs/digits.toml is a smoke test: its student is short on purpose, so neither its
    training nor its report warns about the optimiser steps; the same run declared a real one
    is told (the warning is still there where it is true)."""
    import json
    import logging

    from pate.cli import main
    from pate.run import rundir
    from pate.run.config import CONFIGS_FOLDER

    text = (pathlib.Path(CONFIGS_FOLDER) / "digits.toml").read_text()  # as shipped: seconds
    config = tmp_path / "digits.toml"
    config.write_text(
        text if smoke_test else text.replace("smoke_test = true", "smoke_test = false")
    )
    with caplog.at_level(logging.WARNING, logger="pate"):
        assert main(["run", "--config", str(config), "--run-dir", str(tmp_path / "run")]) == 0
    logged = [r.getMessage() for r in caplog.records if "optimiser steps" in r.getMessage()]
    report = json.loads((tmp_path / "run" / rundir.REPORT_JSON).read_text())
    in_report = [w for w in report["warnings"] if "optimiser steps" in w]
    assert (not logged and not in_report) if smoke_test else (logged and in_report)


def test_few_labels_advice_names_only_levers_the_mechanism_has():
    from pate import mechanisms
    from pate.run.utility_warnings import more_labels_advice

    def advice(name: str) -> str:
        return " ".join(
            utility_warnings(
                HEALTHY,
                num_classes=10,
                answered=40,
                more_labels=more_labels_advice(mechanisms.get(name)),
            )
        )

    assert "lower threshold" in advice("confident-gnmax")
    assert "lower threshold" not in advice("gnmax") and "less noise" in advice("gnmax")
    assert "more public items" in advice("class-means") and "budget" not in advice("class-means")


def test_the_internal_reference_is_the_better_of_logistic_and_boosting_on_a_small_table():
    """pate.run.stages.report.reference_accuracy: on a small table whose classes are not linear
    in the columns (XOR of two signs) gradient boosting is the reference, far above the
    logistic regression; on images (not a table) only the logistic regression is trained."""
    from types import SimpleNamespace

    from pate.run.stages.report import reference_accuracy

    rng = np.random.default_rng(0)

    def split(n, shape=(4,)):
        x = rng.normal(size=(n, *shape))
        flat = x.reshape(n, -1)
        return SimpleNamespace(x=x, y=((flat[:, 0] > 0) ^ (flat[:, 1] > 0)).astype(np.int64))

    table = SimpleNamespace(data=SimpleNamespace(private=split(2000), evaluation=split(500)))
    accuracy, model = reference_accuracy(table)
    assert model == "gradient boosting" and accuracy > 0.9
    images = SimpleNamespace(
        data=SimpleNamespace(private=split(600, (1, 4, 4)), evaluation=split(200, (1, 4, 4)))
    )
    accuracy, model = reference_accuracy(images)
    assert model == "logistic regression" and accuracy < 0.7
