"""pate.fit: the Python facade runs the same stages, ledger and report as `pate run`."""

from __future__ import annotations

import json

import numpy as np
import pytest

import pate
from pate.ledger import Ledger, dataset_identity
from pate.run import rundir

#: The digits' label set, declared (the public inputs below are unlabelled).
DIGITS_CLASSES = [str(i) for i in range(10)]


def flat(split):
    return split.x.reshape(len(split.x), -1)


@pytest.fixture(scope="module")
def sklearn_run(tmp_path_factory, digits):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    tmp = tmp_path_factory.mktemp("api")
    result = pate.fit(
        (flat(digits.private), digits.private.y),
        flat(digits.public),
        evaluation=(flat(digits.evaluation), digits.evaluation.y),
        records=1000,
        classes=DIGITS_CLASSES,
        teacher=make_pipeline(StandardScaler(), LogisticRegression(max_iter=300)),
        student=LogisticRegression(max_iter=500),
        num_teachers=10,
        mechanism="gnmax",
        target_eps=20.0,
        queries=120,
        ledger=tmp / "ledger.sqlite3",
        run_dir=tmp / "run",
    )
    return tmp, result


def test_sklearn_pipeline_teachers_and_student_on_tabular_data(sklearn_run, digits):
    tmp, result = sklearn_run
    assert result.labels.shape == (597,) and int(result.answered_mask.sum()) == 120
    assert np.all(result.labels[result.answered_mask] >= 0) and np.all(result.labels[120:] == -1)
    assert result.label_scores is None  # GNMax releases a noisy argmax only
    assert result.student.score(flat(digits.evaluation), digits.evaluation.y) > 0.5
    for name in ("config.json", rundir.ANALYSIS, "report.md", "report.html", rundir.AGGREGATE):
        assert (result.run_dir / name).is_file(), name
    assert not list(result.run_dir.rglob("*.pkl"))  # no pickles, not even of the student
    config = json.loads((result.run_dir / "config.json").read_text())
    assert config["teachers"]["model"].startswith("python:") and config["data"]["name"].startswith(
        "memory:"
    )


def test_a_target_epsilon_is_met_within_five_percent(sklearn_run):
    _, result = sklearn_run
    assert 0.95 * 20.0 <= result.epsilon <= 20.0
    assert result.privacy["calibration"]["parameters"] == ["sigma"]


def test_the_ledger_is_charged_like_pate_run(sklearn_run, digits):
    tmp, result = sklearn_run
    digest = dataset_identity(flat(digits.private), digits.private.y).digest
    with Ledger(tmp / "ledger.sqlite3") as ledger:
        summary = ledger.summary(digest)
        events = ledger.events(digest)
    assert summary["budget"]["eps"] == 20.0  # budget_eps defaults to target_eps
    assert summary["spent"] == pytest.approx(result.epsilon, rel=1e-9)
    assert sum(e.event.answered for e in events) == int(result.answered_mask.sum())


def test_resume_needs_the_same_data(sklearn_run, digits):
    from pate.teachers.errors import ConfigError

    tmp, result = sklearn_run
    x = flat(digits.private).copy()
    x[0, 0] += 1.0
    with pytest.raises(ConfigError, match="differs"):
        pate.fit(
            (x, digits.private.y),
            flat(digits.public),
            evaluation=(flat(digits.evaluation), digits.evaluation.y),
            records=1000,
            classes=DIGITS_CLASSES,
            teacher="mlp",
            num_teachers=10,
            mechanism="gnmax",
            target_eps=20.0,
            queries=120,
            ledger=tmp / "ledger.sqlite3",
            run_dir=result.run_dir,
            resume=True,
        )


def test_resume_errors_speak_pate_fit_s_keywords(sklearn_run, digits):
    """A run directory reused from Python is refused in keyword arguments (resume=True,
    target_eps=), not in the CLI's flags and TOML keys."""
    from pate.teachers.errors import ConfigError

    tmp, result = sklearn_run
    args = ((flat(digits.private), digits.private.y), flat(digits.public))
    kwargs = dict(
        evaluation=(flat(digits.evaluation), digits.evaluation.y),
        records=1000,
        classes=DIGITS_CLASSES,
        teacher="mlp",
        num_teachers=10,
        mechanism="gnmax",
        queries=120,
        ledger=tmp / "ledger.sqlite3",
        run_dir=result.run_dir,
    )
    with pytest.raises(ConfigError, match="already holds a run; pass resume=True") as caught:
        pate.fit(*args, target_eps=20.0, **kwargs)
    assert "--resume" not in str(caught.value) and "[run]" not in str(caught.value)
    with pytest.raises(ConfigError, match=r"resume=True: target_eps= \(started with 20") as caught:
        pate.fit(*args, target_eps=10.0, resume=True, **kwargs)
    assert "call again with the arguments it was started with" in str(caught.value)
    assert "[aggregator]" not in str(caught.value)


