"""Issue #50, done when "re-encoding the same people (standardised, one-hot, a column added)
spends from the same budget": two ``pate.fit`` runs on the same people in other encodings
charge one dataset of the ledger and the second is refused when the first spent the budget;
the teachers are dealt by person; other people have their own budget.

The private data's ids come from the tables helper's id column (``PateData.unit_ids``); until
``pate.fit(id=...)`` exists these tests attach them to the checked in-memory data."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

import pate
import pate.api
from pate.core.errors import BudgetExceededError
from pate.core.partition import Partition
from pate.ledger import Ledger, unit_identity
from pate.run import rundir
from pate.teachers.errors import ConfigError
from tests.pate.ledger.test_unit_identity import encoded, raw_table

CLASSES = ["low", "mid", "high"]


@pytest.fixture
def with_people(monkeypatch):
    """``set_ids(ids)``: the next ``pate.fit`` sees its private rows' people as ``ids``."""
    real = pate.api.data_source

    def set_ids(ids):
        def data_source(*args, **kwargs):
            data, identity, table = real(*args, **kwargs)
            return dataclasses.replace(data, unit_ids=ids), identity, table

        monkeypatch.setattr(pate.api, "data_source", data_source)

    return set_ids


def fit(tmp_path, x, y, run: str, **settings):
    split = (x[:60], y[:60])  # public and evaluation rows: the table's first rows stand in
    return pate.fit(
        (x, y),
        split[0],
        evaluation=split,
        classes=CLASSES,
        records=len(y),
        teacher=LogisticRegression(max_iter=200),
        student=LogisticRegression(max_iter=200),
        num_teachers=5,
        mechanism="gnmax",
        sigma="auto",
        queries=30,
        **settings,
        ledger=tmp_path / "ledger.sqlite3",
        run_dir=tmp_path / run,
    )


def test_the_same_people_re_encoded_spend_from_one_budget(tmp_path, with_people):
    numeric, category, y, ids = raw_table()
    with_people(ids)
    first = fit(tmp_path, encoded(numeric, category, "codes"), y, "codes", target_eps=60.0)
    part = Partition.load(first.run_dir / rundir.PARTITION)
    assert part.mode == "unit" and part.neighbouring_relation.startswith("unit-level")
    assert all(len(set(part.assignment[ids == person])) == 1 for person in np.unique(ids))
    report = json.loads((first.run_dir / "report.json").read_text())
    assert report["privacy"]["neighbouring_relation"] == "unit"
    with Ledger(tmp_path / "ledger.sqlite3") as ledger:
        (dataset,) = ledger.datasets()
        spent = ledger.summary(dataset["digest"])["spent"]
    assert dataset["budget_eps"] == 60.0 and 0 < spent <= 60.0

    # standardised and one-hot, a column added, rows reordered: the same people
    order = np.random.default_rng(2).permutation(len(y))
    x = encoded(numeric, category, "added")[order]
    with_people(ids[order])
    with pytest.raises(BudgetExceededError, match="no room"):
        fit(tmp_path, x, y[order], "added", target_eps=60.0)
    with Ledger(tmp_path / "ledger.sqlite3") as ledger:
        assert [d["digest"] for d in ledger.datasets()] == [dataset["digest"]]
        assert ledger.summary(dataset["digest"])["spent"] == spent  # nothing more charged

    # other people in the same encoding: their own budget
    with_people(ids + 100_000)
    fit(tmp_path, encoded(numeric, category, "codes"), y, "others", target_eps=60.0)
    with Ledger(tmp_path / "ledger.sqlite3") as ledger:
        assert len(ledger.datasets()) == 2 and ledger.linked(dataset["digest"]) == []


def test_a_conflicting_partition_setting_is_refused_before_any_charge(tmp_path, with_people):
    numeric, category, y, ids = raw_table()
    with_people(ids)
    with pytest.raises(ConfigError, match="deals the private rows one by one") as caught:
        x = encoded(numeric, category, "codes")
        fit(tmp_path, x, y, "run", partition="random", target_eps=60.0)
    assert "remove partition=" in str(caught.value)
    assert not (tmp_path / "ledger.sqlite3").exists()
    assert not (tmp_path / "run" / rundir.STATE).exists()


def test_more_teachers_than_people_is_refused_before_any_charge(tmp_path, with_people):
    numeric, category, y, ids = raw_table()
    with_people(ids % 4)  # 300 rows of 4 people
    with pytest.raises(ConfigError, match=r"\(5\) exceeds the 4 people"):
        fit(tmp_path, encoded(numeric, category, "codes"), y, "run", target_eps=60.0)
    assert not (tmp_path / "ledger.sqlite3").exists()


def class_means(tmp_path, x, y):
    return pate.fit(
        (x, y),
        x[:60],
        evaluation=(x[:60], y[:60]),
        classes=CLASSES,
        records=len(y),
        mechanism="class-means",
        sigma="auto",
        student=LogisticRegression(max_iter=200),
        knn={"features": "none"},
        target_eps=60.0,
        ledger=tmp_path / "ledger.sqlite3",
        run_dir=tmp_path / "run",
    )


def test_a_mechanism_that_reads_rows_reads_one_row_per_person(tmp_path, with_people):
    """Class-means bounds what one row changes: with two rows per person it reads each person's
    first row only, so adding or removing a person changes one row and the bound is per person."""
    numeric, category, y, ids = raw_table()
    with_people(ids)
    class_means(tmp_path, encoded(numeric, category, "codes"), y)
    with np.load(tmp_path / "run" / rundir.KNN_EMBEDDINGS) as saved:
        assert saved["private"].shape[0] == np.unique(ids).size < len(ids)
        first = np.sort(np.unique(ids, return_index=True)[1])
        np.testing.assert_array_equal(saved["private_labels"], y[first])
    report = json.loads((tmp_path / "run" / rundir.REPORT_JSON).read_text())
    assert report["privacy"]["neighbouring_relation"] == "unit"
    # the report says why the bound is per person: one row each, not a split by person
    text = (tmp_path / "run" / rundir.REPORT_MD).read_text()
    assert "only one record of each person (their first) was read" in text
    assert "split by unit" not in text


def test_a_mechanism_that_reads_rows_charges_the_people_with_one_row_each(tmp_path, with_people):
    numeric, category, y, ids = raw_table()
    once = np.unique(ids, return_index=True)[1]  # one row per person
    with_people(ids[once])
    class_means(tmp_path, encoded(numeric, category, "standardised")[once], y[once])
    with Ledger(tmp_path / "ledger.sqlite3") as ledger:
        (dataset,) = ledger.datasets()
        assert dataset["digest"] == ledger.dataset_id(unit_identity(ids[once]))
        assert ledger.summary(dataset["digest"])["spent"] > 0
