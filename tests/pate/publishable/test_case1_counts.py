"""Issue #48, case 1: nothing published depends on the exact number of private records.

The plan works from the number of private records the user DECLARES public (``[data] records``,
``records=``; a built-in dataset declares its own size); the exact count is internal. So two
datasets that differ by one record, with the same declaration, get the same plan (teachers,
queries, noise), the same class-means front-end and rule, the same ``plan.json``, the same
``config.planned`` and ``privacy.num_teachers`` in ``report.json``, and the exact count
appears in no publishable file. Own data without a declaration, or with one far from the
truth, is refused before any work.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import pate
from pate.run import planner, rundir
from pate.run.config import build, facts_of, load, plan, read_toml
from pate.run.pipeline import PLAN
from pate.teachers.data import load_pate_data
from pate.teachers.errors import ConfigError

#: The issue's digits plan: GNMax with teachers chosen by the planner for a target epsilon.
DIGITS_PLAN = dict(teacher="mlp", target_eps=8.0, delta=1e-5, ledger=False)

#: The declared label sets (never read from the private labels): digits' ten names, the table's two.
DIGITS = [str(d) for d in range(10)]
TABLE = ["no", "yes"]


@pytest.fixture(scope="module")
def digits_pool():
    """scikit-learn's digits as arrays (1797 images, 64 columns), in the built-in split order."""
    data = load_pate_data("digits")
    return data


def digits_arrays(data, private_records: int):
    """The digits split with its private part cut to ``private_records`` rows."""
    private = (data.private.x[:private_records], data.private.y[:private_records])
    return private, data.public.x, (data.evaluation.x, data.evaluation.y)


def test_digits_plans_for_1000_and_999_records_are_identical(digits_pool):
    plans = []
    for exact in (1000, 999):
        private, public, evaluation = digits_arrays(digits_pool, exact)
        plans.append(
            pate.plan(
                private, public, evaluation=evaluation, records=1000, classes=DIGITS, **DIGITS_PLAN
            )
        )
    full, one_less = plans
    assert full.num_teachers is not None and full.num_teachers == one_less.num_teachers
    assert full.queries == one_less.queries
    assert full.noise == one_less.noise
    assert full.to_dict() == one_less.to_dict()
    assert full.lines() == one_less.lines()
    assert full.facts.private_records == 1000 and full.facts.records_basis == "declared"


def test_the_plan_moves_with_the_declaration_not_the_data(digits_pool):
    """The declared number is what the plan reads: declaring fewer records gives fewer teachers
    on the very same data (a change the exact count could not cause)."""
    private, public, evaluation = digits_arrays(digits_pool, 1000)
    many = pate.plan(
        private, public, evaluation=evaluation, records=1000, classes=DIGITS, **DIGITS_PLAN
    )
    few = pate.plan(
        private, public, evaluation=evaluation, records=600, classes=DIGITS, **DIGITS_PLAN
    )
    assert few.facts.private_records == 600
    assert few.num_teachers < many.num_teachers


def table(rows: int, *, seed: int = 0, columns: int = 8):
    """A two-class table with ``columns`` columns: the private rows, 200 public, 100 for
    evaluation (the same public and evaluation rows whatever ``rows``)."""
    rng = np.random.default_rng(seed)
    total = 600 + 300
    y = rng.integers(0, 2, size=total)
    x = rng.normal(size=(total, columns)).astype(np.float32) + y[:, None].astype(np.float32)
    return (x[:rows], y[:rows]), x[600:800], (x[800:], y[800:])


@pytest.mark.parametrize("declared", [440, 439])
def test_a_table_of_440_or_439_records_gets_one_front_end(declared):
    """8 columns, 2 classes: the quadratic front-end needs 5 x 44 records per class, i.e. 440
    records; the choice follows the declaration, whatever the exact count."""
    chosen = []
    for exact in (440, 439):
        private, public, evaluation = table(exact)
        plan = pate.plan(
            private,
            public,
            evaluation=evaluation,
            records=declared,
            classes=TABLE,
            target_eps=2.0,
            ledger=False,
        )
        chosen.append({k: v["value"] for k, v in plan.filled.items()})
    assert chosen[0] == chosen[1]
    if declared == 440:
        assert chosen[0]["features"] == "quadratic" and chosen[0]["rule"] == "qda"
    else:
        assert chosen[0]["features"] == "kernel" and "dims" in chosen[0]