def test_a_reshaped_copy_of_the_private_records_has_no_fresh_budget(sklearn_run, digits):
    """Issue #30, break 4: the same digits as (N, 1, 8, 8) or as float64 with int32 labels -- the
    run above used (N, 64) float32 -- are the same records, so the exhausted budget binds them."""
    from sklearn.linear_model import LogisticRegression

    from pate.core.errors import BudgetExceededError

    tmp, result = sklearn_run
    x4 = digits.private.x.reshape(len(digits.private.x), 1, 8, 8).astype(np.float64)
    assert (
        dataset_identity(x4, digits.private.y.astype(np.int32)).digest
        == dataset_identity(flat(digits.private), digits.private.y).digest
    )
    with pytest.raises(BudgetExceededError, match="no room"):
        pate.fit(
            (x4.reshape(len(x4), -1), digits.private.y.astype(np.int32)),
            flat(digits.public),
            evaluation=(flat(digits.evaluation), digits.evaluation.y),
            records=1000,
            classes=DIGITS_CLASSES,
            teacher=LogisticRegression(max_iter=300),
            student=LogisticRegression(),
            num_teachers=10,
            mechanism="gnmax",
            target_eps=20.0,
            queries=120,
            ledger=tmp / "ledger.sqlite3",
            run_dir=tmp / "reshaped",
        )
    with Ledger(tmp / "ledger.sqlite3") as ledger:
        assert len(ledger.datasets()) == 1  # one identity, one budget


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"evaluation": None}, TypeError, "evaluation="),
        ({"public": None}, TypeError, "public="),
        ({"target_eps": None}, TypeError, "target_eps"),
        ({"teacher": 3}, TypeError, "teacher must be"),
    ],
)
def test_bad_arguments_are_clear_errors_before_any_work(tmp_path, digits, kwargs, error, message):
    args = dict(
        public=flat(digits.public),
        evaluation=(flat(digits.evaluation), digits.evaluation.y),
        records=1000,
        classes=DIGITS_CLASSES,
        teacher="mlp",
        num_teachers=5,
        target_eps=5.0,
        run_dir=tmp_path / "run",
        ledger=tmp_path / "ledger.sqlite3",
    )
    args.update(kwargs)
    with pytest.raises(error, match=message):
        pate.fit((flat(digits.private), digits.private.y), **args)
    assert not (tmp_path / "run").exists() and not (tmp_path / "ledger.sqlite3").exists()


def _spoil(array, index, value):
    array = np.array(array, dtype=np.float64)
    array[index] = value
    return array


@pytest.mark.parametrize(
    "split, spoil, message",
    [
        (
            "private",
            lambda x, y: (_spoil(x, (5, 7), np.nan), y),
            "pate.fit private x: row 5, column 7 is nan",
        ),
        (
            "public",
            lambda x, y: (_spoil(x, (3, 0), np.inf), y),
            "pate.fit public x: row 3, column 0 is inf",
        ),
        (
            "evaluation",
            lambda x, y: (_spoil(x, (1, 63), -np.inf), y),
            "pate.fit evaluation x: row 1, column 63 is -inf",
        ),
        (
            "private",
            lambda x, y: (x, _spoil(y, 9, 2.5)),
            "pate.fit private y: row 9 is 2.5, not an integer",
        ),
        (
            "private",
            lambda x, y: (x, _spoil(y, 4, 10**7).astype(np.int64)),
            "pate.fit private y: row 4 has label 10000000, outside the declared 10 classes",
        ),
        (
            "public",
            lambda x, y: (x, _spoil(y, 2, -2).astype(np.int64)),
            "pate.fit public y: row 2 is -2, a negative",
        ),
    ],
)
def test_bad_records_are_refused_before_anything_is_written_or_charged(
    tmp_path, digits, split, spoil, message
):
    """Issue #30: NaN features were trained on and charged; a label of 10**7 sized the votes for
    10**7 + 1 classes; now refused, naming the split, row, column and value."""
    from pate.analysis.errors import InputError

    data = {
        name: (flat(getattr(digits, name)), getattr(digits, name).y)
        for name in ("private", "public", "evaluation")
    }
    data[split] = spoil(*data[split])
    with pytest.raises(InputError) as caught:
        pate.fit(
            data["private"],
            data["public"],
            evaluation=data["evaluation"],
            records=1000,
            teacher="mlp",
            num_teachers=5,
            target_eps=5.0,
            run_dir=tmp_path / "run",
            ledger=tmp_path / "ledger.sqlite3",
        )
    assert message in str(caught.value) and "nothing was trained, written or charged" in str(
        caught.value
    )
    assert not (tmp_path / "run").exists() and not (tmp_path / "ledger.sqlite3").exists()


