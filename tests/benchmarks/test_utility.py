"""benchmarks/utility.py: its argument checks and --merge, and the data-dependent planning functions
it keeps for benchmarks/aggregator_sweep.py (the benchmark itself runs on demand, not here)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pate import analysis


@pytest.fixture(scope="module")
def utility(load_benchmark):
    return load_benchmark("utility")


@pytest.mark.parametrize("target", [0.5, 1.0, 2.0, 4.0])
def test_release_parameters_leave_room_and_respect_theorem_23(utility, target):
    r = utility.release_parameters(target, delta=1e-5)
    assert r["order"] * r["beta"] == pytest.approx(0.4) and r["order"] < 1 / (2 * r["beta"])
    fixed = analysis.gnss_rdp(
        beta=r["beta"], sigma_ss=r["sigma_ss"], order=r["order"]
    ) + analysis.conversion_term(order=r["order"], delta=1e-5, conversion="tight")
    assert fixed == pytest.approx(r["fixed_eps"], rel=1e-5) and 0 < fixed < target
    # The chosen order leaves at least as much room per unit of order as every other candidate.
    assert r["room"] == pytest.approx((target - r["fixed_eps"]) / r["order"])


def test_release_parameters_refuse_a_target_below_every_fixed_cost(utility):
    with pytest.raises(ValueError, match="too small"):
        utility.release_parameters(0.01, delta=1e-5)


def test_plan_never_offers_more_than_the_target_allows(utility):
    rng = np.random.default_rng(0)
    n, teachers = 400, 250
    top = rng.integers(120, 251, size=n)
    votes = np.zeros((n, 10), dtype=np.int64)
    votes[:, 0] = top
    for i in range(n):
        votes[i, 1:] = rng.multinomial(teachers - top[i], np.full(9, 1 / 9))
    from pate.core.aggregators import confident_gnmax

    aggregator = {
        "mechanism": "confident-gnmax",
        "threshold": 200.0,
        "sigma1": 100.0,
        "sigma2": 40.0,
    }  # 250 teachers here
    params = {k: aggregator[k] for k in ("threshold", "sigma1", "sigma2")}
    answered = confident_gnmax(votes, rng=np.random.default_rng(1), **params).answered_mask
    z = float(np.random.default_rng(0).normal())
    for target in (0.5, 2.0):
        release = utility.release_parameters(target, delta=1e-5)
        plan = utility.plan_queries(
            votes,
            target=target,
            release=release,
            delta=1e-5,
            conversion="tight",
            seed=1,
            aggregator=aggregator,
        )
        assert 1 <= plan["queries"] <= n and plan["planned_answered"] <= plan["queries"]

        def upper(
            k, release=release
        ):  # the planner's criterion: the release's centre plus one noise std
            out = analysis.release_sanitized_epsilon(
                votes[:k],
                answered=answered[:k],
                order=release["order"],
                beta=release["beta"],
                sigma_ss=release["sigma_ss"],
                delta=1e-5,
                num_teachers=teachers,
                rng=np.random.default_rng(0),
                conversion="tight",
                **params,
            )
            return out["eps_sanitized"] + out["noise_std"] * (1 - z)

        if plan["route"] == "release":
            k = plan["queries"]
            assert upper(k) <= target and (k == n or upper(k + 1) > target)
        else:
            assert plan["queries"] == n  # the online aggregator stops itself at the target
    # More budget never plans fewer answers.
    small = utility.plan_queries(
        votes,
        target=1.0,
        release=utility.release_parameters(1.0, delta=1e-5),
        delta=1e-5,
        conversion="tight",
        seed=1,
        aggregator=aggregator,
    )
    large = utility.plan_queries(
        votes,
        target=4.0,
        release=utility.release_parameters(4.0, delta=1e-5),
        delta=1e-5,
        conversion="tight",
        seed=1,
        aggregator=aggregator,
    )
    assert small["planned_answered"] > 0
    assert large["planned_answered"] >= small["planned_answered"]


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
    assert merged["meta"]["tuned_on"] == utility.TUNED_ON  # the parts' meta had none
    table = (out / "utility_fmnist.md").read_text()
    assert "| DP-SGD CNN | guarantee | 1 | 0.990 | - | - | 81.0 % | 1 |" in table
    assert "| PATE | guarantee | 1 | 0.990 | 45 / 90 | 90.0 % | 74.0 % | 1 |" in table
    # PATE rows name their ensemble size, and sort after the smaller ensemble
    assert table.index("| PATE | guarantee") < table.index(
        "| PATE 1000 teachers | guarantee | 1 | 0.990 | 568 / 1136 | 90.0 % | 78.5 % | 1 |"
    )
    assert (out / "utility_fmnist.png").stat().st_size > 1000


def test_the_plot_draws_every_method(utility, tmp_path, monkeypatch):
    """Twelve guarantee methods, twelve lines (eight markers once silently dropped the ninth)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.axes import Axes

    drawn = []
    plot = Axes.plot

    def spy(self, *args, **kwargs):
        drawn.append(kwargs.get("label"))
        return plot(self, *args, **kwargs)

    monkeypatch.setattr(Axes, "plot", spy)
    rows = [
        {
            "method": f"method {i}",
            "kind": "guarantee",
            "target_eps": 1.0,
            "eps": 1.0,
            "accuracy": 0.5,
            "seconds": 1.0,
        }
        for i in range(12)
    ]
    utility.write_outputs(rows, tmp_path, {"delta": 1e-5}, quiet=True)
    assert sorted(drawn) == sorted(f"method {i}" for i in range(12))
    assert (tmp_path / "utility_fmnist.png").stat().st_size > 0


# ------------------------------------------------------------- the one table (issue #34)

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
    budget = table.render({"rows": rows, "comparisons": [c]}, "budget")
    assert (
        "| 1 | 88.0 ± 1.0 % (3): Noisy class means | 78.0 ± 2.0 % (3): PATE | – | "
        "89.0 ± 2.0 % (4): DP-SGD a |" in budget
    )
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


def test_docs_without_table_stops_before_any_work(utility, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        utility.main(["--docs", "docs/utility.md", "--out", str(tmp_path / "out")])
    assert exc.value.code == 2 and "--docs goes with --table" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_holdout_with_a_method_that_cannot_hold_out_stops_before_any_work(
    utility, tmp_path, capsys
):
    with pytest.raises(SystemExit) as exc:
        utility.main(
            [
                "--holdout",
                "--methods",
                "dpsgd-scatter",
                "class-means",
                "--out",
                str(tmp_path / "out"),
            ]
        )
    assert (
        exc.value.code == 2
        and "--holdout works with --methods dpsgd-scatter only" in capsys.readouterr().err
    )
    assert not (tmp_path / "out").exists()
