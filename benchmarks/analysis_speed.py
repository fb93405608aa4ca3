"""Benchmark: the whole Confident-GNMax analysis on 9000 queries (issue 2).

confident_gnmax_rdp (expected cost, answered=None) over the reference's 298 orders,
eps_from_rdp, then search_smooth_sensitivity_parameters at the best order, on
../shared/bench/votes_9000_250teachers.npy with T=200, sigma1=150, sigma2=40, delta=1e-5.

The reference implementation (tensorflow/privacy research/pate_2018, smooth_sensitivity_table.main)
takes a median of 15.55 s for this on a 2-core machine of this kind (measured by the golden-file
generator, ../shared/golden/README.md) and finds order 4, beta 0.075, SS 0.16877, sigma_ss 3.0197.

Run:  .venv/bin/python benchmarks/analysis_speed.py [--votes FILE] [--repeats 7]
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import time

import numpy as np

from pate import analysis

REFERENCE_SECONDS = 15.55
REPO = pathlib.Path(__file__).resolve().parents[1]


def run_once(votes: np.ndarray) -> dict:
    rdp = analysis.confident_gnmax_rdp(
        votes, threshold=200, sigma1=150, sigma2=40, orders=analysis.REFERENCE_ORDERS
    )
    eps, order = analysis.eps_from_rdp(rdp, orders=analysis.REFERENCE_ORDERS, delta=1e-5)
    ss = analysis.search_smooth_sensitivity_parameters(
        votes, threshold=200, sigma1=150, sigma2=40, order=order, num_teachers=250, delta=1e-5
    )
    return {"eps": float(eps), "order": float(order), **ss}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--votes", default=str(REPO.parent / "shared/bench/votes_9000_250teachers.npy")
    )
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    votes = np.load(args.votes)
    analysis.sensitivity._log_q0.cache_clear()
    analysis.sensitivity._threshold_ls_by_max_vote.cache_clear()
    times = []
    for _ in range(args.repeats):
        analysis.sensitivity._log_q0.cache_clear()
        analysis.sensitivity._threshold_ls_by_max_vote.cache_clear()
        start = time.perf_counter()
        result = run_once(votes)
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    print(
        f"queries={votes.shape[0]} teachers={int(votes[0].sum())} orders={analysis.REFERENCE_ORDERS.size}"
    )
    print(
        f"eps={result['eps']:.6f} at order={result['order']:g} "
        f"(E[answered]={result['expected_answered']:.2f})"
    )
    print(
        f"beta={result['beta']:.6f} smooth_sensitivity={result['smooth_sensitivity']:.6f} "
        f"sigma_ss={result['sigma_ss']:.6f} eps_before={result['eps_before']:.6f} "
        f"eps_after={result['eps_after']:.6f}"
    )
    print(
        f"time: median {median:.4f} s over {args.repeats} runs (min {min(times):.4f} s); "
        f"reference {REFERENCE_SECONDS} s on this machine kind -> {REFERENCE_SECONDS / median:.0f}x faster"
    )


if __name__ == "__main__":
    main()
