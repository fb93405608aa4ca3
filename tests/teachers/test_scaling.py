"""Tabular inputs: zoo teachers standardised with PUBLIC statistics only, a warning for a user's raw
model on wildly scaled inputs, training length from the shard size, and a ``module:factory``
that returns a scikit-learn Pipeline."""

from __future__ import annotations

import dataclasses
import logging
import sys

import numpy as np
import pytest

from pate.teachers.data import ArraySplit, PateData
from pate.teachers.ensemble import train_teachers
from pate.teachers.recipe import AUTO_EPOCHS_RANGE, MIN_TEACHER_STEPS, TeacherConfig, auto_epochs
from pate.teachers.scaling import (
    SCALE_RATIO_LIMIT,
    PublicScaler,
    handles_scale,
    public_scale_ratio,
    scale_warning,
    standardized_data,
)

SCALES = np.logspace(-2, 3, 12).astype(np.float32)  # 0.01 .. 1000, a ratio of 1e5


def _table(n: int = 1200, *, seed: int = 3, scales=SCALES) -> PateData:
    from sklearn.datasets import make_classification

    x, y = make_classification(
        n_samples=n,
        n_features=len(scales),
        n_informative=6,
        n_redundant=0,
        n_classes=3,
        random_state=seed,
    )
    x = (x * scales).astype(np.float32)
    a, b = int(0.6 * n), int(0.85 * n)
    return PateData(
        name="table",
        private=ArraySplit(x[:a], y[:a]),
        public=ArraySplit(x[a:b], y[a:b]),
        evaluation=ArraySplit(x[b:], y[b:]),
        num_classes=3,
        input_shape=(len(scales),),
    )


def test_the_scale_ratio_is_the_spread_of_public_standard_deviations():
    data = _table()
    ratio = public_scale_ratio(data.public.x)
    assert 1e4 < ratio < 1e6
    assert public_scale_ratio(data.public.x / SCALES) < 10  # the unscaled table
    assert public_scale_ratio(np.zeros((5, 3, 8, 8))) is None  # images: no check
    assert public_scale_ratio(np.ones((10, 4))) is None  # constant features are left out


def test_standardisation_uses_public_statistics_only():
    data = _table()
    scaler = PublicScaler.fit(data.public.x)
    out = standardized_data(data)
    np.testing.assert_allclose(out.public.x.mean(axis=0), 0, atol=1e-4)
    np.testing.assert_allclose(out.public.x.std(axis=0), 1, atol=1e-3)
    # the private records on another scale: the scaler (hence the public split) does not move
    other = dataclasses.replace(data, private=ArraySplit(data.private.x * 1000 + 7, data.private.y))
    again = standardized_data(other)
    np.testing.assert_array_equal(again.public.x, out.public.x)
    np.testing.assert_array_equal(again.evaluation.x, out.evaluation.x)
    np.testing.assert_allclose(
        again.private.x, scaler.transform(data.private.x * 1000 + 7), rtol=1e-5
    )
    assert not np.allclose(again.private.x, out.private.x)


def test_a_raw_user_model_on_wild_scales_gets_a_warning_that_says_what_to_do():
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    public = _table().public.x
    warning = scale_warning(public, LogisticRegression(), role="teacher")
    assert warning is not None and "LogisticRegression" in warning
    assert f"above {SCALE_RATIO_LIMIT:g}" in warning and "make_pipeline(StandardScaler()" in warning
    assert 'teacher="auto"' in warning
    assert scale_warning(public, lambda: None, role="teacher") is not None  # a torch factory
    assert scale_warning(public, "mymodule:factory", role="teacher") is not None
    assert scale_warning(public, "sklearn:sklearn.svm.SVC") is not None
    assert scale_warning(public, "sklearn:sklearn.ensemble.RandomForestClassifier") is None
    # models that handle scale, zoo models (standardised here), tame inputs, images: no warning
    pipe = make_pipeline(StandardScaler(), LogisticRegression())
    assert handles_scale(pipe) and handles_scale(RandomForestClassifier())
    assert not handles_scale(LogisticRegression())
    assert scale_warning(public, pipe) is None
    assert scale_warning(public, RandomForestClassifier()) is None
    assert scale_warning(public, "mlp") is None and scale_warning(public, "auto") is None
    assert scale_warning(public / SCALES, LogisticRegression()) is None
    assert (
        scale_warning(np.random.default_rng(0).random((20, 1, 8, 8)), LogisticRegression()) is None
    )
    assert 'student="auto"' in scale_warning(public, LogisticRegression(), role="student")


def test_resolved_standardises_zoo_models_on_tabular_inputs_only():
    data = _table()
    assert TeacherConfig().resolved(data).standardize == "public"  # auto -> mlp
    assert TeacherConfig(model="linear").resolved(data).standardize == "public"
    assert TeacherConfig(model="mlp", standardize="none").resolved(data).standardize == "none"
    assert TeacherConfig(model="mod:factory").resolved(data).standardize == "none"
    assert (
        TeacherConfig(model="sklearn:sklearn.linear_model.LogisticRegression")
        .resolved(data)
        .standardize
        == "none"
    )
    images = dataclasses.replace(data, input_shape=(1, 8, 8))
    assert TeacherConfig().resolved(images).standardize == "none"
    with pytest.raises(ValueError, match="standardize"):
        TeacherConfig(standardize="private")
    # raw inputs keep the fingerprint of runs made before the setting existed
    assert TeacherConfig(model="mod:factory").resolved(data).fingerprint()["standardize"] == "none"
    assert TeacherConfig().resolved(data).fingerprint()["standardize"] == "public"


