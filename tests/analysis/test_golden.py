"""analysis/ against the reference values of the Scalable-PATE analysis (../shared/golden).

Tolerance: 1e-10 relative (1e-9 for local sensitivities near the q0 plateau, whose boundary comes
from a Brent root). Where pate-learn deliberately differs from the reference (a reference bug that
would understate a sensitivity) the test asserts the documented difference instead.
"""

from __future__ import annotations

import numpy as np
import pytest

from pate import analysis
from pate.analysis.rdp import rdp_gaussian_from_log_q
from pate.analysis.sanitized_release import _run_cost_and_ls
from pate.analysis.sensitivity import _log_q1


def _load_golden_module():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).with_name("golden.py")
    spec = importlib.util.spec_from_file_location("pate_tests_golden", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


golden_module = _load_golden_module()

GOLDEN, SOURCE = golden_module.load()
ORDERS = analysis.REFERENCE_ORDERS
OI = np.array(GOLDEN["order_index"])
RTOL = 1e-10
DELTA = 1e-5


def close(actual, expected, rtol=RTOL):
    np.testing.assert_allclose(
        np.asarray(actual, dtype=float), np.asarray(expected, dtype=float), rtol=rtol, atol=0
    )


def test_source_and_orders():
    assert SOURCE in ("full", "compact")
    np.testing.assert_array_equal(ORDERS[OI], GOLDEN["orders"])
    assert ORDERS.size == 298 and ORDERS[197] == 100.5 and ORDERS[198] == 100.0


@pytest.mark.skipif(SOURCE != "full", reason="needs ../shared/golden/golden_public.json")
def test_shipped_compact_copy_matches_the_full_file():
    import gzip
    import json

    with golden_module.FULL.open() as fh:
        expected = golden_module.compact(
            json.load(fh),
            golden_module.COMPACT_ORDER_STEP,
            golden_module.COMPACT_DISTANCE_STEP,
            golden_module.COMPACT_QUERY_ROWS,
            golden_module.COMPACT_CUMULATIVE_STEP,
        )
    with gzip.open(golden_module.COMPACT, "rt") as fh:
        assert json.load(fh) == expected


def ids(cases, *keys):
    return ["-".join(str(c[k]) for k in keys) for c in cases]


# ------------------------------------------------------------------ (a) single GNMax queries

GNMAX = GOLDEN["gnmax_single_query"]


@pytest.mark.parametrize("case", GNMAX, ids=ids(GNMAX, "name", "sigma"))
def test_gnmax_single_query(case):
    votes = np.array([case["counts"]])
    sigma = case["sigma"]
    close(analysis.gnmax_log_q(votes, sigma=sigma), [case["logq"]])
    dep = analysis.gnmax_rdp(votes, sigma=sigma, orders=ORDERS)[0]
    ind = analysis.gnmax_rdp(votes, sigma=sigma, orders=ORDERS, data_dependent=False)[0]
    close(dep[OI], case["rdp_data_dependent"])
    close(ind[OI], case["rdp_data_independent"])
    eps, order = analysis.eps_from_rdp(dep, orders=ORDERS, delta=DELTA)
    close(eps, case["eps_dep_delta1e-5"])
    assert order == case["order_dep_delta1e-5"]
    eps, order = analysis.eps_from_rdp(ind, orders=ORDERS, delta=DELTA)
    close(eps, case["eps_ind_delta1e-5"])
    assert order == case["order_ind_delta1e-5"]


@pytest.mark.parametrize(
    "case",
    GOLDEN["rdp_gaussian_logq_grid"],
    ids=ids(GOLDEN["rdp_gaussian_logq_grid"], "logq", "sigma"),
)
def test_rdp_gaussian_on_logq_grid(case):
    rdp = rdp_gaussian_from_log_q(np.array([case["logq"]]), case["sigma"], ORDERS)[0]
    close(rdp[OI], case["rdp_gaussian"])


@pytest.mark.parametrize(
    "case",
    GOLDEN["gnmax_is_data_independent_always_opt"],
    ids=ids(GOLDEN["gnmax_is_data_independent_always_opt"], "sigma"),
)
def test_gnmax_data_independent_always_optimal(case):
    unanimous = np.zeros((1, case["num_classes"]), dtype=int)
    unanimous[0, 0] = case["num_teachers"]
    dep = analysis.gnmax_rdp(unanimous, sigma=case["sigma"], orders=ORDERS)[0]
    np.testing.assert_array_equal(
        np.isclose(dep, ORDERS / case["sigma"] ** 2)[OI], case["per_order"]
    )


@pytest.mark.parametrize(
    "case",
    GOLDEN["threshold_is_data_independent_always_opt"],
    ids=ids(GOLDEN["threshold_is_data_independent_always_opt"], "threshold", "sigma1"),
)
def test_threshold_data_independent_always_optimal(case):
    n = case["num_teachers"]
    extremes = np.array([[0, n], [n, 0]])  # max vote 0 is only reachable with a baseline
    baseline = np.array([[0.0, float(n)], [0.0, 0.0]])
    dep = analysis.threshold_rdp(
        extremes,
        threshold=case["threshold"],
        sigma=case["sigma1"],
        orders=ORDERS,
        baseline=baseline,
    )
    ind = ORDERS / (2 * case["sigma1"] ** 2)
    expected = np.isclose(dep[0], ind) & np.isclose(dep[1], ind)
    np.testing.assert_array_equal(
        expected[OI], case["is_data_independent_always_opt_threshold_per_order"]
    )


THRESHOLD = GOLDEN["threshold_single_query"]


@pytest.mark.parametrize("case", THRESHOLD, ids=ids(THRESHOLD, "name", "threshold", "sigma1"))
def test_threshold_single_query(case):
    votes = np.array([case["counts"]])
    kw = dict(threshold=case["threshold"], sigma=case["sigma1"])
    log_pr = analysis.threshold_log_pr_answered(votes, **kw)
    close(log_pr, [case["logpr_answered"]])
    close(np.exp(log_pr), [case["pr_answered"]])
    close(
        analysis.threshold_rdp(votes, orders=ORDERS, **kw)[0][OI],
        case["rdp_threshold_data_dependent"],
    )
    close(
        analysis.threshold_rdp(votes, orders=ORDERS, data_dependent=False, **kw)[0][OI],
        case["rdp_threshold_data_independent"],
    )


LNMAX = GOLDEN["lnmax_single_query"]


@pytest.mark.parametrize("case", LNMAX, ids=ids(LNMAX, "name", "lambda"))
def test_lnmax_single_query(case):
    votes = np.array([case["counts"]])
    assert case["pure_eps"] == pytest.approx(2 / case["lambda"], rel=1e-15)
    close(analysis.lnmax_log_q(votes, scale=case["lambda"]), [case["logq"]])
    close(
        analysis.lnmax_rdp(votes, scale=case["lambda"], orders=ORDERS)[0][OI], case["rdp_pure_eps"]
    )


# ------------------------------------------------------------------ (b) whole Confident-GNMax runs

RUNS = GOLDEN["confident_gnmax_runs"]


def run_kwargs(run):
    return dict(threshold=run["threshold"], sigma1=run["sigma1"], sigma2=run["sigma2"])


@pytest.mark.parametrize("run", RUNS, ids=ids(RUNS, "name"))
def test_run_expected_cost(run):
    votes = np.array(run["votes"])
    dd = run["data_dependent"]
    total = analysis.confident_gnmax_rdp(votes, orders=ORDERS, **run_kwargs(run))
    close(total[OI], dd["rdp_total"])
    step1 = analysis.threshold_rdp(
        votes, threshold=run["threshold"], sigma=run["sigma1"], orders=ORDERS
    ).sum(axis=0)
    close(step1[OI], dd["rdp_total_step1_threshold"])
    close((total - step1)[OI], dd["rdp_total_step2_gnmax_weighted_by_pr_answered"], rtol=1e-9)
    pr = np.exp(
        analysis.threshold_log_pr_answered(votes, threshold=run["threshold"], sigma=run["sigma1"])
    )
    close(pr.sum(), dd["expected_answered"])
    eps, order = analysis.eps_from_rdp(total, orders=ORDERS, delta=DELTA)
    close(eps, dd["eps"])
    assert (
        order == dd["order_opt"]
        and int(np.argmin(total - np.log(DELTA) / (ORDERS - 1))) == dd["order_opt_index"]
    )
    eps8, order8 = analysis.eps_from_rdp(total, orders=ORDERS, delta=1e-8)
    close(eps8, dd["eps_delta_1e-8"])
    assert order8 == dd["order_opt_delta_1e-8"]

    di = run["data_independent"]
    total_ind = analysis.confident_gnmax_rdp(
        votes, orders=ORDERS, data_dependent=False, **run_kwargs(run)
    )
    close(total_ind[OI], di["rdp_total"])
    eps, order = analysis.eps_from_rdp(total_ind, orders=ORDERS, delta=DELTA)
    close(eps, di["eps"])
    assert order == di["order_opt"]


@pytest.mark.parametrize("run", RUNS, ids=ids(RUNS, "name"))
def test_run_per_query(run):
    pq = run["per_query"]
    rows = len(pq["logpr_answered"])
    votes = np.array(run["votes"])[:rows]
    log_pr = analysis.threshold_log_pr_answered(
        votes, threshold=run["threshold"], sigma=run["sigma1"]
    )
    close(log_pr, pq["logpr_answered"])
    close(np.exp(log_pr), pq["pr_answered"])
    close(analysis.gnmax_log_q(votes, sigma=run["sigma2"]), pq["logq_gnmax"])
    sel = np.array(pq["selected_order_indices"])
    step1 = analysis.threshold_rdp(
        votes, threshold=run["threshold"], sigma=run["sigma1"], orders=ORDERS
    )
    step2 = analysis.gnmax_rdp(votes, sigma=run["sigma2"], orders=ORDERS)
    close(step1[:, sel], pq["rdp_step1_threshold_at_selected_orders"])
    close(step2[:, sel], pq["rdp_step2_gnmax_at_selected_orders"])
    for curve in pq["full_order_curves_first_5_queries"]:
        i = curve["query_index"]
        close(step1[i][OI], curve["rdp_step1"])
        close(step2[i][OI], curve["rdp_step2"])
        close((step1[i] + np.exp(log_pr[i]) * step2[i])[OI], curve["rdp_query"])


@pytest.mark.parametrize("run", RUNS, ids=ids(RUNS, "name"))
def test_run_realised_cost_of_a_sampled_run(run):
    votes = np.array(run["votes"])
    sampled = run["sampled"]
    answered = np.array([c == "1" for c in sampled["answered_mask"]])
    assert answered.sum() == sampled["num_answered"]
    total = analysis.confident_gnmax_rdp(votes, orders=ORDERS, answered=answered, **run_kwargs(run))
    close(total[OI], sampled["rdp_total"])
    eps, order = analysis.eps_from_rdp(total, orders=ORDERS, delta=DELTA)
    close(eps, sampled["eps"])
    assert order == sampled["order_opt"]
    event = analysis.confident_gnmax_event(
        votes, answered=answered, orders=ORDERS, **run_kwargs(run)
    )
    np.testing.assert_array_equal(event.rdp, total)


@pytest.mark.parametrize("run", RUNS, ids=ids(RUNS, "name"))
def test_run_cumulative_epsilons(run):
    """rdp_cumulative.run_analysis (delta 1e-8): eps after every query, vectorized with cumsum."""
    cum = run["rdp_cumulative_run_analysis"]
    votes = np.array(run["votes"])
    idx = np.array(cum["query_index"])
    step1 = analysis.threshold_rdp(
        votes, threshold=run["threshold"], sigma=run["sigma1"], orders=ORDERS
    )
    step2 = analysis.gnmax_rdp(votes, sigma=run["sigma2"], orders=ORDERS)
    pr = np.exp(
        analysis.threshold_log_pr_answered(votes, threshold=run["threshold"], sigma=run["sigma1"])
    )
    prefix = np.cumsum(step1 + pr[:, None] * step2, axis=0)
    eps, order = analysis.eps_from_rdp(prefix, orders=ORDERS, delta=cum["delta"])
    close(eps[idx], cum["gnmax_conf_eps_cumulative"], rtol=1e-9)
    np.testing.assert_array_equal(order[idx], cum["gnmax_conf_order_opt_cumulative"])
    close(np.cumsum(pr)[idx], cum["gnmax_conf_expected_answered_cumulative"])
    eps, order = analysis.eps_from_rdp(np.cumsum(step2, axis=0), orders=ORDERS, delta=cum["delta"])
    close(eps[idx], cum["gnmax_plain_sigma2_eps_cumulative"], rtol=1e-9)
    np.testing.assert_array_equal(order[idx], cum["gnmax_plain_sigma2_order_opt_cumulative"])


@pytest.mark.parametrize("run", RUNS, ids=ids(RUNS, "name"))
def test_run_smooth_sensitivity_search(run):
    ss = run["smooth_sensitivity"]
    votes = np.array(run["votes"])
    found = analysis.search_smooth_sensitivity_parameters(
        votes, order=ss["order"], num_teachers=run["num_teachers"], delta=DELTA, **run_kwargs(run)
    )
    assert found["data_independent_step1"] == ss["is_data_ind_step1"]
    assert found["data_independent_step2"] == ss["is_data_ind_step2"]
    close(found["beta"], ss["beta_opt"])
    close(found["smooth_sensitivity"], ss["ss_opt"])
    close(found["sigma_ss"], ss["sigma_ss_opt"])
    close(found["eps_before"], ss["eps_before_ss"])
    close(found["eps_after"], ss["eps_with_ss"])
    close(found["rdp"], ss["rdp_cum_at_order_scalar_path"])
    close(
        analysis.gnss_rdp(beta=found["beta"], sigma_ss=found["sigma_ss"], order=ss["order"]),
        ss["rdp_of_gnss_release"],
    )
    close(found["smooth_sensitivity"] * found["sigma_ss"], ss["ss_noise_std"])
    assert analysis.check_conditions(
        sigma=run["sigma2"], num_classes=run["num_classes"], order=ss["order"]
    ) == (ss["C5"], ss["C6"])
    # The expected local sensitivity summed over the run, at every kept distance.
    pr = np.exp(
        analysis.threshold_log_pr_answered(votes, threshold=run["threshold"], sigma=run["sigma1"])
    )
    _, ls_cum, _, _ = _run_cost_and_ls(
        votes,
        run["num_teachers"],
        run["threshold"],
        run["sigma1"],
        run["sigma2"],
        ss["order"],
        None,
        pr,
    )
    d = np.array(ss["distance_index"])
    if ss["is_data_ind_step1"]:
        close(ls_cum[d], ss["ls_cum_final"], rtol=1e-9)
    else:  # the reference leaves LS_thr(max(c, N - c)) at 0; ours fills it: never smaller
        assert np.all(ls_cum[d] >= np.array(ss["ls_cum_final"]) * (1 - 1e-9))


def test_sigma2_sweep():
    sweep = GOLDEN["sigma2_sweep_on_run_200"]
    run = next(r for r in RUNS if r["name"] == "run_200")
    votes = np.array(run["votes"])
    dependent = []
    for point in sweep["points"]:
        kw = dict(
            threshold=sweep["threshold"],
            sigma1=sweep["sigma1"],
            sigma2=point["sigma2"],
            orders=ORDERS,
        )
        eps, order = analysis.eps_from_rdp(
            analysis.confident_gnmax_rdp(votes, **kw), orders=ORDERS, delta=DELTA
        )
        close(eps, point["eps_data_dependent"])
        assert order == point["order_dep"]
        eps_i, order_i = analysis.eps_from_rdp(
            analysis.confident_gnmax_rdp(votes, data_dependent=False, **kw),
            orders=ORDERS,
            delta=DELTA,
        )
        close(eps_i, point["eps_data_independent"])
        assert order_i == point["order_ind"]
        dependent.append(eps)
    # A genuine property of the bound (README "expected failure"): not monotone in sigma2.
    assert np.any(np.diff(dependent) > 0)


# ------------------------------------------------------------------ (c) smooth sensitivity

SINGLE = GOLDEN["smooth_sensitivity_single_query"]


@pytest.mark.parametrize("case", SINGLE, ids=ids(SINGLE, "name", "sigma2", "order"))
def test_local_and_smooth_sensitivity_single_query(case):
    votes = np.array([case["counts"]])
    n_teachers, sigma2, order = case["num_teachers"], case["sigma2"], case["order"]
    close(analysis.gnmax_log_q0(sigma=sigma2, order=order), case["logq0_gnmax"], rtol=1e-11)
    close(_log_q1(sigma2, order, votes.shape[1]), case["logq1_gnmax"], rtol=1e-11)
    close(analysis.gnmax_rdp(votes, sigma=sigma2, orders=[order])[0, 0], case["rdp_gnmax_at_order"])
    d = np.array(case["distance_index"])
    ls_g = analysis.local_sensitivity_gnmax(
        votes, num_teachers=n_teachers, sigma=sigma2, order=order
    )[0]
    close(ls_g[d], case["local_sensitivity_gnmax_by_distance"], rtol=1e-9)
    ls_t = analysis.local_sensitivity_threshold(
        votes,
        num_teachers=n_teachers,
        threshold=case["threshold"],
        sigma=case["sigma1"],
        order=order,
    )[0]
    top = max(case["counts"])
    d_star = max(top, n_teachers - top)  # the one distance the reference leaves at 0
    keep = d != d_star
    close(ls_t[d][keep], np.array(case["local_sensitivity_threshold_by_distance"])[keep], rtol=1e-9)
    pr = np.exp(case["logpr_answered"])
    for i, beta in enumerate(case["betas"]):
        close(
            analysis.smooth_sensitivity(ls_g, beta=beta),
            case["smooth_sensitivity_gnmax"][i],
            rtol=1e-9,
        )
        extra = np.exp(-beta * d_star) * ls_t[d_star] if d_star < n_teachers else 0.0
        ours_t = analysis.smooth_sensitivity(ls_t, beta=beta)
        close(ours_t, max(case["smooth_sensitivity_threshold"][i], extra), rtol=1e-9)
        ours_c = analysis.smooth_sensitivity(ls_t + pr * ls_g, beta=beta)
        assert ours_c >= case["smooth_sensitivity_combined"][i] * (1 - 1e-9)
        expected_c = np.exp(-beta * np.arange(n_teachers)) * (ls_t + pr * ls_g)
        close(ours_c, expected_c.max())


@pytest.mark.parametrize(
    "case", GOLDEN["gnss_rdp"], ids=ids(GOLDEN["gnss_rdp"], "beta", "sigma_ss", "order")
)
def test_gnss_rdp(case):
    close(
        analysis.gnss_rdp(beta=case["beta"], sigma_ss=case["sigma_ss"], order=case["order"]),
        case["rdp"],
    )


@pytest.mark.parametrize(
    "case",
    GOLDEN["check_conditions_C5_C6"],
    ids=ids(GOLDEN["check_conditions_C5_C6"], "sigma", "order"),
)
def test_conditions_c5_c6(case):
    got = analysis.check_conditions(
        sigma=case["sigma"], num_classes=case["num_classes"], order=case["order"]
    )
    assert got == (case["C5"], case["C6"])


@pytest.mark.parametrize(
    "case",
    GOLDEN["compute_params_for_ss_release"],
    ids=ids(GOLDEN["compute_params_for_ss_release"], "eps", "delta"),
)
def test_smooth_sensitivity_dp_parameters(case):
    close(
        analysis.smooth_sensitivity_dp_parameters(eps=case["eps"], delta=case["delta"]),
        case["alpha_beta"],
    )
