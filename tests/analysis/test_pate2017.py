"""pate.analysis.pate2017 (the 2017 PATE moments accountant for LNMax) against the reference.

Reference values: the ``pate2017_analysis`` section of ../shared/golden/golden_public.json
(tensorflow/privacy research/pate_2017/analysis.py, see ../shared/golden/README.md). When that
file is absent (a user who cloned the repository alone) the tests use the compact copy
``tests/analysis/data/golden_pate2017.json``, which holds exactly the values used here. Rebuild
it from a checkout with ../shared beside it:

    .venv/bin/python tests/analysis/test_pate2017.py

Tolerance: 1e-10 relative, plus 1e-14 absolute for the log moments and sensitivities. The
reference evaluates log(t) with t = 1 + (tiny) in linear space and so loses up to ~1e-16 absolute
(2.6e-7 relative for moments ~4e-10); ours is evaluated in log-space and agrees with a 50-digit
mpmath evaluation to 1e-13 relative (``test_log_mgf_is_accurate_where_reference_loses_digits``).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pate import analysis
from pate.analysis.pate2017 import (
    _log_mgf_from_log_q,
    _sorted_shift_log_q,
    lnmax_log_mgf,
    lnmax_moments_accountant,
    lnmax_q_2017,
    lnmax_sens_at_k_2017,
    lnmax_smoothed_sensitivity_2017,
)

HERE = pathlib.Path(__file__).resolve().parent
FULL = HERE.parents[2] / "shared" / "golden" / "golden_public.json"
COMPACT = HERE / "data" / "golden_pate2017.json"
RTOL, ATOL = 1e-10, 1e-14


# --------------------------------------------------------------------------- golden values


def extract_compact(full: dict) -> dict:
    """The values these tests use: the pate2017 section (without printed stdout) + run_200 votes."""
    section = full["pate2017_analysis"]
    run_200 = next(r for r in full["confident_gnmax_runs"] if r["name"] == "run_200")
    return {
        "source": "golden_public.json, section pate2017_analysis (see ../shared/golden/README.md)",
        "single": section["single"],
        "runs": [
            {k: v for k, v in run.items() if k != "reference_stdout"} for run in section["runs"]
        ],
        "run_200_votes": run_200["votes"],
    }


def _load_golden() -> dict:
    if FULL.exists() and os.environ.get("PATE_GOLDEN") != "compact":
        with open(FULL) as f:
            return extract_compact(json.load(f))
    with open(COMPACT) as f:
        return json.load(f)


GOLDEN = _load_golden()
SINGLE = GOLDEN["single"]
RUNS = GOLDEN["runs"]
RUN_VOTES = np.array(GOLDEN["run_200_votes"], dtype=np.int64)


def _close(actual, expected, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(
        np.asarray(actual, float), np.asarray(expected, float), rtol=rtol, atol=atol
    )


def _case_id(case):
    return f"{case['name']}-eps{case['noise_eps']}"


def test_compact_copy_is_in_sync_with_full_golden():
    if not FULL.exists():
        pytest.skip("../shared/golden/golden_public.json not present")
    with open(FULL) as f:
        expected = extract_compact(json.load(f))
    with open(COMPACT) as f:
        assert json.load(f) == expected
    assert COMPACT.stat().st_size < 100_000


@pytest.mark.parametrize("case", SINGLE, ids=_case_id)
def test_single_query_matches_reference(case):
    votes = np.array([case["counts"]])
    gamma = case["noise_eps"]
    # compute_q_noisy_max / compute_q_noisy_max_approx (closed form: 1e-12).
    _close(lnmax_q_2017(votes, noise_eps=gamma), [case["q_noisy_max"]], rtol=1e-12, atol=0)
    _close(
        lnmax_q_2017(votes, noise_eps=gamma, approx=True),
        [case["q_noisy_max_approx"]],
        rtol=1e-12,
        atol=0,
    )
    # logmgf_from_counts for l = 1..8.
    _close(
        lnmax_log_mgf(votes, noise_eps=gamma, moments=case["moments"])[0],
        case["logmgf_from_counts"],
    )
    # Class 0 is the winner in every single-query case, so sens_at_k agrees with the reference.
    assert np.argmax(case["counts"]) == 0
    sens = np.array(
        [
            lnmax_sens_at_k_2017(votes, noise_eps=gamma, moment=l, k=np.arange(6))[0]
            for l in case["moments"]
        ]
    )
    _close(sens, case["sens_at_k_0_to_5"], atol=2 * ATOL)
    for l, row in zip(case["moments"], case["sens_at_k_0_to_5"]):
        scalar_k = [
            lnmax_sens_at_k_2017(votes, noise_eps=gamma, moment=l, k=k)[0] for k in range(6)
        ]
        _close(scalar_k, row, atol=2 * ATOL)
    smoothed = [
        lnmax_smoothed_sensitivity_2017(
            votes, noise_eps=gamma, moment=l, beta=case["smoothed_sens_beta"]
        )[0]
        for l in case["moments"]
    ]
    _close(smoothed, case["smoothed_sens"], atol=2 * ATOL)


def test_log_mgf_is_accurate_where_reference_loses_digits():
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 50
    for case in SINGLE[:4]:
        counts, gamma = case["counts"], mp.mpf(case["noise_eps"])
        w = int(np.argmax(counts))
        q = mp.fsum(
            [
                (gamma * (counts[w] - c) + 2) / (4 * mp.exp(gamma * (counts[w] - c)))
                for j, c in enumerate(counts)
                if j != w
            ]
        )
        eps = 2 * gamma
        exact = [
            min(
                mp.log((1 - q) * ((1 - q) / (1 - mp.exp(eps) * q)) ** l + q * mp.exp(eps * l)),
                eps * l,
                eps**2 * l * (l + 1) / 2,
            )
            for l in case["moments"]
        ]
        ours = lnmax_log_mgf(
            np.array([counts]), noise_eps=case["noise_eps"], moments=case["moments"]
        )[0]
        _close(ours, [float(x) for x in exact], rtol=1e-13, atol=0)


# --------------------------------------------------------------------------- whole runs


def _reference_smoothed_sensitivity(votes, gamma, moment, beta):
    """The reference's smoothed_sens, bug included (gap checked on the UNSORTED counts 0 and 1).

    Its sens_at_k(k) is 0 when counts[0] < counts[1] + k and otherwise the signed change of the
    moment bound after k + 1 versus k votes moved from the sorted winner to the sorted runner-up;
    its loop keeps the running max and stops at the first k >= 1 with sens_at_k == 0. After that
    point every change is <= 0 (the winner has flipped), so the result is
    max(sens(0), max over 1 <= k <= min(u, max count) of e^{-beta k} sens(k), 0 if u < max count),
    u = counts[0] - counts[1] (with only sens(0) = 0 and sens(1) = 0 when u < 0).
    """
    eps = 2.0 * gamma
    unsorted_gap = votes[:, 0] - votes[:, 1]
    k_max = max(int(unsorted_gap.max()), 0)
    ks = np.arange(k_max + 2)
    log_q = _sorted_shift_log_q(votes, gamma, ks)
    log_mgf = _log_mgf_from_log_q(log_q, eps, np.array([moment]))[..., 0]
    signed = log_mgf[:, 1:] - log_mgf[:, :-1]  # sens at k = 0..k_max
    k = ks[:-1][None, :]
    signed = np.where(unsorted_gap[:, None] < k, 0.0, signed)
    in_loop = k <= np.minimum(np.maximum(unsorted_gap, 0), votes.max(axis=1))[:, None]
    discounted = np.where(in_loop, np.exp(-beta * k) * signed, -np.inf)
    out = np.maximum(signed[:, 0], discounted[:, 1:].max(axis=1, initial=-np.inf))
    reaches_zero = np.maximum(unsorted_gap, 0) < votes.max(axis=1)
    return np.where(reaches_zero, np.maximum(out, 0.0), out)


@pytest.mark.parametrize("run", RUNS, ids=lambda r: f"eps{r['noise_eps']}")
def test_moments_accountant_matches_reference_main(run):
    out = lnmax_moments_accountant(
        RUN_VOTES,
        noise_eps=run["noise_eps"],
        delta=run["delta"],
        moments=run["moments"],
        beta=run["beta"],
    )
    assert out["num_queries"] == run["num_queries"] == RUN_VOTES.shape[0]
    _close(out["moments"], run["moments"], atol=0)
    _close(out["total_log_mgf"], run["total_log_mgf"], atol=0)
    _close(out["eps_per_moment"], run["eps_list"], atol=0)
    _close(out["eps"], run["eps"], atol=0)
    assert out["moment"] == run["moments"][int(np.argmin(run["eps_list"]))]
    _close(out["data_independent_eps"], run["data_independent_eps"], atol=0)
    _close(out["smooth_sensitivity_eps"], run["ss_eps"], atol=0)
    assert out["eps"] <= out["data_independent_eps"]
    # Smooth sensitivity: the reference's bug (unsorted gap check) makes it 0 or truncated on
    # rows whose class 0 is not the winner. A replica with the bug reproduces the reference's
    # totals; ours is never smaller, row by row, and equal where class 0 is the sole winner.
    c0_wins = RUN_VOTES[:, 0] > np.delete(RUN_VOTES, 0, axis=1).max(axis=1)
    assert 0 < c0_wins.sum() < RUN_VOTES.shape[0]
    replica_totals = []
    for l in run["moments"]:
        ours = lnmax_smoothed_sensitivity_2017(
            RUN_VOTES, noise_eps=run["noise_eps"], moment=l, beta=run["beta"]
        )
        replica = _reference_smoothed_sensitivity(RUN_VOTES, run["noise_eps"], l, run["beta"])
        assert np.all(ours >= replica - 1e-15)
        _close(ours[c0_wins], replica[c0_wins], atol=2 * ATOL)
        replica_totals.append(replica.sum())
    _close(replica_totals, run["total_smoothed_sens"], atol=1e-13)
    assert np.all(out["total_smoothed_sensitivity"] >= np.array(run["total_smoothed_sens"]))
    assert np.any(out["total_smoothed_sensitivity"] > np.array(run["total_smoothed_sens"]))
    _close(
        out["smoothed_sensitivity_per_moment"] * out["moments"],
        out["total_smoothed_sensitivity"],
        atol=0,
    )


def test_accountant_without_beta_and_defaults():
    out = lnmax_moments_accountant(RUN_VOTES, noise_eps=0.1, delta=1e-5)
    _close(out["moments"], np.arange(1, 9), atol=0)
    _close(out["eps"], RUNS[0]["eps"], atol=0)
    assert "total_smoothed_sensitivity" not in out
    assert not out["optimum_at_largest_moment"]
    # A single moment: the optimum is trivially the largest one.
    assert lnmax_moments_accountant(RUN_VOTES, noise_eps=0.1, delta=1e-5, moments=[3])[
        "optimum_at_largest_moment"
    ]


def test_q_agrees_with_rdp_module_lnmax_log_q():
    for gamma in (0.05, 0.1, 0.5):
        _close(
            np.log(lnmax_q_2017(RUN_VOTES, noise_eps=gamma)),
            analysis.lnmax_log_q(RUN_VOTES, scale=1.0 / gamma),
            rtol=1e-12,
            atol=1e-12,
        )


# --------------------------------------------------------------------------- properties


@st.composite
def vote_matrices(draw, max_teachers=60):
    seed = draw(st.integers(0, 2**32 - 1))
    n = draw(st.integers(1, 6))
    m = draw(st.integers(2, 6))
    teachers = draw(st.integers(1, max_teachers))
    concentration = draw(st.sampled_from([0.05, 0.3, 1.0, 5.0]))
    rng = np.random.default_rng(seed)
    return np.stack(
        [rng.multinomial(teachers, rng.dirichlet(np.full(m, concentration))) for _ in range(n)]
    ).astype(np.int64)


gammas = st.floats(0.005, 1.5)
small_gammas = st.floats(0.005, 0.34)  # the reference's own range (2 gamma < log 2)
MOMENTS = np.arange(1.0, 13.0)


@settings(max_examples=60, deadline=None)
@given(votes=vote_matrices(), gamma=gammas)
def test_log_mgf_bounded_by_data_independent_and_monotone_in_moment(votes, gamma):
    log_mgf = lnmax_log_mgf(votes, noise_eps=gamma, moments=MOMENTS)
    eps = 2 * gamma
    data_independent = np.minimum(0.5 * eps * eps * MOMENTS * (MOMENTS + 1), eps * MOMENTS)
    assert log_mgf.shape == (votes.shape[0], MOMENTS.size)
    assert np.all(log_mgf >= 0)
    assert np.all(log_mgf <= data_independent[None, :])
    assert np.all(np.diff(log_mgf, axis=1) >= -1e-15)
    q = lnmax_q_2017(votes, noise_eps=gamma)
    assert np.all((q >= 0) & (q <= 1 - 1 / votes.shape[1] + 1e-15))
    assert np.all(lnmax_q_2017(votes, noise_eps=gamma, approx=True) >= q * (1 - 1e-12))


@settings(max_examples=40, deadline=None)
@given(
    votes=vote_matrices(),
    gamma=gammas,
    moment=st.sampled_from([1, 2, 3.5, 8]),
    beta=st.floats(0.01, 0.5),
)
def test_vectorized_equals_per_row(votes, gamma, moment, beta):
    log_mgf = lnmax_log_mgf(votes, noise_eps=gamma, moments=MOMENTS)
    q = lnmax_q_2017(votes, noise_eps=gamma)
    sens = lnmax_sens_at_k_2017(votes, noise_eps=gamma, moment=moment, k=np.arange(8))
    smooth = lnmax_smoothed_sensitivity_2017(votes, noise_eps=gamma, moment=moment, beta=beta)
    assert sens.shape == (votes.shape[0], 8) and smooth.shape == (votes.shape[0],)
    for i in range(votes.shape[0]):
        row = votes[i : i + 1]
        np.testing.assert_array_equal(
            lnmax_log_mgf(row, noise_eps=gamma, moments=MOMENTS), log_mgf[i : i + 1]
        )
        np.testing.assert_array_equal(lnmax_q_2017(row, noise_eps=gamma), q[i : i + 1])
        np.testing.assert_array_equal(
            lnmax_sens_at_k_2017(row, noise_eps=gamma, moment=moment, k=np.arange(8)),
            sens[i : i + 1],
        )
        np.testing.assert_array_equal(
            lnmax_smoothed_sensitivity_2017(row, noise_eps=gamma, moment=moment, beta=beta),
            smooth[i : i + 1],
        )
    # Smooth sensitivity dominates the sensitivity at distance 0; sensitivities are >= 0.
    assert np.all(sens >= 0)
    assert np.all(smooth >= sens[:, 0])
    # Permuting the classes changes neither the sorted-count sensitivities nor q.
    perm = np.random.default_rng(0).permutation(votes.shape[1])
    _close(
        lnmax_smoothed_sensitivity_2017(votes[:, perm], noise_eps=gamma, moment=moment, beta=beta),
        smooth,
        rtol=1e-12,
        atol=1e-15,
    )
    _close(lnmax_q_2017(votes[:, perm], noise_eps=gamma), q, rtol=1e-12, atol=0)


def _reference_log_mgf_scalar(counts, gamma, l):
    """The reference's logmgf_from_counts written out for one histogram (for gamma < 0.35)."""
    w = int(np.argmax(counts))
    q = sum(
        (gamma * (counts[w] - c) + 2.0) / (4.0 * math.exp(gamma * (counts[w] - c)))
        for j, c in enumerate(counts)
        if j != w
    )
    q = min(q, 1.0 - 1.0 / len(counts))
    eps = 2.0 * gamma
    log_t = eps * l
    if q < 0.5:
        log_t = math.log((1 - q) * ((1 - q) / (1 - math.exp(eps) * q)) ** l + q * math.exp(eps * l))
    return min(0.5 * eps * eps * l * (l + 1), log_t, eps * l)


