"""benchmarks/utility_methods.py: the class-means rule-alone run and a held-out PATE run on digits
(the methods run on Fashion-MNIST on demand, not here)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tests.benchmarks.conftest import BENCHMARKS


@pytest.fixture(scope="module")
def methods(load_benchmark):
    if str(BENCHMARKS) not in sys.path:  # its sibling modules, as when run as a script
        sys.path.insert(0, str(BENCHMARKS))
    return load_benchmark("utility_methods")


def test_a_rule_alone_run_costs_its_target_and_scores_the_published_rule(
    methods, small_digits, digits, tmp_path, one_torch_thread, monkeypatch
):
    from pate.core.io import load_npy

    monkeypatch.setattr(methods, "QUERIES", len(digits.public.x))  # Fashion-MNIST's 9000

    path = small_digits(
        tmp_path,
        replace=(
            (
                "[partition]\nnum_teachers = 10            # 100 private images per teacher\n"
                'mode = "random"\n',
                "",
            ),
            (
                'mechanism = "confident-gnmax"\nthreshold = 7.0\nsigma1 = 2.0\nsigma2 = 2.0',
                'mechanism = "class-means"\nsigma = 3.0',
            ),
            ("[student]\n", '[student]\ntargets = "soft"\ncombine_with_rule = true\n'),
        ),
        extra='\n[knn]\nfeatures = "none"\ndims = 16\nrule = "logistic"\n',
    )
    base, _ = methods.base_run(path, tmp_path / "base", device="cpu")

    row = methods.class_means_rule_budget(
        base.run.directory(),
        base,
        2.0,
        delta=1e-5,
        out=tmp_path,
        repeat=0,
        splits={"evaluation-1000": digits.evaluation},
    )
    assert row["eps"] == pytest.approx(2.0, abs=1e-6) and row["eps"] <= 2.0 + 1e-9
    assert row["released_model"] is False and row["holdout"] is False
    assert not (tmp_path / "class-means-rule-eps2-r0" / "student.pt").exists()  # no student
    labels = load_npy(tmp_path / "class-means-rule-eps2-r0" / "labels.npy")
    assert row["label_accuracy"] == pytest.approx(float(np.mean(labels == digits.public.y)))
    # the rule labels the held-back evaluation digits far above chance (0.1)
    assert 0.6 < row["accuracy"] <= 1.0


def test_a_held_out_pate_run_is_seeded_charged_and_scored_on_the_held_out_records(
    methods, small_digits, digits, tmp_path, one_torch_thread, monkeypatch, load_benchmark
):
    """--holdout for classic PATE: the base run on the own-data file with the given seed, the
    fork answering until the target, the released student scored on the held-out records that
    were never in the file (as the class-means runs are)."""
    from pate.student.train import Student

    holdout = load_benchmark("utility_holdout")
    monkeypatch.setattr(methods, "QUERIES", len(digits.public.x))
    monkeypatch.setattr(
        methods, "PATE_ENSEMBLES", {10: {"threshold": 5.0, "sigma1": 5.0, "sigma2": 4.0}}
    )
    heldout = holdout.prepare(digits, tmp_path, holdout=200)
    assert heldout.path.name == "holdout-private800.npz" and len(heldout.split.x) == 200
    assert heldout.flip is False  # digits: a flip changes the label
    path = small_digits(tmp_path)
    base, _ = methods.base_run(
        path,
        tmp_path / "base",
        device="cpu",
        edit=lambda config: holdout.edit_config(config, heldout, seed=3),
    )
    assert base.run.seed == 3 and base.data.name == f"npz:{heldout.path.resolve()}"
    rows = methods.pate_budget(
        base.run.directory(),
        base,
        2.0,
        delta=1e-5,
        out=tmp_path,
        teachers=10,
        seed=3,
        holdout=heldout.split,
    )
    row = rows[0]
    assert row["method"] == "PATE" and row["kind"] == "guarantee"
    assert row["eps"] <= 2.0 + 1e-9 and row["answered"] > 0
    assert row["seed"] == 3 and row["holdout"] is True
    student = Student.load(tmp_path / "pate10-eps2-s3" / "student.pt")
    expected = float(np.mean(student.predict(heldout.split.x) == heldout.split.y))
    assert row["accuracy_holdout"] == pytest.approx(expected, abs=1e-12)
