"""benchmarks/utility_table.py: the one utility table (issue #34) -- rows from the measured
results files, the PATE family against DP-SGD, and the generated blocks of README and docs."""

from __future__ import annotations

import json

import numpy as np
import pytest

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def table(load_benchmark):
    return load_benchmark("utility_table")


def _run(method, target, accuracy, **extra):
    return dict(
        {
            "method": method,
            "kind": "guarantee",
            "target_eps": target,
            "eps": target * 0.99,
            "delta": 1e-5,
            "accuracy": accuracy,
        },
        **extra,
    )


def test_rows_are_mean_std_of_runs_and_eps_is_never_understated(table, tmp_path, monkeypatch):
    monkeypatch.setattr(table, "RESULTS", tmp_path)
    (tmp_path / "a.json").write_text(
        json.dumps(
            {
                "meta": {"argv": ["--x"], "commit": "abc", "device": "cpu"},
                "rows": [
                    _run("Noisy class means", 1.0, 0.86, eps=0.999, student_alone_accuracy=0.85),
                    _run("DP-SGD ScatterNet+linear", 1.0, 0.88),
                ],
            }
        )
    )
    (tmp_path / "b.json").write_text(
        json.dumps(
            {
                "meta": {},
                "runs": [
                    _run(
                        "Noisy class means",
                        1.0,
                        0.88,
                        eps=0.98,
                        student_alone_accuracy=0.87,
                        command="c2",
                        commit="def",
                        device="cuda",
                    ),
                    _run(
                        "DP-SGD ScatterNet+linear",
                        1.0,
                        0.87,
                        recipe={"groups": 27},
                        holdout=True,
                        accuracy_holdout=0.9,
                        evaluation="evaluation-1000",
                        seed=3,
                    ),
                ],
            }
        )
    )
    rows = table.build_table(table.load_runs(["a.json", "b.json"]))
    by = {(r["method"], r["evaluation"]): r for r in rows}
    cm = by[("Noisy class means", "evaluation-1000")]
    assert cm["accuracy_mean"] == pytest.approx(0.87) and cm["runs"] == 2
    assert cm["accuracy_std"] == pytest.approx(np.std([0.86, 0.88], ddof=1), abs=1e-6)
    assert cm["eps"] == 0.999  # the largest of the runs' eps
    assert cm["released_model"] and cm["family"] == "PATE family"
    assert cm["device"] == ["cpu", "cuda"] and cm["commit"] == ["abc", "def"]
    assert cm["command"] == ["benchmarks/utility.py --x", "c2"]
    alone = by[("Noisy class means, student alone (not released)", "evaluation-1000")]
    assert not alone["released_model"] and alone["accuracy_mean"] == pytest.approx(0.86)
    tb = by[("DP-SGD ScatterNet+linear (T&B recipe)", "holdout-10000")]
    assert tb["accuracy_mean"] == 0.9 and tb["accuracy_std"] is None and tb["seeds"] == [3]
    # a held-out run trained on 50000: its 1000-image score is a row of its own protocol
    assert tb["protocol"] == "pate-holdout"
    assert (
        by[("DP-SGD ScatterNet+linear (T&B recipe)", "evaluation-1000")]["protocol"]
        == "pate-holdout"
    )
    assert (
        by[("DP-SGD ScatterNet+linear (Opacus, public standardisation, lr 4)", "evaluation-1000")][
            "family"
        ]
        == "DP-SGD"
    )


def test_comparison_takes_each_side_best_with_its_standard_error(table):
    def row(method, mean, std, runs, family, released=True):
        return {
            "method": method,
            "protocol": "pate",
            "kind": "guarantee",
            "target_eps": 1.0,
            "evaluation": "evaluation-1000",
            "accuracy_mean": mean,
            "accuracy_std": std,
            "runs": runs,
            "family": family,
            "released_model": released,
        }

    rows = [
        row("Noisy class means", 0.88, 0.01, 3, "PATE family"),
        row("student alone", 0.95, 0.01, 3, "PATE family", released=False),
        row("PATE", 0.78, 0.02, 3, "PATE family"),
        row("DP-SGD a", 0.89, 0.02, 4, "DP-SGD"),
        row("DP-SGD b", 0.85, None, 1, "DP-SGD"),
    ]
    (c,) = table.comparisons(rows)
    assert c["pate_family_best"] == "Noisy class means" and c["dpsgd_best"] == "DP-SGD a"
    assert c["difference"] == pytest.approx(-0.01)
    assert c["standard_error"] == pytest.approx(np.sqrt(0.01**2 / 3 + 0.02**2 / 4))
    held_out = [dict(r, evaluation="holdout-10000", protocol="pate-holdout") for r in rows]
    budget = table.render({"rows": rows + held_out[2:]}, "budget")
    # the held-out protocol's rows only: there the class means have no run in this table
    assert "| 1 | – | 78.0 ± 2.0 % (3): PATE | – | 89.0 ± 2.0 % (4): DP-SGD a |" in budget
    tb = dict(
        rows[3],
        protocol="tramer-boneh",
        target_eps=3.0,
        eps=2.59,
        accuracy_mean=0.8955,
        accuracy_std=0.0006,
        runs=3,
    )
    assert "| tramer-boneh | 3 | 2.59 | 89.5 ± 0.1 % (3) | 89.7 % | -0.15 points |" in table.render(
        {"rows": [tb]}, "reproduction"
    )
    with pytest.raises(ValueError, match="unknown block name 'nope'"):
        table.render({"rows": rows}, "nope")