def test_own_data_without_a_declaration_is_refused_before_any_work(tmp_path):
    private, public, evaluation = table(440)
    with pytest.raises(ConfigError, match=r"records= is needed"):
        pate.fit(
            private,
            public,
            evaluation=evaluation,
            classes=TABLE,
            target_eps=2.0,
            ledger=False,
            run_dir=tmp_path / "run",
        )
    assert not (tmp_path / "run").exists()
    # the same records as one csv pool whose rows are marked (a pool is never split unmarked);
    # the public rows carry no label
    csv = tmp_path / "table.csv"
    lines = [",".join([f"f{j}" for j in range(private[0].shape[1])] + ["label", "split"])]
    for x, y, split in (
        (private[0], private[1], "private"),
        (public, [""] * len(public), "public"),
        (evaluation[0], evaluation[1], "evaluation"),
    ):
        lines += [
            ",".join([f"{v:.5g}" for v in row] + [str(label), split]) for row, label in zip(x, y)
        ]
    csv.write_text("\n".join(lines) + "\n")
    raw = read_toml("own-data")
    raw["data"]["name"] = f"csv:{csv}"
    raw["data"]["classes"] = TABLE
    raw["privacy"]["ledger"] = False
    raw["data"].pop("records", None)
    with pytest.raises(ConfigError, match=r"\[data\] records is needed"):
        build(raw)
    raw["data"]["records"] = 700
    config = build(raw)
    assert config.data.records == 700


@pytest.mark.parametrize("declared", [200, 2000])
def test_a_declaration_far_from_the_truth_is_refused_and_says_what_to_declare(declared):
    private, public, evaluation = table(440)
    with pytest.raises(planner.PlanError, match=r"records=440\b") as refused:
        pate.plan(
            private,
            public,
            evaluation=evaluation,
            records=declared,
            classes=TABLE,
            target_eps=2.0,
            ledger=False,
        )
    assert refused.value.setting == "records="
    assert f"records={declared}" in str(refused.value)


def test_a_builtin_dataset_declares_its_own_size():
    data = load_pate_data("digits")
    config = load("digits", ledger=False)
    facts = facts_of(config, data)
    assert facts.private_records == 1000 and facts.records_basis == "builtin"
    assert "the built-in dataset's published size" in plan(config, facts=facts)[1].lines()[0]


# ------------------------------------------------------------------------ runs on D and D + 1


def _run(run_dir, exact: int, declared: int):
    private, public, evaluation = table(exact, seed=1)
    pate.fit(
        private,
        public,
        evaluation=evaluation,
        records=declared,
        classes=TABLE,
        target_eps=2.0,
        ledger=False,
        run_dir=run_dir,
        student_params={"epochs": 1, "steps_per_epoch": 5, "method": "supervised"},
    )
    return run_dir


@pytest.fixture(scope="module")
def neighbour_runs(tmp_path_factory):
    """Class-means runs (the planner's choice with a target and no teachers) on D (477 private
    rows) and D + 1 (478), both declaring 480 records."""
    tmp = tmp_path_factory.mktemp("case1")
    # folders not named by the count (a path is written into the report)
    return {exact: _run(tmp / name, exact, 480) for name, exact in (("d", 477), ("d1", 478))}


#: The files a run publishes (the report, its JSON, the plan); the saved config too when a run
#: keeps it beside them.
PUBLISHABLE = ("report.md", "report.html", rundir.REPORT_JSON, PLAN, rundir.CONFIG)


