"""The RDP -> (eps, delta) conversion is part of a dataset's budget: every epsilon the ledger
computes for a dataset (fits checks of reserve / charge / commit, summary, history, constraints,
the spend recorded by set_budget) uses that dataset's budget conversion, each linked dataset its
own; ``pate budget set --conversion``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pate.analysis import DEFAULT_ORDERS, PrivacyEvent, eps_from_rdp
from pate.cli import main as cli_main
from pate.core.errors import BudgetExceededError
from pate.ledger import Budget, Ledger, dataset_digest

DELTA = 1e-5
ORDERS = np.asarray(DEFAULT_ORDERS, dtype=np.float64)
A = dataset_digest(np.arange(100))
B = dataset_digest(np.arange(100, 200))


def gaussian_curve(sigma: float) -> np.ndarray:
    """RDP of one Gaussian query of sensitivity 1 (Mironov 2017): alpha / (2 sigma^2)."""
    return ORDERS / (2.0 * sigma**2)


CURVE = gaussian_curve(3.0)
CLASSIC = float(eps_from_rdp(CURVE, orders=ORDERS, delta=DELTA, conversion="classic")[0])
TIGHT = float(eps_from_rdp(CURVE, orders=ORDERS, delta=DELTA, conversion="tight")[0])
BETWEEN = (CLASSIC + TIGHT) / 2  # classic eps > BETWEEN >= tight eps


def event_of(curve: np.ndarray) -> PrivacyEvent:
    return PrivacyEvent(
        mechanism="gaussian",
        params={"sigma": 3.0},
        orders=ORDERS,
        rdp=curve,
        rdp_data_independent=curve,
        queries=1,
        answered=1,
    )


@pytest.fixture
def path(tmp_path):
    return tmp_path / "ledger.sqlite3"


def test_the_curve_separates_the_conversions():
    assert TIGHT < BETWEEN < CLASSIC and CLASSIC - TIGHT > 0.05


def test_budget_validates_its_conversion(path):
    assert Budget(1.0, DELTA).conversion == "classic"
    with pytest.raises(ValueError, match="conversion"):
        Budget(1.0, DELTA, conversion="exact")
    with Ledger(path) as led:
        with pytest.raises(ValueError, match="conversion must be one of 'classic', 'tight'"):
            led.set_budget(A, eps=1.0, delta=DELTA, conversion="Tight")
        assert led.datasets() == []  # nothing written


def test_tight_budget_admits_what_a_classic_one_refuses(path):
    with Ledger(path) as led:
        led.set_budget(A, eps=BETWEEN, delta=DELTA, name="classic")
        led.set_budget(B, eps=BETWEEN, delta=DELTA, conversion="tight", name="tight")
        assert led.budget("tight") == Budget(BETWEEN, DELTA, "data-independent", "tight")
        with pytest.raises(BudgetExceededError, match="classic conversion") as refused:
            led.reserve("classic", orders=ORDERS, rdp=CURVE, run_id="r0")
        assert refused.value.requested == pytest.approx(CLASSIC, rel=1e-12)
        with pytest.raises(BudgetExceededError):
            led.charge("classic", [event_of(CURVE)])
        assert led.events("classic") == [] and led.reservations("classic") == []

        res = led.reserve("tight", orders=ORDERS, rdp=CURVE, run_id="r1")
        live = led.summary("tight")
        assert live["spent"] == 0.0
        assert live["spent_and_reserved"] == pytest.approx(TIGHT, rel=1e-12)
        assert live["reservations"][0]["eps_alone"] == pytest.approx(TIGHT, rel=1e-12)
        assert live["remaining"] == pytest.approx(BETWEEN - TIGHT, rel=1e-12)
        res.commit([event_of(CURVE)])

        s = led.summary("tight")
        assert s["budget"]["conversion"] == "tight"
        assert s["spent"] == pytest.approx(TIGHT, rel=1e-12)
        assert s["spent_data_independent"] == pytest.approx(TIGHT, rel=1e-12)
        assert s["spent_and_reserved"] == pytest.approx(TIGHT, rel=1e-12)
        assert s["remaining"] == pytest.approx(BETWEEN - TIGHT, rel=1e-12)
        assert s["remaining_effective"] == s["remaining"]
        rows = led.history("tight")
        assert rows[0]["eps"] == pytest.approx(TIGHT, rel=1e-12)
        assert rows[0]["cumulative_eps"] == pytest.approx(TIGHT, rel=1e-12)
        # A second query composes to more than the tight budget: refused.
        with pytest.raises(BudgetExceededError, match="tight conversion"):
            led.charge("tight", [event_of(CURVE)])


def test_set_budget_records_the_spend_with_the_new_conversion(path):
    with Ledger(path) as led:
        led.set_budget(A, eps=10.0, delta=DELTA, name="d")
        led.charge("d", [event_of(CURVE)])
        led.set_budget("d", eps=10.0, delta=DELTA, conversion="tight", reason="the runs use tight")
        led.set_budget("d", eps=10.0, delta=DELTA, conversion="tight")
        led.set_budget("d", eps=12.0, delta=DELTA)  # the CLI default: back to classic
        changes = led.budget_changes("d")
        assert [c["change"] for c in changes] == ["initial", "changed", "unchanged", "changed"]
        assert [c["conversion"] for c in changes] == ["classic", "tight", "tight", "classic"]
        assert changes[0]["previous"] is None and changes[0]["spent_eps"] == 0.0
        assert changes[1]["previous"] == {
            "eps": 10.0,
            "delta": DELTA,
            "basis": "data-independent",
            "conversion": "classic",
        }
        assert changes[1]["reason"] == "the runs use tight"
        assert changes[1]["spent_eps"] == pytest.approx(TIGHT, rel=1e-12)
        assert changes[3]["spent_eps"] == pytest.approx(CLASSIC, rel=1e-12)
        assert led.summary("d")["budget_changes"] == changes
        detail = [a["detail"] for a in led.audit_log("d") if a["action"] == "set-budget"][1]
        assert detail["conversion"] == "tight" and detail["previous"]["conversion"] == "classic"


def test_linked_datasets_are_each_checked_with_their_own_conversion(path):
    with Ledger(path) as led:
        # X judges with classic, Y with tight, same eps: Y's charge fits Y, not X.
        led.set_budget(A, eps=BETWEEN, delta=DELTA, name="x")
        led.set_budget(B, eps=BETWEEN, delta=DELTA, conversion="tight", name="y")
        led.link("x", "y")
        with pytest.raises(BudgetExceededError, match=r"spend of dataset x.*classic conversion"):
            led.charge("y", [event_of(CURVE)])
        with pytest.raises(BudgetExceededError, match=r"spend of dataset x.*classic conversion"):
            led.reserve("y", orders=ORDERS, rdp=CURVE)
        assert led.events("y") == []
        cons = {c["name"]: c for c in led.constraints("y", orders=ORDERS)}
        assert cons["x"]["budget"].conversion == "classic" and cons["x"]["linked"]
        assert cons["y"]["budget"].conversion == "tight" and not cons["y"]["linked"]

    other = path.with_name("other.sqlite3")
    with Ledger(other) as led:
        # X judges with tight, Y with classic and room to spare: Y's charge fits both.
        led.set_budget(A, eps=BETWEEN, delta=DELTA, conversion="tight", name="x")
        led.set_budget(B, eps=10.0, delta=DELTA, name="y")
        led.link("x", "y")
        res = led.reserve("y", orders=ORDERS, rdp=CURVE)
        res.commit([event_of(CURVE)])
        sy = led.summary("y")
        assert sy["spent"] == pytest.approx(CLASSIC, rel=1e-12)
        assert sy["linked"][0]["spent_and_reserved"] == pytest.approx(TIGHT, rel=1e-12)
        assert sy["linked"][0]["budget"]["conversion"] == "tight"
        assert sy["remaining_effective"] == pytest.approx(BETWEEN - TIGHT, rel=1e-12)
        assert sy["limited_by"] == led.resolve(A)
        sx = led.summary("x")
        assert sx["spent"] == pytest.approx(TIGHT, rel=1e-12)
        assert sx["linked"][0]["spent_and_reserved"] == pytest.approx(CLASSIC, rel=1e-12)
        assert led.history("x")[0]["eps"] == pytest.approx(TIGHT, rel=1e-12)
        assert led.history("y")[0]["eps"] == pytest.approx(CLASSIC, rel=1e-12)
        # what an online run on y must stay within: each budget with its own conversion
        for c in led.constraints("y", orders=ORDERS):
            spent = float(
                eps_from_rdp(
                    c["prior_rdp"],
                    orders=ORDERS,
                    delta=c["budget"].delta,
                    conversion=c["budget"].conversion,
                )[0]
            )
            assert spent == pytest.approx(TIGHT if c["name"] == "x" else CLASSIC, rel=1e-12)
        with pytest.raises(BudgetExceededError, match=r"spend of dataset x.*tight conversion"):
            led.charge("y", [event_of(CURVE)])


def test_cli_set_conversion_then_show_and_list(tmp_path, capsys):
    led_path = str(tmp_path / "cli.sqlite3")
    assert (
        cli_main(
            [
                "budget",
                "set",
                "--dataset",
                A,
                "--eps",
                "2",
                "--delta",
                "1e-5",
                "--conversion",
                "tight",
                "--name",
                "t",
                "--ledger",
                led_path,
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["conversion"] == "tight"
    assert (
        cli_main(
            [
                "budget",
                "set",
                "--dataset",
                B,
                "--eps",
                "2",
                "--delta",
                "1e-5",
                "--name",
                "c",
                "--ledger",
                led_path,
            ]
        )
        == 0
    )
    assert "classic conversion" in capsys.readouterr().out
    with Ledger(led_path) as led:
        led.charge("t", [event_of(CURVE)])
    assert cli_main(["budget", "show", "--dataset", "t", "--ledger", led_path, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["budget"] == {
        "eps": 2.0,
        "delta": 1e-5,
        "basis": "data-independent",
        "conversion": "tight",
        "relation": "add-remove",
    }
    assert shown["spent"] == pytest.approx(TIGHT, rel=1e-12)
    assert cli_main(["budget", "show", "--dataset", "t", "--ledger", led_path]) == 0
    assert "with the tight conversion" in capsys.readouterr().out
    assert cli_main(["budget", "list", "--ledger", led_path, "--json"]) == 0
    assert {r["name"]: r["conversion"] for r in json.loads(capsys.readouterr().out)} == {
        "t": "tight",
        "c": "classic",
    }
    assert cli_main(["budget", "list", "--ledger", led_path]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert "conversion" in listed[0]
    assert any(" t " in ln and "tight" in ln for ln in listed[1:])
    assert (
        cli_main(
            [
                "budget",
                "set",
                "--dataset",
                "t",
                "--eps",
                "2",
                "--delta",
                "1e-5",
                "--ledger",
                led_path,
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert cli_main(["budget", "show", "--dataset", "t", "--ledger", led_path]) == 0
    assert (
        "changed: eps=2 -> 2 (delta=1e-05 -> 1e-05, conversion tight -> classic)"
        in capsys.readouterr().out
    )
