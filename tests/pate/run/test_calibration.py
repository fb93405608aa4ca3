"""Target-epsilon calibration: `"auto"` noise parameters (config, CLI) and pate.analysis.calibrate_*."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pate import analysis, mechanisms
from pate.run.config import load
from pate.run.pipeline import Pipeline
from pate.teachers.errors import ConfigError

ORDERS = analysis.DEFAULT_ORDERS


@pytest.mark.parametrize(
    "name, params",
    [
        ("gnmax", {"sigma": "auto"}),
        ("lnmax", {"scale": "auto"}),
        ("confident-gnmax", {"threshold": 7.0, "sigma1": "auto", "sigma2": "auto"}),
        ("confident-gnmax", {"threshold": 7.0, "sigma1": 60.0, "sigma2": "auto"}),
    ],
)
@pytest.mark.parametrize("with_release", [False, True])
def test_calibrated_noise_meets_the_target_and_is_tight(name, params, with_release):
    spec = mechanisms.get(name)
    extra = analysis.gnss_rdp_curve(beta=0.1, sigma_ss=5.0, orders=ORDERS) if with_release else None
    full = spec.calibrate(
        params, target_eps=8.0, delta=1e-5, num_queries=200, orders=ORDERS, extra_rdp=extra
    )
    clean = spec.validate(full)
    worst = 200 * spec.worst_case_query_rdp(clean, orders=ORDERS) + (0 if extra is None else extra)
    eps = analysis.eps_from_rdp(worst, orders=ORDERS, delta=1e-5)[0]
    assert eps <= 8.0 and eps == pytest.approx(8.0, rel=1e-9)  # never over, and tight
    for key, value in params.items():
        if value != "auto":
            assert full[key] == value


def test_what_cannot_be_calibrated_is_refused():
    spec = mechanisms.get("confident-gnmax")
    with pytest.raises(ValueError, match="threshold"):
        spec.calibrate(
            {"threshold": "auto", "sigma1": 1.0, "sigma2": 1.0},
            target_eps=1.0,
            delta=1e-5,
            num_queries=10,
            orders=ORDERS,
        )
    with pytest.raises(ValueError, match="sigma1 alone"):
        spec.calibrate(
            {"threshold": 1.0, "sigma1": "auto", "sigma2": 3.0},
            target_eps=1.0,
            delta=1e-5,
            num_queries=10,
            orders=ORDERS,
        )
    with pytest.raises(ValueError, match="unreachable"):  # the release alone exceeds the target
        analysis.calibrate_gnmax_sigma(
            eps=0.5, delta=1e-5, num_queries=10, extra_rdp=np.full(ORDERS.size, 10.0)
        )


def _digits(tmp_path, small_digits, agg_lines, privacy_lines=""):
    text = small_digits(tmp_path).read_text()
    start = text.index("[aggregator]")
    end = text.index("[privacy]")
    text = text[:start] + "[aggregator]\n" + agg_lines + "\n\n" + text[end:]
    text = text.replace("[privacy]\n", "[privacy]\n" + privacy_lines)
    path = tmp_path / "auto.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "agg, message",
    [
        ('mechanism = "gnmax"\nsigma = "auto"\nqueries = 100', "set target_eps"),
        (
            'mechanism = "gnmax"\nsigma = "auto"\ntarget_eps = 2000.0\nqueries = 100',
            "exceeds [privacy] budget_eps",
        ),
        ('mechanism = "gnmax"\nsigma = 3.0\ntarget_eps = 2.0', "only applies with"),
        (
            'mechanism = "gnmax"\nsigma = "loud"\ntarget_eps = 2.0\nqueries = 100',
            'a number or "auto"',
        ),
        (
            'mechanism = "confident-gnmax"\nthreshold = 7.0\nsigma1 = 0.5\nsigma2 = "auto"\n'
            "target_eps = 1.0\nqueries = 400",
            "unreachable",
        ),
    ],
)
def test_bad_calibration_settings_are_config_errors(tmp_path, small_digits, agg, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load(_digits(tmp_path, small_digits, agg))


def test_a_run_with_a_target_epsilon_spends_it_and_says_how(tmp_path, small_digits):
    path = _digits(
        tmp_path,
        small_digits,
        'mechanism = "gnmax"\nsigma = "auto"\ntarget_eps = 20.0\nqueries = 150',
        privacy_lines="release = false\n",
    )
    config = load(path, run_dir=str(tmp_path / "run"), ledger=str(tmp_path / "ledger.sqlite3"))
    report = Pipeline(config, progress=False).run()
    p = report["privacy"]
    assert p["eps_guarantee"] <= 20.0 and p["eps_guarantee"] >= 0.95 * 20.0
    cal = p["calibration"]
    assert cal["parameters"] == ["sigma"] and cal["target_eps"] == 20.0 and cal["queries"] == 150
    assert p["params"]["sigma"] == pytest.approx(cal["calibrated"]["sigma"])
    assert (
        json.loads((tmp_path / "run" / "config.json").read_text())["aggregator"]["sigma"] == "auto"
    )


def test_the_report_says_what_was_calibrated_and_how(tmp_path, small_digits):
    path = _digits(
        tmp_path,
        small_digits,
        'mechanism = "gnmax"\nsigma = "auto"\ntarget_eps = 20.0\nqueries = 150',
        privacy_lines="release = false\n",
    )
    config = load(path, run_dir=str(tmp_path / "run"), ledger=False)
    Pipeline(config, progress=False).run()
    report = (tmp_path / "run" / "report.md").read_text()
    assert "**Calibration:**" in report and "calibrated for a target" in report
    assert "150 queries" in report and "eps=20" in report
