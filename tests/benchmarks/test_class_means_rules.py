"""benchmarks/class_means_rules.py: its argument check and a run on digits (one release per sigma)."""

from __future__ import annotations

import json

import numpy as np
import pytest


@pytest.fixture(scope="module")
def rules(load_benchmark):
    return load_benchmark("class_means_rules")


def test_releases_must_be_positive(rules, capsys):
    with pytest.raises(SystemExit):
        rules.main(["--releases", "0"])
    assert "--releases must be at least 1, got 0" in capsys.readouterr().err


def test_digits_rows_compare_both_rules_on_the_same_releases(rules, tmp_path):
    out = tmp_path / "rules.json"
    assert rules.main(["--datasets", "digits", "--releases", "2", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    rows = result["rows"]
    sigmas = rules.SETTINGS["digits"][2]
    assert [(r["sigma"], r["rule"]) for r in rows] == [
        (s, rule) for s in sigmas for rule in ("lda", "logistic")
    ]
    for r in rows:
        assert r["releases"] == (1 if r["sigma"] == 0 else 2) == len(r["public_right"])
        assert r["public_right_mean"] == pytest.approx(
            sum(r["public_right"]) / r["releases"], abs=1e-4
        )
        assert 0.5 < r["public_right_mean"] <= 1.0 and r["dims"] == 16
        assert r["ridge"] == (1e-3 if r["rule"] == "logistic" else None)
        assert r["count_weight"] == 1.0 and r["sigma"] == r["sigma_at_count_weight_1"]
    noise_free = {r["rule"]: r["public_right_mean"] for r in rows if r["sigma"] == 0}
    loudest = {r["rule"]: r["public_right_mean"] for r in rows if r["sigma"] == max(sigmas)}
    assert all(loudest[rule] < noise_free[rule] for rule in noise_free)  # noise costs accuracy
    assert result["meta"]["argv"][:2] == ["--datasets", "digits"]


def test_count_weights_are_compared_at_the_same_eps(rules, tmp_path, capsys):
    from pate.analysis.class_means import class_means_rdp

    out = tmp_path / "weights.json"
    assert (
        rules.main(
            [
                "--datasets",
                "digits",
                "--releases",
                "1",
                "--count-weights",
                "1",
                "0.3",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    rows = json.loads(out.read_text())["rows"]
    sigmas = rules.SETTINGS["digits"][2]
    assert [(r["count_weight"], r["sigma_at_count_weight_1"], r["rule"]) for r in rows] == [
        (k, s, rule) for k in (1.0, 0.3) for s in sigmas for rule in ("lda", "logistic")
    ]
    for r in rows:
        if r["sigma"] > 0:  # each weight's sigma costs what the listed sigma costs with 1
            np.testing.assert_allclose(
                class_means_rdp(sigma=r["sigma"], count_weight=r["count_weight"]),
                class_means_rdp(sigma=r["sigma_at_count_weight_1"], count_weight=1.0),
                rtol=1e-5,
            )
    with pytest.raises(SystemExit):
        rules.main(["--count-weights", "0"])
    assert "--count-weights must be > 0, got 0" in capsys.readouterr().err