def _summary(method, mean, runs, family, released):
    """A table row at eps 2 on the held-out images."""
    return {
        "method": method,
        "protocol": "pate-holdout",
        "kind": "guarantee",
        "target_eps": 2.0,
        "evaluation": "holdout-10000",
        "accuracy_mean": mean,
        "accuracy_std": 0.002 if runs > 1 else None,
        "runs": runs,
        "family": family,
        "released_model": released,
    }


def test_the_rule_alone_is_compared_apart_from_the_released_models(table):
    row = _summary
    rows = [
        row(table.RULE_ALONE, 0.88, 3, "PATE family", False),
        row("Noisy class means, times its rule", 0.885, 1, "PATE family", True),
        row("DP-SGD a", 0.893, 3, "DP-SGD", True),
        row("DP-SGD unreleased", 0.99, 3, "DP-SGD", False),
    ]
    (released,) = table.comparisons(rows)
    (rule,) = table.comparisons(rows, pate_side=table._rule_alone)
    assert released["pate_family_best"] == "Noisy class means, times its rule"
    assert released["standard_error"] is None  # one run on the PATE side
    assert rule["pate_family_best"] == table.RULE_ALONE and rule["dpsgd_best"] == "DP-SGD a"
    assert rule["difference"] == pytest.approx(-0.013)
    assert rule["standard_error"] == pytest.approx(np.sqrt(2 * 0.002**2 / 3), abs=1e-6)
    block = table.render({"rows": rows, "rule_alone_comparisons": [rule]}, "rule")
    assert block.startswith(
        "| target ε | evaluation | the class means' labelling rule alone | DP-SGD's best |"
    )
    assert (
        "| 2 | holdout-10000 | " + table.RULE_ALONE + ": 88.0 % (3) | DP-SGD a: 89.3 % (3) | "
        in (block)
    )
    assert block.endswith("| -1.3 ± 0.2 points |")


def test_committed_table_is_what_its_results_files_give(table):
    """Regenerate: python benchmarks/utility.py --table --docs docs/utility.md."""
    committed = json.loads(table.TABLE.read_text())
    assert committed == json.loads(json.dumps(table.make())), (
        "benchmarks/results/utility_fmnist.json is stale: run "
        "python benchmarks/utility.py --table --docs docs/utility.md"
    )
    assert {r["evaluation"] for r in committed["rows"]} >= {"evaluation-1000", "test-10000"}
    for r in committed["rows"]:
        assert r["runs"] >= 1 and 0 < r["accuracy_mean"] < 1 and r["source"], r["method"]
        assert r["eps"] <= r["target_eps"] + 1e-9 or r["kind"] != "guarantee", r


def test_every_utility_block_of_readme_and_docs_is_the_table(table):
    """A utility number that README.md or docs/*.md draws from the table (a generated block
    ``<!-- utility table: NAME -->``) differs from the table: the test fails."""
    doc = json.loads(table.TABLE.read_text())
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = set()
    for page in pages:
        for name, body in table.docs_blocks(page.read_text(encoding="utf-8")):
            found.add(name)
            assert body == table.render(doc, name), (
                f"{page.name}'s utility block {name!r} differs from "
                "benchmarks/results/utility_fmnist.json: run python benchmarks/utility.py "
                f"--table --docs {page.relative_to(ROOT)}"
            )
    assert found == set(table.BLOCKS)  # docs/utility.md shows every kind of block


def test_a_changed_number_in_a_block_is_caught(table, tmp_path):
    doc = {
        "rows": [],
        "comparisons": [
            {
                "target_eps": 1.0,
                "evaluation": "evaluation-1000",
                "pate_family_best": "cm",
                "pate_mean": 0.885,
                "pate_runs": 3,
                "dpsgd_best": "dp",
                "dpsgd_mean": 0.883,
                "dpsgd_runs": 3,
                "difference": 0.002,
                "standard_error": 0.004,
            }
        ],
    }
    page = tmp_path / "p.md"
    page.write_text("x\n<!-- utility table: comparison -->\nold\n<!-- /utility table -->\ny\n")
    assert table.write_docs(page, doc) == 1
    ((name, body),) = table.docs_blocks(page.read_text())
    assert body == table.render(doc, "comparison") and "+0.2 ± 0.4 points" in body
    page.write_text(page.read_text().replace("88.5 %", "88.6 %"))
    ((name, body),) = table.docs_blocks(page.read_text())
    assert body != table.render(doc, name)


