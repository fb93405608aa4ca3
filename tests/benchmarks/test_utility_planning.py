"""benchmarks/utility_planning.py: the data-dependent planning functions of an earlier version of
the utility benchmark, kept for benchmarks/aggregator_sweep.py."""

from __future__ import annotations

import numpy as np
import pytest

from pate import analysis


@pytest.fixture(scope="module")
def utility(load_benchmark):
    return load_benchmark("utility_planning")


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
