"""benchmarks/own_data.py: its splits, references and gap arithmetic, the docs tables it generates
(checked against the committed results), and one real run on a tiny dataset (resumed, forced)."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def own(load_benchmark):
    return load_benchmark("own_data")


def test_split_sizes_keep_an_evaluation_split_large_enough(own):
    assert own.split_sizes(40_000) == (30_000, 8_000, 2_000)  # the 30 000 / 8 000 / 2 000
    assert own.split_sizes(569) == (341, 114, 114)  # 5 % would be 28 rows: 20 % instead
    assert own.split_sizes(5_000) == (3_700, 1_000, 300)
    for n in (500, 569, 1797, 5_000, 10_000, 40_000):
        private, public, evaluation = own.split_sizes(n)
        assert private + public + evaluation == n and min(private, public, evaluation) > 0


def test_default_datasets_cover_the_brief(own, tmp_path):
    assert len(own.DEFAULT_DATASETS) >= 6 and "blobs-600" not in own.DEFAULT_DATASETS
    sizes, kinds = {}, set()
    for name in own.DEFAULT_DATASETS:
        if name == "digits-png-28":
            continue  # writes 1797 PNGs: covered by test_image_folder_is_read_through_pate
        ds = own.DATASETS[name](0, tmp_path)
        s = ds.splits
        sizes[name] = ds.rows
        kinds.add(ds.kind)
        assert s["x_private"].dtype == np.float32 and s["y_private"].dtype == np.int64
        assert len(s["x_private"]) == len(s["y_private"]) and ds.classes >= 2
        # same seed, same rows: the reference model and pate.fit see the same private records
        again = own.DATASETS[name](0, tmp_path).splits
        np.testing.assert_array_equal(again["x_private"], s["x_private"])
    assert min(sizes.values()) >= 500 and max(sizes.values()) <= 50_000
    assert sizes["table-40k-scaled"] == 40_000
    scales = np.abs(own.DATASETS["table-40k-scaled"](0, tmp_path).splits["x_private"]).mean(axis=0)
    assert scales.max() / scales.min() > 1e4  # the awkward scales the issue describes


def test_image_folder_is_read_through_pate(own, tmp_path):
    ds = own.DATASETS["digits-png-28"](0, tmp_path)
    assert ds.source.startswith("imagefolder:") and ds.kind == "image folder"
    assert ds.splits["x_private"].shape[1:] == (1, 28, 28) and ds.rows == 1797
    assert ds.classes == 10 and len(list((tmp_path / "digits-png").rglob("*.png"))) == 1797


def test_gap_closed_and_references(own, tmp_path):
    assert own.gap_closed(0.9, 0.5, 1.0) == pytest.approx(0.8)
    assert own.gap_closed(0.5, 0.5, 1.0) == 0.0
    assert own.gap_closed(0.3, 0.5, 1.0) < 0
    assert own.gap_closed(None, 0.5, 1.0) is None and own.gap_closed(0.9, 0.6, 0.6) is None
    ds = own.DATASETS["blobs-600"](0, tmp_path)
    ref = own.references(ds, seed=0)
    counts = np.bincount(ds.splits["y_private"])
    assert ref["majority"] == pytest.approx(
        np.mean(ds.splits["y_evaluation"] == counts.argmax()), abs=1e-4
    )
    assert ref["non_private"] > 0.95 > ref["majority"]  # well-separated blobs


def test_provisional_teachers(own):
    assert own.provisional_num_teachers(341) == 10
    assert own.provisional_num_teachers(3_700) == 37
    assert own.provisional_num_teachers(30_000) == 250


def test_arguments_are_checked(own, capsys):
    with pytest.raises(SystemExit):
        own.main(["--eps", "0"])
    assert "--eps must be positive and finite, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        own.main(["--datasets", "nope"])


def _row(own, **changes):
    row = {
        "dataset": "d",
        "kind": "table",
        "rows": 600,
        "classes": 3,
        "eps": 2.0,
        "status": "ok",
        "warnings": [],
        "provisional": ["num_teachers"],
        "num_teachers": 10,
        "student": 0.9,
        "teachers_mean": 0.8,
        "plurality": 0.95,
        "answered": 50,
        "asked": 100,
        "label_accuracy": 0.9,
        "eps_guarantee": 1.5,
        "non_private": 1.0,
        "majority": 0.4,
        "gap_closed": 0.8333,
        "seconds": 12.0,
    }
    row.update(changes)
    return row


def test_markdown_table_says_what_pate_said(own):
    refused = _row(
        own,
        status="refused",
        error_type="ConfigError",
        error="num_teachers=500 leaves 2 records | per teacher",
        gap_closed=None,
        student=None,
    )
    table = own.markdown_table({"rows": [_row(own), refused]}).splitlines()
    assert len(table) == 4 and table[0].count("|") == table[1].count("|") == table[2].count("|")
    assert "| **90.0** |" in table[2] and "10 (provisional)" in table[2] and "0.83" in table[2]
    assert "| 50 / 100 |" in table[2]
    assert "| nothing |" in table[2]
    assert (
        "**refused**" in table[3]
        and "ConfigError: num_teachers=500 leaves 2 records \\| per" in table[3]
    )
    # the | in the message is escaped: the row has as many cells as the header
    assert table[3].replace("\\|", "").count("|") == table[1].count("|")


def test_docs_tables_match_their_results():
    """Every generated table of docs/own_data.md is what its results file gives (regenerate:
    ``python benchmarks/own_data.py --docs docs/own_data.md``)."""
    from importlib import util

    spec = util.spec_from_file_location("_own_docs", ROOT / "benchmarks" / "own_data.py")
    module = util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tables = module.docs_tables((ROOT / "docs" / "own_data.md").read_text())
    assert tables, "docs/own_data.md has no generated table"
    for path, table in tables:
        results = json.loads((ROOT / path).read_text())
        assert table == module.markdown_table(results), (
            f"docs/own_data.md's table of {path} is stale: run "
            "python benchmarks/own_data.py --docs docs/own_data.md"
        )
        rows = results["rows"]
        assert {r["dataset"] for r in rows} >= set(module.DEFAULT_DATASETS) - {
            "digits-png-28"
        } or path.endswith("_quick.json")
        for r in rows:
            ref = results["datasets"][r["dataset"]]
            assert (r["non_private"], r["majority"]) == (ref["non_private"], ref["majority"])
            if r["status"] == "ok":
                # from the rounded accuracies: 5e-5 each, over a gap of at least 0.3 here
                assert r["gap_closed"] == pytest.approx(
                    module.gap_closed(r["student"], r["majority"], r["non_private"]), abs=1e-3
                )
                assert 0 < r["eps_guarantee"] <= r["eps"] + 1e-6  # never above the target
            else:
                assert r["error_type"] and r["error"]


def test_tiny_run_then_resumed_without_rerunning(own, tmp_path, capsys):
    out = tmp_path / "own.json"
    assert own.main(["--datasets", "blobs-600", "--eps", "2", "--out", str(out)]) == 0
    results = json.loads(out.read_text())
    (row,) = results["rows"]
    assert row["dataset"] == "blobs-600" and row["eps"] == 2.0 and row["rows"] == 600
    assert row["status"] in ("ok", "refused")
    if row["status"] == "ok":
        assert 0 < row["eps_guarantee"] <= 2.0 + 1e-6
        assert 0 <= row["answered"] <= row["asked"] <= row["public"] == 120
        assert 0.0 <= row["student"] <= 1.0
        # no teachers where the planner chose class-means (the auto rule with nothing else given)
        assert row["teachers_mean"] is None or 0.0 <= row["teachers_mean"] <= 1.0
        assert row["gap_closed"] == pytest.approx(
            own.gap_closed(row["student"], row["majority"], row["non_private"]), abs=1e-4
        )
    else:  # a refusal before training says why
        assert row["error_type"] and row["error"] and row["student"] is None
    assert results["datasets"]["blobs-600"]["non_private"] > 0.95
    assert results["meta"]["invocations"][0]["commit"]
    capsys.readouterr()
    # resumed: the row is kept, nothing rerun
    assert own.main(["--datasets", "blobs-600", "--eps", "2", "--out", str(out)]) == 0
    assert "skipped" in capsys.readouterr().out
    again = json.loads(out.read_text())
    assert again["rows"] == results["rows"] and len(again["meta"]["invocations"]) == 2
    # the docs table of this file is generated from it
    doc = tmp_path / "doc.md"
    doc.write_text(f"x\n<!-- own_data table: {out} -->\nold\n<!-- /own_data table -->\ny\n")
    assert own.write_docs(doc) == 1
    assert own.docs_tables(doc.read_text()) == [(str(out), own.markdown_table(again))]