@settings(max_examples=60, deadline=None)
@given(votes=vote_matrices(), gamma=small_gammas)
def test_log_mgf_equals_reference_formula_in_reference_range(votes, gamma):
    ours = lnmax_log_mgf(votes, noise_eps=gamma, moments=MOMENTS)
    expected = [
        [_reference_log_mgf_scalar(row.tolist(), gamma, l) for l in MOMENTS] for row in votes
    ]
    _close(ours, expected, rtol=1e-9, atol=1e-13)


@settings(max_examples=40, deadline=None)
@given(
    votes=vote_matrices(),
    gamma=small_gammas,
    moment=st.sampled_from([1, 2, 5, 8]),
    beta=st.floats(0.01, 0.5),
)
def test_smoothed_sensitivity_never_below_reference(votes, gamma, moment, beta):
    ours = lnmax_smoothed_sensitivity_2017(votes, noise_eps=gamma, moment=moment, beta=beta)
    replica = _reference_smoothed_sensitivity(votes, gamma, moment, beta)
    assert np.all(ours >= replica - 1e-15)
    sens = lnmax_sens_at_k_2017(votes, noise_eps=gamma, moment=moment, k=np.arange(5))
    gap = votes[:, 0] - votes[:, 1]
    for k in range(5):  # reference's sens_at_k is 0 wherever its unsorted gap check fails
        assert np.all(sens[gap < k, k] >= 0)