def test_plan_json_and_the_report_are_the_same_for_d_and_d_plus_one(neighbour_runs):
    d, d1 = (neighbour_runs[n] for n in (477, 478))
    assert (d / PLAN).read_bytes() == (d1 / PLAN).read_bytes()  # byte-identical
    plan_d = json.loads((d / PLAN).read_text())
    assert plan_d["facts"]["private_records"] == 480
    assert plan_d["facts"]["records_basis"] == "declared"
    report_d, report_d1 = (json.loads((r / rundir.REPORT_JSON).read_text()) for r in (d, d1))
    assert report_d["privacy"]["mechanism"] == "class-means"
    assert report_d["config"]["planned"] == report_d1["config"]["planned"]
    # class-means has no teachers: the publishable report names none (the internal one holds the
    # declared number the release was sized from)
    assert "num_teachers" not in report_d["privacy"] and "num_teachers" not in report_d1["privacy"]
    assert report_d["config"]["knn"] == report_d1["config"]["knn"]
    assert report_d["config"]["student"] == report_d1["config"]["student"]
    # the report says what the run was sized from (declared, public), never the exact count
    assert report_d["privacy"]["records"] == {"declared": 480, "basis": "declared"}
    assert (
        "480 (declared by the user; the exact count is internal)" in (d / "report.md").read_text()
    )


@pytest.mark.parametrize("exact", [477, 478])
def test_the_exact_count_appears_in_no_publishable_file(neighbour_runs, exact):
    exact_count = re.compile(rf"(?<![\d.]){exact}(?![\d.])")
    found = []
    for name in PUBLISHABLE:
        path = neighbour_runs[exact] / name
        text = path.read_text() if path.is_file() else ""
        text = re.sub(r"base64,[A-Za-z0-9+/=]+", "", text)  # the HTML's embedded plots
        if exact_count.search(text):
            found.append(name)
    assert found == []


# ------------------------------------------------------------------------ the teachers' length


class _Captured(Exception):
    """Stops a run at the teachers stage with the recipe it would train."""


def test_the_teachers_training_length_comes_from_the_declared_records(
    digits_pool, tmp_path, monkeypatch
):
    """Left open, the teachers' epochs are sized from records per teacher (``auto_epochs``):
    from the shards' exact sizes, one record more (641 instead of 640 over 10 teachers: 64.1
    per shard, 3 batches of 32 instead of 2) changed EVERY teacher's length (67 epochs instead
    of 100) -- one record reaching all votes. From the declaration it does not."""
    from pate.teachers import ensemble
    from pate.teachers.recipe import auto_epochs

    recipes = []

    def capture(data, shards, seeds, recipe, **_kwargs):
        recipes.append(recipe)
        raise _Captured

    monkeypatch.setattr(ensemble, "train_teachers", capture)
    for exact in (640, 641):
        private, public, evaluation = digits_arrays(digits_pool, exact)
        with pytest.raises(_Captured):
            pate.fit(
                private,
                public,
                evaluation=evaluation,
                records=640,
                classes=DIGITS,
                teacher="mlp",
                num_teachers=10,
                mechanism="gnmax",
                sigma=1.0,
                budget_eps=1000.0,
                ledger=False,
                run_dir=tmp_path / f"run{len(recipes)}",
            )
    assert auto_epochs(64.1) != auto_epochs(64.0) == 100
    assert [r.epochs for r in recipes] == [100, 100]


def test_the_released_student_s_design_is_the_same_for_d_and_d_plus_one(neighbour_runs):
    """The student's model, shape, classes and settings (the planner's soft targets over the
    qda rule included) come from public facts: the same on D and D + 1."""
    torch = pytest.importorskip("torch")
    design = ("format", "model_name", "input_shape", "num_classes", "settings", "n_labelled")
    blobs = [
        torch.load(
            neighbour_runs[n] / rundir.STUDENT_WEIGHTS, weights_only=True, map_location="cpu"
        )
        for n in (477, 478)
    ]
    assert [{k: b[k] for k in design} for b in blobs][0] == {k: blobs[1][k] for k in design}
