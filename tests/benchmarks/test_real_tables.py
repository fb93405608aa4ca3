"""benchmarks/real_tables.py: issue #50's protocol on a user's own files (split by person,
references, pate.fit with the names only), checked on a generated table written as CSV."""

from __future__ import annotations

import json

import pandas as pd
import pytest


@pytest.fixture(scope="module")
def real(load_benchmark):
    return load_benchmark("real_tables")


@pytest.fixture(scope="module")
def clinic_csv(real, tmp_path_factory):
    """A messy clinic table (1 000 rows, people with several rows) as one labelled CSV file."""
    messy = real.messy_tables
    table = messy.generate(messy.quick(messy.TABLES["clinic-1k"]), 0)
    path = tmp_path_factory.mktemp("real") / "clinic.csv"
    pd.concat([table.private, table.evaluation]).to_csv(path, index=False)
    return path, table


def test_a_table_is_a_path_and_its_named_columns(real):
    spec = real.parse_table("a/b.csv,label=outcome,id=patient_id")
    assert (str(spec["path"]), spec["label"], spec["id"]) == ("a/b.csv", "outcome", "patient_id")
    with pytest.raises(ValueError, match="name the label column"):
        real.parse_table("a.csv,id=x")
    with pytest.raises(ValueError, match="got 'labels=y'"):
        real.parse_table("a.csv,labels=y")


def test_the_split_keeps_each_person_in_one_split(real, clinic_csv):
    path, table = clinic_csv
    spec = real.parse_table(f"{path},label={table.label},id={table.id}")
    split = real.split_table(spec, seed=0)
    people = [set(getattr(split, name)[table.id]) for name in ("private", "public", "evaluation")]
    assert not (people[0] & people[1] or people[0] & people[2] or people[1] & people[2])
    total = sum(len(p) for p in people)
    assert abs(len(people[0]) / total - 0.6) < 0.01 and abs(len(people[1]) / total - 0.2) < 0.01
    assert table.label not in split.public.columns and len(split.public_labels) == len(split.public)
    assert split.classes == tuple(
        sorted(set(table.private[table.label]) | set(table.evaluation[table.label]))
    )
    again = real.split_table(spec, seed=0)
    assert again.private.equals(split.private)  # the seed fixes the split


def test_a_missing_column_is_refused_before_any_work(real, clinic_csv, capsys):
    path, _ = clinic_csv
    with pytest.raises(SystemExit) as exit_info:
        real.main([f"{path},label=diagnosis"])
    assert exit_info.value.code == 2
    assert "no column 'diagnosis' (the label)" in capsys.readouterr().err


def test_the_protocol_end_to_end_on_a_csv(real, clinic_csv, capsys, tmp_path):
    """pate.fit with the names only: a row with the references, the student's gap closed and
    what pate said; the results file holds the same rows."""
    path, table = clinic_csv
    out = tmp_path / "results.json"
    code = real.main([f"{path},label={table.label},id={table.id}", "--json", "--out", str(out)])
    assert code == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["table"] == "clinic" and row["status"] == "ok" and row["eps_guarantee"] <= 2.0
    assert 0.0 < row["majority"] < 1.0 and row["gap_closed"] is not None
    assert isinstance(row["meets_bar"], bool) and "named_before_training" in row
    assert json.loads(out.read_text())["rows"] == [row]