def test_theorem3_range_for_large_noise_eps():
    # gamma >= log(2)/2: the reference's q < 1/2 is not valid; only q < 1/(e^eps + 1) is used.
    gamma = 0.5
    eps = 2 * gamma
    limit = 1 / (math.exp(eps) + 1)  # 0.2689
    votes = np.array([[10, 9, 0], [12, 7, 0], [19, 0, 0]])  # q = 0.391, 0.095, tiny
    q = lnmax_q_2017(votes, noise_eps=gamma)
    assert q[0] > limit > q[1]
    log_mgf = lnmax_log_mgf(votes, noise_eps=gamma, moments=[2.0])[:, 0]
    cap = min(0.5 * eps * eps * 2 * 3, eps * 2)
    assert log_mgf[0] == cap
    assert log_mgf[1] < cap and log_mgf[2] < log_mgf[1]


def test_theorem3_bound_non_decreasing_up_to_one_half():
    # Numerical companion of the proof in pate.analysis.pate2017._q_limit: for eps < log 2 and
    # l >= 1, f(q) = (1-q)((1-q)/(1-e^eps q))^l + q e^{eps l} does not decrease on [0, 1/2).
    q = np.linspace(0.0, 0.4999, 4001)[:, None]
    for eps in (0.01, 0.1, 0.3, 0.6, 0.69):
        for l in (1.0, 1.5, 2.0, 5.0, 30.0):
            f = (1 - q) * ((1 - q) / (1 - math.exp(eps) * q)) ** l + q * math.exp(eps * l)
            assert np.all(np.diff(f[:, 0]) >= -1e-12 * f[1:, 0])


