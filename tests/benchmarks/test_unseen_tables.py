"""benchmarks/unseen_tables.py: its generators (sizes, none of own_data's), the before/after
switch, and the docs table it generates (checked against the committed results)."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def unseen(load_benchmark):
    return load_benchmark("unseen_tables")


def test_generators_are_new_tables_of_the_briefs_sizes(unseen):
    assert len(unseen.GENERATORS) >= 6
    assert not set(unseen.GENERATORS) & set(unseen.OWN.DATASETS)
    for name, (build, _) in unseen.GENERATORS.items():
        x, y = build()
        assert 500 <= len(y) <= 40_000 and x.ndim == 2 and len(x) == len(y), name
        assert np.all(np.isfinite(x)) and len(np.unique(y)) >= 2, name
        x2, y2 = build()  # own fixed seeds: the same table every time
        np.testing.assert_array_equal(x, x2)
        np.testing.assert_array_equal(y, y2)
    ds = unseen.dataset("small-600")
    assert ds.rows == 600 and unseen.planned_front_end(ds) == "kernel"


def test_the_before_arm_switches_the_qda_choice_off_and_restores_it(unseen):
    from pate.core import release_check

    after = dict(release_check.CANDIDATES["qda"])
    assert set(after) == {"qda", "qda-shrunk"}
    with unseen.arm("before"):
        assert set(release_check.CANDIDATES["qda"]) == {"qda"}
    assert release_check.CANDIDATES["qda"] == after
    with pytest.raises(RuntimeError), unseen.arm("before"):
        raise RuntimeError("a failed run")
    assert release_check.CANDIDATES["qda"] == after  # restored whatever happens
    with unseen.arm("after"):
        assert release_check.CANDIDATES["qda"] == after


def test_markdown_table_pairs_the_arms(unseen):
    row = dict(dataset="t", eps=2.0, repeat=0, rule_check=None)
    results = {
        "datasets": {
            "t": dict(rows=1000, classes=3, front_end="quadratic", non_private=0.9, majority=0.4)
        },
        "rows": [
            dict(row, arm="before", label_accuracy=0.7, student=0.65, gap_closed=0.5),
            dict(row, arm="after", label_accuracy=0.8, student=0.75, gap_closed=0.7),
            dict(row, arm="after", repeat=1, label_accuracy=0.9, student=0.85, gap_closed=0.9),
        ],
    }
    table = unseen.markdown_table(results).splitlines()
    assert len(table) == 3
    assert "| 70.0 → 85.0 |" in table[2] and "| 65.0 → 80.0 |" in table[2]
    assert "| 0.50 → 0.80 |" in table[2] and table[2].endswith("| 2 | – |")
    checked = {
        "chosen": "qda-shrunk",
        "mismatch_ratios": {"qda": 3.5, "qda-shrunk": 1.25},
        "mismatch_warning_above": 3.0,
    }
    results["rows"][1]["rule_check"] = checked
    results["rows"][2]["warnings"] = [
        "The release's class statistics are not reproduced by the labelling rule (qda): the "
        "class sums of its public labels differ from the released ones 3.4 times as much as"
    ]
    assert unseen.markdown_table(results).endswith("| 2 | qda/qda-shrunk 1.2–3.4 (warned) |")
    results["rows"].pop()
    assert unseen.markdown_table(results).endswith("| 1 | qda-shrunk 1.2 |")


def test_docs_table_is_what_the_results_give(unseen):
    doc = (ROOT / "docs" / "own_data.md").read_text()
    blocks = unseen.docs_tables(doc)
    assert blocks, "docs/own_data.md has no unseen_tables block"
    for path, table in blocks:
        results = json.loads((ROOT / path).read_text())
        assert table == unseen.markdown_table(results)