def test_teacher_epochs_follow_the_shard_size():
    lo, hi = AUTO_EPOCHS_RANGE
    assert auto_epochs(None) == lo
    assert auto_epochs(20, batch_size=32) == hi  # 1 step per epoch: capped
    assert auto_epochs(320, batch_size=32) == lo  # 10 steps per epoch x 20 = MIN_TEACHER_STEPS
    assert auto_epochs(100, batch_size=32) == MIN_TEACHER_STEPS // 4  # 4 steps per epoch
    assert auto_epochs(100_000) == lo
    data = _table()
    assert TeacherConfig().resolved(data, shard_size=40).epochs == 100
    assert TeacherConfig(epochs=3).resolved(data, shard_size=40).epochs == 3  # set: kept


def _accuracy(data, standardize):
    shards = [np.arange(i, len(data.private), 3) for i in range(3)]
    config = TeacherConfig(model="mlp", epochs=15, standardize=standardize, device="cpu")
    return train_teachers(data, shards, [1, 2, 3], config, progress=False).teacher_accuracy.mean()


def test_standardised_mlp_teachers_beat_raw_ones_on_wildly_scaled_features(caplog):
    data = _table()
    chance = 1 / 3
    raw = _accuracy(data, "none")
    with caplog.at_level(logging.INFO, logger="pate.teachers.scaling"):
        scaled = _accuracy(data, "auto")
    assert "standardised with the public split" in caplog.text
    assert scaled > 0.6 and scaled > raw + 0.1 and raw < chance + 0.25, (raw, scaled)


def test_a_raw_teacher_model_is_warned_about_when_it_trains(caplog):
    from sklearn.linear_model import LogisticRegression

    data = _table(600)
    shards = [np.arange(i, len(data.private), 2) for i in range(2)]
    with caplog.at_level(logging.WARNING, logger="pate.teachers.ensemble"):
        train_teachers(
            data,
            shards,
            [1, 2],
            TeacherConfig(model=LogisticRegression(max_iter=50)),
            progress=False,
        )
    assert "gets the tabular inputs unscaled" in caplog.text


FACTORY_MODULE = """
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from torch import nn


def pipeline(input_shape, num_classes):
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=300))


def torch_net(input_shape, num_classes):
    return nn.Sequential(nn.Flatten(), nn.Linear(input_shape[0], num_classes))


def not_a_model():
    return 42
"""


@pytest.fixture
def factory_module(tmp_path, monkeypatch):
    (tmp_path / "my_pate_factories.py").write_text(FACTORY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_pate_factories"
    sys.modules.pop("my_pate_factories", None)


def test_a_module_factory_may_return_a_scikit_learn_pipeline(factory_module):
    import torch
    from sklearn.pipeline import Pipeline

    from pate.teachers.models import factory_estimator

    before = torch.random.get_rng_state()
    assert isinstance(
        factory_estimator(f"{factory_module}:pipeline", input_shape=(12,), num_classes=3), Pipeline
    )
    assert (
        factory_estimator(f"{factory_module}:torch_net", input_shape=(12,), num_classes=3) is None
    )
    assert torch.equal(torch.random.get_rng_state(), before)  # teachers' init unchanged
    with pytest.raises(TypeError, match="not_a_model.*int"):
        factory_estimator(f"{factory_module}:not_a_model", input_shape=(12,), num_classes=3)


def test_pate_fit_with_a_module_factory_pipeline_for_teachers_and_student(
    factory_module, digits, tmp_path
):
    import pate

    flat = [s.x.reshape(len(s.x), -1) for s in (digits.private, digits.public, digits.evaluation)]
    spec = f"{factory_module}:pipeline"
    result = pate.fit(
        (flat[0], digits.private.y),
        flat[1],
        evaluation=(flat[2], digits.evaluation.y),
        records=1000,
        classes=[str(i) for i in range(10)],
        teacher=spec,
        student=spec,
        num_teachers=5,
        mechanism="gnmax",
        target_eps=300.0,
        queries=150,
        ledger=False,
        run_dir=tmp_path / "run",
    )
    from sklearn.pipeline import Pipeline

    assert isinstance(result.student, Pipeline)
    assert result.student.predict(flat[2]).shape == (200,)
    assert not list(result.run_dir.rglob("*.pkl"))
    u = result.utility
    assert u["teacher_mean_accuracy"] > 0.8 and u["plurality_vote_accuracy"] > 0.9
    assert u["answered_labels"] == 150 and u["student_steps"] is None  # an estimator
    assert u["scale_warnings"] == []  # the Pipeline scales its inputs
    # five teachers at a large target (the planner refuses 20: that noise would drown the five
    # votes, tests/pate/run/test_planner.py): the answers follow the plurality vote, no warning
    assert u["answered_plurality_agreement"] > 0.9
    assert not any("near chance" in w for w in result.warnings)
