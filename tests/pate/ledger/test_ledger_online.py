"""The ledger with the online aggregator: reserve, answer against ``prior_rdp``, commit -- two runs
sharing one dataset both commit and together stay within the budget."""

from __future__ import annotations

import numpy as np
import pytest

from pate import mechanisms
from pate.analysis import DEFAULT_ORDERS, eps_from_rdp
from pate.core.online_aggregator import OnlineAggregator
from pate.ledger import Ledger, dataset_digest

DELTA = 1e-5
BUDGET = 4.0


def _votes(rng, n):
    top = rng.integers(150, 250, size=n)
    return np.stack([top, 250 - top, np.zeros(n, int)], axis=1)


def test_two_runs_with_reservations_share_the_budget_safely(tmp_path):
    rng = np.random.default_rng(3)
    with Ledger(tmp_path / "ledger.sqlite3") as led:
        led.set_budget(dataset_digest(np.arange(100)), eps=BUDGET, delta=DELTA, name="clinic")

        def aggregator(res):
            budget = res.budget
            return OnlineAggregator(
                "gnmax",
                sigma=40.0,
                budget_eps=budget.eps,
                delta=budget.delta,
                rng=np.random.default_rng(1),
                prior_rdp=res.prior_rdp(),
            )

        orders = DEFAULT_ORDERS  # the aggregators' default
        per_query = mechanisms.get("gnmax").worst_case_query_rdp({"sigma": 40.0}, orders=orders)
        run_a = led.reserve("clinic", orders=orders, rdp=20 * per_query, run_id="a")
        run_b = led.reserve("clinic", orders=orders, rdp=20 * per_query, run_id="b")

        # Run A goes far beyond its reservation but must leave run B's reservation untouched.
        agg_a = aggregator(run_a)
        result_a = agg_a.answer(_votes(rng, 2000))
        assert result_a.stop_reason is not None  # the budget, not the batch, ended it
        run_a.commit(agg_a.accountant.events)

        agg_b = aggregator(run_b)
        agg_b.answer(_votes(rng, 2000))
        run_b.commit(agg_b.accountant.events)

        asked_a, asked_b = agg_a.queries_asked, agg_b.queries_asked
        assert asked_a > 20 and asked_b >= 20, (asked_a, asked_b)  # B got at least its reservation
        s = led.summary("clinic")
        assert s["spent"] <= BUDGET and s["reservations"] == []
        # the budget was used: not even one more worst-case query fits
        total = led.prior_rdp("clinic", orders=orders)
        assert eps_from_rdp(total + per_query, orders=orders, delta=DELTA)[0] > BUDGET
        assert s["spent"] == pytest.approx(
            eps_from_rdp(total, orders=orders, delta=DELTA)[0], rel=1e-12
        )
        assert [e.run_id for e in led.events("clinic")] == ["a", "b"]
