"""The plan predicts what the labels will be worth (issue #51): from the declared facts and the
noise, before anything is trained, it refuses labels near chance and warns about weak ones,
naming the epsilon that would work (pate.run.planner.quality; docs/plan.md, "What the labels
will be worth")."""

from __future__ import annotations

import pathlib
import tomllib

import numpy as np
import pytest
from scipy.special import ndtr

import pate
from pate.cli import main
from pate.run import planner
from pate.run.config import RunConfig, packaged_configs, planning
from pate.run.planner import quality

REPO = pathlib.Path(__file__).resolve().parents[3]
#: the issue's table: 5 600 private records, 3 classes, 3 000 public items, 10 columns (the
#: quadratic front-end; measured: every label one class at eps 0.05, docs/plan.md)
ISSUE_TABLE = planner.Facts(private_records=5600, classes=3, public_items=3000, input_shape=(10,))


def plan(aggregator: dict, facts, *, teachers=None, budget=None, student=None):
    given = {
        "run": {"name": "t"},
        "data": {"name": "npz:/nonexistent.npz", "records": facts.private_records},
        "aggregator": aggregator,
        "privacy": {
            "delta": 1e-5,
            "budget_eps": budget or aggregator.get("target_eps") or 1.0,
            "release": False,
        },
    }
    if teachers is not None:
        given["partition"] = {"num_teachers": teachers}
    if student is not None:
        given["student"] = student
    return planning.plan(RunConfig.parse(given), facts=facts)[1]


def fixed_eps(error: planner.PlanError) -> float:
    return float(error.fix.split("[aggregator] target_eps = ")[1].split()[0])


# --------------------------------------------------------------------------- the model


def test_the_noisy_argmax_model_has_its_limits():
    assert quality.kept(0.0, 4) == pytest.approx(0.25, abs=1e-6)  # no margin: chance
    assert quality.kept(1.3, 2) == pytest.approx(ndtr(1.3 / np.sqrt(2)), abs=1e-6)
    assert quality.kept(30.0, 10) == pytest.approx(1.0)
    assert quality.closed(0.25, 4) == 0 and quality.closed(1.0, 4) == 1
    agreements = [
        quality.vote_agreement(voters=50, noise_std=sigma, classes=10) for sigma in (5, 10, 25)
    ]
    assert agreements == sorted(agreements, reverse=True)  # more noise, worse labels


def test_the_vote_agreement_rate_fits_the_measured_table_as_documented():
    """docs/plan.md's label-accuracy table (noisy argmax against the true label, by sigma/T)
    predicted as kept x plurality + (1 - kept) x (1 - plurality) / (m - 1): mean error +0.7
    points, mean absolute error 6.6 points (the constant's stated fit)."""
    table = [  # classes, plurality accuracy, {sigma / T: measured label accuracy}
        (10, 0.895, {0.1: 0.880, 0.2: 0.756, 0.3: 0.579, 0.5: 0.369, 1.0: 0.197}),
        (10, 0.931, {0.1: 0.919, 0.2: 0.881, 0.3: 0.760, 0.5: 0.535, 1.0: 0.268}),
        (2, 0.958, {0.1: 0.944, 0.2: 0.918, 0.3: 0.879, 0.5: 0.768, 1.0: 0.647}),
        (2, 0.979, {0.1: 0.966, 0.2: 0.961, 0.3: 0.938, 0.5: 0.855, 1.0: 0.713}),
        (6, 0.507, {0.1: 0.417, 0.2: 0.312, 0.3: 0.262, 0.5: 0.218, 1.0: 0.195}),
        (6, 0.509, {0.1: 0.482, 0.2: 0.409, 0.3: 0.352, 0.5: 0.280, 1.0: 0.215}),
    ]
    errors = []
    for classes, plurality, measured in table:
        for relative, accuracy in measured.items():
            kept = quality.vote_agreement(voters=1.0, noise_std=relative, classes=classes)
            predicted = kept * plurality + (1 - kept) * (1 - plurality) / (classes - 1)
            errors.append(predicted - accuracy)
    assert np.mean(errors) == pytest.approx(0.007, abs=0.001)
    assert np.mean(np.abs(errors)) == pytest.approx(0.066, abs=0.001)


# --------------------------------------------------------------------------- refused or warned


def test_the_issues_case_is_refused_naming_an_eps_that_plans_without_a_warning():
    """Issue #51: target_eps = 0.05 on 5 600 records, 3 classes: the plan said "usable" and
    every label came out as one class."""
    with pytest.raises(planner.PlanError, match="the labels would be near chance") as caught:
        plan({"mechanism": "auto", "target_eps": 0.05}, ISSUE_TABLE)
    error = caught.value
    assert error.setting == "[aggregator] target_eps" and "chance: 33 %" in str(error)
    eps = fixed_eps(error)
    assert 0.05 < eps < 1.0
    got = plan({"mechanism": "auto", "target_eps": eps}, ISSUE_TABLE)
    assert got.usable and not got.warnings and got.mechanism == "class-means"
    assert quality.closed(got.label_agreement, 3) >= quality.WEAK_LABELS
    assert any("labels equal to the noiseless rule's" in line for line in got.checked)
    assert any(line.startswith("labels      about") for line in got.lines())


