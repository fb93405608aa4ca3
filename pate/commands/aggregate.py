"""`pate aggregate`: label the public queries from the teachers' votes, within a privacy budget.

Writes ``labels.npy`` ((queries,) int64, -1 = no label) and ``aggregate.json`` (the cost
summary and the realised privacy event) into the run directory, atomically. Prints the realised
data-independent and data-dependent epsilon. Votes are never printed. No torch import.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pate.commands import add_noise_arguments
from pate.io import atomic_save_npy, atomic_write_json

MECHANISMS = ("lnmax", "gnmax", "confident-gnmax")
LABELS_FILENAME = "labels.npy"
SUMMARY_FILENAME = "aggregate.json"

_PARAMS = {"lnmax": ("scale",), "gnmax": ("sigma",),
           "confident-gnmax": ("threshold", "sigma1", "sigma2")}


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "aggregate",
        help="noisy labels from the teachers' votes, stopping before the budget is exceeded",
        description=(
            "Answer the queries of a vote matrix (queries x classes, .npy) in order with a noisy "
            "aggregator, stopping cleanly before the (eps, delta) budget could be exceeded. The "
            "stopping rule uses the data-independent cost (private); the realised cost is charged "
            "(threshold check for every query asked, the GNMax step for answered ones). Writes "
            "labels.npy and aggregate.json into the run directory (default: the directory of "
            "--votes). The data-dependent epsilon is printed for information: it depends on the "
            "votes and is not private to publish."))
    p.add_argument("--votes", required=True, help="vote matrix (.npy), e.g. <run-dir>/votes.npy")
    p.add_argument("--mechanism", required=True, choices=MECHANISMS)
    add_noise_arguments(p)
    p.add_argument("--budget-eps", required=True, type=float, help="privacy budget epsilon")
    p.add_argument("--delta", required=True, type=float, help="privacy budget delta")
    p.add_argument("--budget-basis", default="data-independent",
                   choices=("data-independent", "data-dependent"),
                   help="cost that decides when to stop (data-dependent is NOT private: when it "
                        "stops leaks information about the votes)")
    p.add_argument("--conversion", default="classic", choices=("classic", "tight"),
                   help="RDP to (eps, delta) conversion")
    rnd = p.add_mutually_exclusive_group(required=True)
    rnd.add_argument("--seed", type=int, help="root seed (the noise uses its 'noise' stream)")
    rnd.add_argument("--secure", action="store_true", help="noise from OS entropy, no seed")
    p.add_argument("--run-dir", help="where to write labels.npy and aggregate.json "
                                     "(default: the directory of --votes)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace labels.npy/aggregate.json of an earlier run (its budget was "
                        "spent all the same)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.set_defaults(func=run)



def run(args: argparse.Namespace) -> int:
    import numpy as np

    from analysis.validation import check_int
    from pate.aggregators import OnlineAggregator
    from pate.rng import make_streams
    from pate.votes import describe_votes, load_votes

    # ---- validate everything before drawing noise or writing anything
    mechanism = args.mechanism
    given = {k: getattr(args, k) for k in ("scale", "sigma", "threshold", "sigma1", "sigma2")}
    missing = [k for k in _PARAMS[mechanism] if given[k] is None]
    if missing:
        raise ValueError(f"--mechanism {mechanism} needs "
                         + ", ".join(f"--{k}" for k in missing))
    foreign = [k for k, v in given.items() if v is not None and k not in _PARAMS[mechanism]]
    if foreign:
        raise ValueError(", ".join(f"--{k}" for k in foreign) + f" does not apply to {mechanism} "
                         f"(it takes {', '.join('--' + k for k in _PARAMS[mechanism])})")
    if args.seed is not None:
        check_int(args.seed, "--seed", minimum=0)
    votes_path = Path(args.votes)
    run_dir = Path(args.run_dir) if args.run_dir else votes_path.parent
    if not run_dir.is_dir():
        raise FileNotFoundError(f"--run-dir {str(run_dir)!r} is not a directory; create it or "
                                "pass the run directory that holds votes.npy")
    labels_path, summary_path = run_dir / LABELS_FILENAME, run_dir / SUMMARY_FILENAME
    existing = [str(p) for p in (labels_path, summary_path) if p.exists()]
    if existing and not args.overwrite:
        raise ValueError(f"{', '.join(existing)} already exist(s) from an earlier run (whose budget "
                         "is already spent); use a new --run-dir or --overwrite")
    votes = load_votes(votes_path)
    streams = make_streams(args.seed, secure=bool(args.secure))
    agg = OnlineAggregator(
        mechanism, budget_eps=args.budget_eps, delta=args.delta, rng=streams.noise,
        budget_basis=args.budget_basis.replace("-", "_"), conversion=args.conversion,
        **{k: given[k] for k in _PARAMS[mechanism]})

    if votes.shape[0]:
        one_query, _ = agg.worst_case_query_eps()
        if agg.budget_basis == "data_independent" and one_query > agg.budget_eps:
            from analysis.errors import BudgetExceededError
            raise BudgetExceededError(
                f"even one query could cost eps={one_query:.4g} at delta={agg.delta:g}, over "
                f"--budget-eps {agg.budget_eps:g}; nothing was asked. Use more noise or a larger "
                "budget", requested=float(one_query), remaining=agg.remaining_eps)

    # ---- answer (noise is drawn here)
    result = agg.answer(votes)
    if votes.shape[0] and result.num_asked == 0:
        from analysis.errors import BudgetExceededError
        raise BudgetExceededError(f"no query fits the budget: {result.stop_reason}; nothing was "
                                  "released or charged", remaining=agg.remaining_eps)

    summary = {
        "votes": str(votes_path), "votes_shape": describe_votes(votes),
        "labels": str(labels_path),
        "mechanism": mechanism, "params": agg.params,
        "budget_eps": agg.budget_eps, "delta": agg.delta,
        "budget_basis": args.budget_basis, "conversion": args.conversion,
        "seed": streams.seed, "secure": bool(args.secure),
        "queries": result.num_queries, "asked": result.num_asked,
        "answered": result.num_answered, "labelled": result.num_labelled,
        "stop_reason": result.stop_reason,
    }
    s = agg.summary()
    summary.update({k: s[k] for k in ("eps_data_independent", "order_data_independent",
                                      "eps_data_dependent", "order_data_dependent")})
    summary["eps_data_dependent_is_private"] = False
    summary["event"] = result.event.to_dict()

    atomic_save_npy(labels_path, np.asarray(result.labels, dtype=np.int64))
    atomic_write_json(summary_path, summary)

    if args.json:
        printed = {k: v for k, v in summary.items() if k != "event"}
        json.dump(printed, sys.stdout, indent=2)
        print()
        return 0
    print(f"{mechanism}: {summary['votes_shape']}; asked {result.num_asked}, answered "
          f"{result.num_answered}, labelled {result.num_labelled}")
    if result.stop_reason:
        print(f"stopped: {result.stop_reason}")
    print(f"realised eps at delta={agg.delta:g}: data-independent "
          f"{summary['eps_data_independent']:.4f} (order {summary['order_data_independent']:g}), "
          f"data-dependent {summary['eps_data_dependent']:.4f} "
          f"(order {summary['order_data_dependent']:g}; depends on the votes, not private to "
          "publish as is)")
    print(f"wrote {labels_path} and {summary_path}")
    return 0