def test_a_held_out_class_means_run_gives_its_product_and_each_factor_on_both_sets(
    table, tmp_path, monkeypatch
):
    monkeypatch.setattr(table, "RESULTS", tmp_path)
    method = "Noisy class means, scatternet_cnn student, soft targets, times its rule"
    (tmp_path / "h.json").write_text(
        json.dumps(
            {
                "meta": {"argv": ["--holdout"], "commit": "abc", "device": "cpu"},
                "rows": [
                    _run(
                        method,
                        1.0,
                        0.88,
                        holdout=True,
                        seed=s,
                        accuracy_holdout=0.89 + s / 100,
                        student_alone_accuracy=0.87,
                        student_alone_accuracy_holdout=0.93,  # above the product
                        rule_alone_accuracy_holdout=0.86,
                    )
                    for s in (0, 1)
                ],
            }
        )
    )
    rows = table.build_table(table.load_runs(["h.json"]))
    by = {(r["method"], r["evaluation"]): r for r in rows}
    assert {r["protocol"] for r in rows} == {"pate-holdout"}
    product = by[(method, "holdout-10000")]
    assert product["released_model"] and product["runs"] == 2 and product["seeds"] == [0, 1]
    assert product["accuracy_mean"] == pytest.approx(0.895)
    assert by[(method, "evaluation-1000")]["accuracy_mean"] == pytest.approx(0.88)
    base = "Noisy class means, scatternet_cnn student, soft targets"
    student = by[(base + ", student alone (not released)", "holdout-10000")]
    rule = by[("Noisy class means, its labelling rule alone (not released)", "holdout-10000")]
    assert not student["released_model"] and student["accuracy_mean"] == pytest.approx(0.93)
    assert not rule["released_model"] and rule["accuracy_mean"] == pytest.approx(0.86)
    assert (base + ", student alone (not released)", "evaluation-1000") in by
    assert (
        "Noisy class means, its labelling rule alone (not released)",
        "evaluation-1000",
    ) not in by
    # only the released product stands for the PATE family in the comparison
    picked = {c["pate_family_best"] for c in table.comparisons(rows + [_dpsgd_holdout()])}
    assert picked == {method}


def _dpsgd_holdout():
    return {
        "method": "DP-SGD ScatterNet+linear (T&B recipe)",
        "kind": "guarantee",
        "target_eps": 1.0,
        "accuracy_mean": 0.875,
        "accuracy_std": 0.001,
        "runs": 3,
        "evaluation": "holdout-10000",
        "protocol": "pate-holdout",
        "released_model": True,
        "family": "DP-SGD",
    }


def test_held_out_runs_are_compared_on_both_of_their_evaluation_sets(table):
    """A held-out protocol run is scored on the 10000 held-out images and on the 1000
    evaluation images: both are compared with DP-SGD's runs of the same protocol (never with
    the rows trained on 60000), and a block names the second one apart from the pipeline's."""
    pate = dict(
        _dpsgd_holdout(),
        method="Noisy class means, scatternet_cnn student, soft targets, times its rule",
        family="PATE family",
        accuracy_mean=0.879,
        accuracy_std=0.0005,
    )
    rows = [
        pate,
        _dpsgd_holdout(),
        dict(pate, evaluation="evaluation-1000", accuracy_mean=0.882, accuracy_std=0.001),
        dict(_dpsgd_holdout(), evaluation="evaluation-1000", accuracy_mean=0.867),
        # the pipeline's protocol (private = 60000): a DP-SGD row that must not be picked
        dict(_dpsgd_holdout(), evaluation="evaluation-1000", protocol="pate", accuracy_mean=0.99),
    ]
    found = {(c["evaluation"], c["protocol"]): c for c in table.comparisons(rows)}
    assert set(found) == {("holdout-10000", "pate-holdout"), ("evaluation-1000", "pate-holdout")}
    small = found[("evaluation-1000", "pate-holdout")]
    assert small["dpsgd_mean"] == pytest.approx(0.867)  # not the pipeline protocol's 0.99
    assert small["difference"] == pytest.approx(0.015) and small["standard_error"] > 0
    block = table.render({"rows": rows, "comparisons": list(found.values())}, "comparison")
    assert "| 1 | evaluation-1000, private 50000 |" in block and "| 1 | holdout-10000 |" in block
    compact = table.render({"rows": rows, "comparisons": list(found.values())}, "heldout")
    assert compact.splitlines()[2:] == ["| 1 | 87.9 % (3) | 87.5 % (3) | +0.4 ± 0.1 points |"]


def test_a_rule_on_another_front_end_is_compared_as_a_rule_alone(table):
    """Rule-alone rows named by their front-end (``--class-means-features``) are rules alone
    too: the better of them stands for the rule, never for the released models."""
    patches = (
        "Noisy class means, scatternet+patches features, its labelling rule alone (not released)"
    )
    rows = [
        _summary(table.RULE_ALONE, 0.875, 3, "PATE family", False),
        _summary(patches, 0.884, 3, "PATE family", False),
        _summary("Noisy class means, times its rule", 0.883, 3, "PATE family", True),
        _summary("DP-SGD a", 0.893, 3, "DP-SGD", True),
    ]
    (rule,) = table.comparisons(rows, pate_side=table._rule_alone)
    (released,) = table.comparisons(rows)
    assert rule["pate_family_best"] == patches
    assert released["pate_family_best"] == "Noisy class means, times its rule"