@pytest.mark.parametrize(
    "aggregator, facts, teachers, match",
    [
        # GNMax with 10 teachers and sigma 40: the noise check names the same cause
        (
            {"mechanism": "gnmax", "sigma": 40.0},
            planner.Facts(private_records=1000, classes=10, public_items=597, input_shape=(64,)),
            10,
            "drowns the votes",
        ),
        # 2 records per class
        (
            {"mechanism": "class-means", "sigma": "auto", "target_eps": 2.0},
            planner.Facts(private_records=20, classes=10, public_items=597, input_shape=(64,)),
            None,
            "the labels would be near chance",
        ),
        # 100 classes on 500 records
        (
            {"mechanism": "auto", "target_eps": 2.0},
            planner.Facts(private_records=500, classes=100, public_items=2000, input_shape=(20,)),
            None,
            "the labels would be near chance",
        ),
    ],
)
def test_hopeless_plans_are_refused(aggregator, facts, teachers, match):
    with pytest.raises(planner.PlanError, match=match):
        plan(aggregator, facts, teachers=teachers, budget=100.0)


def test_weak_labels_are_warned_with_the_eps_that_would_make_them_useful():
    got = plan({"mechanism": "class-means", "sigma": "auto", "target_eps": 0.07}, ISSUE_TABLE)
    assert got.usable
    (warning,) = [w for w in got.warnings if "weak labels" in w]
    assert "[aggregator] target_eps = " in warning and "or more" in warning


def test_fixed_noise_near_chance_names_the_noise():
    with pytest.raises(planner.PlanError, match="near chance") as caught:
        plan({"mechanism": "class-means", "sigma": 400.0}, ISSUE_TABLE, budget=10.0)
    assert caught.value.setting == "[aggregator] sigma" and "less noise" in caught.value.fix


def test_pate_plan_words_the_refusal_as_keywords(tmp_path):
    """pate.plan / pate.fit reword the planner's TOML words at their boundary."""
    rows = np.random.default_rng(0).normal(size=(8400, 10))
    labels = np.arange(8400) % 3
    with pytest.raises(pate.PlanError) as caught:
        pate.plan(
            (rows[:5600], labels[:5600]),
            rows[5600:8600],
            evaluation=(rows[8000:], labels[8000:]),
            records=5600,
            classes=["a", "b", "c"],
            target_eps=0.05,
            ledger=False,
        )
    assert caught.value.setting == "target_eps=" and "target_eps=0.086 or more" in str(caught.value)
    assert "[aggregator]" not in str(caught.value)


# --------------------------------------------------------------------------- shipped configs


def test_every_shipped_config_plans_without_a_warning(capsys):
    facts = {
        "fashion-mnist": planner.Facts(60000, 10, 9000, (1, 28, 28), "builtin"),
        "mnist": planner.Facts(60000, 10, 9000, (1, 28, 28), "builtin"),
        "digits": planner.Facts(1000, 10, 597, (1, 8, 8), "builtin"),
    }
    shipped = sorted((REPO / "pate" / "configs").glob("*.toml"))
    assert sorted(packaged_configs().values()) == shipped  # what `pate init-config --list` lists
    assert main(["init-config", "--list"]) == 0
    listed = capsys.readouterr().out
    for name in packaged_configs():
        assert name in listed
    for path in shipped:
        config = RunConfig.parse(tomllib.loads(path.read_text()))
        declared = config.data.records or 5000
        own = planner.Facts(declared, 5, 1000, (20,))
        got = planning.plan(config, facts=facts.get(config.data.name, own))[1]
        assert got.usable and not got.warnings, (path.name, got.warnings)
        assert got.label_agreement is not None and got.label_agreement > 0.9, path.name


def test_too_few_labels_for_a_supervised_student_is_warned_and_not_for_fixmatch():
    facts = planner.Facts(60000, 10, 9000, (1, 28, 28), "builtin")
    aggregator = {
        "mechanism": "confident-gnmax",
        "threshold": 200.0,
        "sigma1": 150.0,
        "sigma2": 40.0,
        "queries": 9000,
    }
    semi = plan(aggregator, facts, teachers=250, budget=4.0, student={"method": "fixmatch"})
    assert not semi.warnings
    alone = plan(aggregator, facts, teachers=250, budget=4.0, student={"method": "supervised"})
    (warning,) = alone.warnings
    assert "fewer than 50 labels per class" in warning and "a larger eps buys more" in warning