def test_theorem3_bound_is_discarded_beyond_paper_condition():
    # For 1/(e^eps + 1) <= q < min(1/2, e^-eps) the Theorem 3 value is >= eps l, so the min with
    # eps l makes the reference's q < 1/2 and the paper's condition give the same result.
    for eps in (0.02, 0.2, 0.6, 1.0, 2.0):
        lo, hi = 1 / (math.exp(eps) + 1), min(0.5, math.exp(-eps))
        q = np.linspace(lo, hi, 202)[:-1][:, None]
        l = np.array([1.0, 2.0, 4.0, 8.0, 30.0])[None, :]
        f = (1 - q) * ((1 - q) / (1 - math.exp(eps) * q)) ** l + q * np.exp(eps * l)
        assert np.all(np.log(f) >= eps * l * (1 - 1e-12))


def test_l_too_large_gives_trivial_bound_not_zero():
    votes = np.array([[40, 2, 0], [30, 12, 0]])
    gamma, moment = 0.3, 8.0  # gamma l / 2 = 1.2 > 1
    cap = min(0.5 * 0.36 * 8 * 9, 0.6 * 8)
    _close(lnmax_sens_at_k_2017(votes, noise_eps=gamma, moment=moment, k=3), [cap, cap], atol=0)
    _close(
        lnmax_smoothed_sensitivity_2017(votes, noise_eps=gamma, moment=moment, beta=0.1),
        [cap, cap],
        atol=0,
    )