def test_integer_valued_float_labels_are_class_indices(digits):
    from pate.run.memory_data import memory_data

    data, _ = memory_data(
        (flat(digits.private), digits.private.y.astype(np.float32)),
        flat(digits.public),
        (flat(digits.evaluation), digits.evaluation.y),
        DIGITS_CLASSES,
    )
    assert data.num_classes == 10 and data.private.y.dtype == np.int64
    np.testing.assert_array_equal(data.private.y, digits.private.y)


def test_import_pate_stays_torch_free():
    import subprocess
    import sys

    code = "import sys, pate; pate.__version__; sys.exit(1 if 'torch' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_custom_torch_modules_and_torch_datasets(tmp_path, digits):
    torch = pytest.importorskip("torch")
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    def net(input_shape, num_classes):  # defined here: no import path, no PYTHONPATH
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, num_classes))

    private = DataLoader(
        TensorDataset(torch.as_tensor(digits.private.x), torch.as_tensor(digits.private.y)),
        batch_size=100,
    )
    result = pate.fit(
        private,
        digits.public.x,
        evaluation=(digits.evaluation.x, digits.evaluation.y),
        records=1000,
        classes=DIGITS_CLASSES,
        teacher=net,
        student=net,
        num_teachers=5,
        threshold=3.0,
        sigma1=1.0,
        sigma2=1.0,
        budget_eps=500.0,
        queries=100,
        noise_seed=1,
        ledger=False,
        run_dir=tmp_path / "run",
        teacher_params={"epochs": 5, "lr": 1e-2},
        student_params={"epochs": 1, "steps_per_epoch": 10, "method": "supervised"},
    )
    assert 0 < int(result.answered_mask.sum()) <= 100
    assert result.student.predict(digits.evaluation.x).shape == (200,)
    assert np.array_equal(
        result.predict(digits.evaluation.x), result.student.predict(digits.evaluation.x)
    )
    assert not result.privacy["ledger_enforced"] and result.privacy["noise_seeded"]
    from pate.student.train import Student

    with pytest.raises(ValueError, match="Python factory"):
        Student.load(result.run_dir / "student.pt")
    loaded = Student.load(result.run_dir / "student.pt", model=net)
    np.testing.assert_array_equal(
        loaded.predict(digits.evaluation.x), result.student.predict(digits.evaluation.x)
    )


def test_evaluation_arrays_are_internal_unless_declared_public(digits):
    """pate.fit's evaluation arrays are the user's data: the student's figures on them are
    internal unless evaluation_public=True declares them public (issue #48)."""
    from pate.run.memory_data import data_source

    args = ((flat(digits.private), digits.private.y), flat(digits.public))
    evaluation = (flat(digits.evaluation), digits.evaluation.y)
    declared = {"classes": DIGITS_CLASSES, "split_column": None, "evaluation_public": None}
    data, _, _ = data_source(*args, evaluation, declared)
    assert not data.evaluation_public
    data, _, table = data_source(*args, evaluation, dict(declared, evaluation_public=True))
    assert data.evaluation_public and table["evaluation_public"] is True
    with pytest.raises(TypeError, match="split_column= applies to a source that is one pool"):
        data_source(*args, evaluation, dict(declared, split_column="split"))


def test_knn_settings_with_the_automatic_mechanism_and_no_teachers(tmp_path, digits):
    """knn= with mechanism "auto", a target and no teachers asked for: the planner's choice
    without teachers reads the records, so the settings apply (the plan uses them); with
    teachers asked for they are refused before any work, naming why."""
    args = dict(
        evaluation=(flat(digits.evaluation), digits.evaluation.y),
        records=1000,
        classes=DIGITS_CLASSES,
        target_eps=2.0,
        ledger=False,
        knn={"features": "none", "dims": 12, "rule": "lda"},
    )
    plan = pate.plan((flat(digits.private), digits.private.y), flat(digits.public), **args)
    assert plan.mechanism == "class-means"
    assert not {"features", "dims", "rule"} & set(plan.filled)  # the user's, not the planner's
    with pytest.raises(TypeError, match="not 'auto' with teachers"):
        pate.fit(
            (flat(digits.private), digits.private.y),
            flat(digits.public),
            num_teachers=10,
            run_dir=tmp_path / "run",
            **args,
        )
    assert not (tmp_path / "run").exists()
