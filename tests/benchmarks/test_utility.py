"""benchmarks/utility.py: its argument checks (before any work) and --merge (the benchmark itself
runs on demand, not here)."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def utility(load_benchmark):
    return load_benchmark("utility")


def test_bad_arguments_stop_before_any_work(utility, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        utility.main(["--targets", "0", "--out", str(tmp_path / "out")])
    assert exc.value.code == 2 and "--targets" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        utility.main(["--delta", "1.5", "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_bad_threads_and_methods_stop_before_any_work(utility, tmp_path, capsys):
    for argv in (
        ["--threads", "0"],
        ["--methods", "dp-sgd"],
        ["--pate-teachers", "300"],
        ["--dpsgd-seed", "-1"],
        ["--class-means-dims", "0"],
    ):
        with pytest.raises(SystemExit) as exc:
            utility.main([*argv, "--out", str(tmp_path / "out")])
        assert exc.value.code == 2
    assert "--class-means-dims must be positive, got 0" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def _row(method, target, accuracy, kind="guarantee", answered=None):
    return {
        "method": method,
        "kind": kind,
        "target_eps": target,
        "eps": target * 0.99,
        "delta": 1e-5,
        "accuracy": accuracy,
        "answered": answered,
        "asked": None if answered is None else 2 * answered,
        "label_accuracy": None if answered is None else 0.9,
        "seconds": 1.0,
    }


def test_merge_combines_parts_into_one_table_and_plot(utility, tmp_path, capsys):
    parts = {
        "a": [
            _row("PATE", 1.0, 0.74, answered=45),
            _row(
                "PATE (data-dependent eps of the same answers)",
                1.0,
                0.74,
                kind="data-dependent",
                answered=45,
            ),
            dict(_row("PATE", 1.0, 0.785, answered=568), teachers=1000),
            _row("DP-SGD ScatterNet+linear", 1.0, 0.88),
        ],
        "b": [_row("DP-SGD CNN", 1.0, 0.81)],
    }
    for name, rows in parts.items():
        (tmp_path / name).mkdir()
        meta = {
            "delta": 1e-5,
            "argv": ["--methods", name],
            "commit": f"c0ffee{name}",
            "load_average_at_start": [1.0, 1.0, 1.0],
            "ceilings": {"fixmatch_9000_true_labels": {"accuracy": 0.878, "label": "FixMatch"}},
        }
        (tmp_path / name / "utility_fmnist.json").write_text(
            json.dumps({"rows": rows, "meta": meta})
        )
    out = tmp_path / "merged"
    assert (
        utility.main(
            [
                "--merge",
                str(tmp_path / "a"),
                str(tmp_path / "b"),
                "--out",
                str(out),
                "--note",
                "two parts",
            ]
        )
        == 0
    )
    merged = json.loads((out / "utility_fmnist.json").read_text())
    assert [r["method"] for r in merged["rows"]] == [r["method"] for p in parts.values() for r in p]
    assert merged["meta"]["note"] == "two parts" and set(merged["meta"]["parts"]) == {
        str(tmp_path / "a"),
        str(tmp_path / "b"),
    }
    assert {r["kind"] for r in merged["rows"]} == {"guarantee", "data-dependent"}
    # every row says which part's command and commit made it
    assert [(r["command"], r["commit"]) for r in merged["rows"]] == [
        (f"python benchmarks/utility.py --methods {name}", f"c0ffee{name}")
        for name, rows in parts.items()
        for _ in rows
    ]
    assert merged["meta"]["tuned_on"] == utility.TUNED_ON  # the parts' meta had none
    table = (out / "utility_fmnist.md").read_text()
    assert "| DP-SGD CNN | guarantee | 1 | 0.990 | - | - | 81.0 % | 1 |" in table
    assert "| PATE | guarantee | 1 | 0.990 | 45 / 90 | 90.0 % | 74.0 % | 1 |" in table
    # PATE rows name their ensemble size, and sort after the smaller ensemble
    assert table.index("| PATE | guarantee") < table.index(
        "| PATE 1000 teachers | guarantee | 1 | 0.990 | 568 / 1136 | 90.0 % | 78.5 % | 1 |"
    )
    assert (out / "utility_fmnist.png").stat().st_size > 1000


def test_docs_without_table_stops_before_any_work(utility, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        utility.main(["--docs", "docs/utility.md", "--out", str(tmp_path / "out")])
    assert exc.value.code == 2 and "--docs goes with --table" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_negative_run_seed_stops_before_any_work(utility, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        utility.main(["--run-seeds", "0", "-1", "--out", str(tmp_path / "out")])
    assert exc.value.code == 2 and "--run-seeds must be >= 0, got [0, -1]" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["--rule-alone", "0", "--methods", "class-means"],
        ["--rule-alone", "3"],  # every method
        ["--rule-alone", "3", "--methods", "class-means", "pate"],
    ],
)
def test_rule_alone_without_class_means_alone_stops_before_any_work(
    utility, tmp_path, capsys, argv
):
    with pytest.raises(SystemExit) as exc:
        utility.main([*argv, "--out", str(tmp_path / "out")])
    assert exc.value.code == 2 and "--rule-alone takes a number of repeats >= 1" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "out").exists()