def test_large_gaps_do_not_overflow():
    votes = np.array([[100000, 0], [50000, 50000]])
    q = lnmax_q_2017(votes, noise_eps=1.0)
    assert q[0] == 0.0 and q[1] == 0.5
    assert np.all(np.isfinite(lnmax_log_mgf(votes, noise_eps=1.0, moments=[1, 2])))


# --------------------------------------------------------------------------- validation

GOOD = np.array([[5, 3, 2], [9, 1, 0]])


@pytest.mark.parametrize(
    "call, exc, words",
    [
        (lambda: lnmax_q_2017(GOOD, noise_eps=0), ValueError, "noise_eps"),
        (lambda: lnmax_q_2017(GOOD, noise_eps="0.1"), TypeError, "noise_eps"),
        (lambda: lnmax_q_2017(GOOD, noise_eps=0.1, approx="yes"), TypeError, "approx"),
        (lambda: lnmax_q_2017(np.array([5, 3, 2]), noise_eps=0.1), ValueError, "votes"),
        (lambda: lnmax_q_2017(np.array([[5, 3], [1, 1]]), noise_eps=0.1), ValueError, "votes"),
        (lambda: lnmax_log_mgf(GOOD, noise_eps=0.1, moments=[0.5, 2]), ValueError, "moments"),
        (lambda: lnmax_log_mgf(GOOD, noise_eps=0.1, moments=[]), ValueError, "moments"),
        (lambda: lnmax_log_mgf(GOOD, noise_eps=0.1, moments=[[1, 2]]), ValueError, "moments"),
        (lambda: lnmax_log_mgf(GOOD, noise_eps=0.1, moments=None), TypeError, "moments"),
        (lambda: lnmax_log_mgf(GOOD, noise_eps=0.1, moments=[1, np.nan]), ValueError, "moments"),
        (lambda: lnmax_moments_accountant(GOOD, noise_eps=0.1, delta=1.0), ValueError, "delta"),
        (
            lambda: lnmax_moments_accountant(GOOD, noise_eps=0.1, delta=1e-5, beta=-1),
            ValueError,
            "beta",
        ),
        (lambda: lnmax_sens_at_k_2017(GOOD, noise_eps=0.1, moment=2, k=-1), ValueError, "k"),
        (lambda: lnmax_sens_at_k_2017(GOOD, noise_eps=0.1, moment=2, k=1.5), TypeError, "k"),
        (
            lambda: lnmax_sens_at_k_2017(GOOD, noise_eps=0.1, moment=2, k=np.array([0, -2])),
            ValueError,
            "k",
        ),
        (lambda: lnmax_sens_at_k_2017(GOOD, noise_eps=0.1, moment=0.5, k=1), ValueError, "moment"),
        (lambda: lnmax_sens_at_k_2017(GOOD, noise_eps=0.1, moment=True, k=1), TypeError, "moment"),
        (
            lambda: lnmax_smoothed_sensitivity_2017(GOOD, noise_eps=0.1, moment=2, beta=0),
            ValueError,
            "beta",
        ),
    ],
)
def test_bad_input_is_refused_with_the_argument_named(call, exc, words):
    with pytest.raises(exc, match=words):
        call()


def test_numeric_parameters_are_keyword_only():
    with pytest.raises(TypeError):
        lnmax_q_2017(GOOD, 0.1)
    with pytest.raises(TypeError):
        lnmax_moments_accountant(GOOD, 0.1, 1e-5)


def _write_compact() -> None:
    with open(FULL) as f:
        compact = extract_compact(json.load(f))
    text = json.dumps(compact, separators=(",", ":"))
    fd, tmp = tempfile.mkstemp(dir=COMPACT.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, COMPACT)
    print(f"wrote {COMPACT} ({len(text)} bytes)")


if __name__ == "__main__":
    _write_compact()
