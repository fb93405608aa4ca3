"""`pate analyze`: the privacy analysis of a vote matrix for every registered mechanism that
needs no student predictions (``compute(args)``: a JSON-able dict), or the analysis stage of a
run directory. No torch import: starts fast."""

from __future__ import annotations

import argparse
import json

from pate.analysis.errors import InputError


def add_parser(subparsers) -> None:
    from pate import mechanisms

    # the mechanisms it can analyse: those that need no student predictions
    names = [name for name, spec in mechanisms.REGISTRY.items() if not spec.needs_student]
    p = subparsers.add_parser(
        "analyze",
        help="data-independent and data-dependent epsilon of a vote matrix",
        description=(
            "Compute the Renyi-DP of the PATE aggregator on a saved vote matrix (queries x classes, "
            ".npy) and convert it to (eps, delta). Without --answered, Confident GNMax is charged "
            "its expected cost (Pr[answered]-weighted, as the reference scripts); with --answered "
            "(a boolean .npy mask of the queries actually answered) the realised cost. The "
            "data-dependent epsilon looks at the votes: it is NOT private to publish (see "
            "`analysis.release_sanitized_epsilon`). Without a threshold check (GNMax, LNMax) every "
            "query is answered."
        ),
    )
    p.add_argument(
        "--run-dir",
        help="run the analysis stage of a run directory instead "
        "(writes analysis.json, the same as `pate run`); then no other "
        "flag is needed",
    )
    p.add_argument("--votes", help="vote matrix (.npy, integer, queries x classes)")
    p.add_argument("--mechanism", choices=names)
    _add_noise_arguments(p, names)
    p.add_argument("--delta", type=float)
    p.add_argument("--answered", help="boolean mask of answered queries (.npy), realised cost")
    p.add_argument(
        "--orders",
        default="default",
        type=orders_flag,
        help="'default', 'reference' (the 298-order grid of the reference) or a "
        "comma-separated list of orders > 1",
    )
    p.add_argument(
        "--conversion",
        default="classic",
        choices=("classic", "tight"),
        help="RDP to (eps, delta) conversion (default: classic, as the reference)",
    )
    p.add_argument(
        "--smooth-sensitivity",
        action="store_true",
        help="also run the reference's (NON-private) smooth-sensitivity parameter "
        "search at the best order, to compare with published numbers "
        "(mechanisms with a threshold check and a smooth-sensitivity analysis, "
        "e.g. confident-gnmax)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.set_defaults(func=run)


def _add_noise_arguments(parser, names) -> None:
    """One ``--flag`` per noise parameter of the mechanisms ``names`` (from the registry),
    storing a float (default None) under the parameter's name."""
    from pate import mechanisms

    users: dict[str, list] = {}
    for spec in map(mechanisms.get, names):
        for param in spec.params:
            users.setdefault(param.name, []).append((spec, param))
    for name, pairs in users.items():
        spec, param = pairs[0]
        titles = ", ".join(s.title for s, _ in pairs)
        parser.add_argument(
            param.flag, dest=name, type=float, default=None, help=f"{titles}: {param.help}"
        )


def orders_flag(text: str):
    """An ``--orders`` value: "default", "reference" or a comma-separated list of orders."""
    if text in ("default", "reference"):
        return text
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be 'default', 'reference' or a comma-separated list of orders, got {text!r}"
        ) from None


def compute(args) -> dict:
    """The analysis behind the command, as a JSON-able dict."""
    import numpy as np

    from pate import analysis, mechanisms
    from pate.analysis import validation
    from pate.core.io import load_npy

    spec = mechanisms.get(args.mechanism)
    if isinstance(args.orders, str):
        orders_name = args.orders
        orders = analysis.DEFAULT_ORDERS if orders_name == "default" else analysis.REFERENCE_ORDERS
    else:
        orders_name, orders = "custom", validation.check_orders(np.array(args.orders), "--orders")
    delta = validation.check_delta(args.delta, "--delta")
    noise = {
        name: getattr(args, name) for name in mechanisms.all_param_names() if hasattr(args, name)
    }
    params = spec.validate(noise, prefix="--")
    release = spec.release_params(params)
    if args.smooth_sensitivity and (release is None or release["threshold"] is None):
        raise InputError(
            f"--smooth-sensitivity needs a mechanism with a threshold check and a "
            f"smooth-sensitivity analysis (e.g. confident-gnmax), not {spec.name}"
        )
    votes = validation.check_votes(load_npy(args.votes, what="--votes"), "--votes")
    n = votes.shape[0]
    answered = None
    if args.answered is not None:
        answered = validation.check_mask(
            load_npy(args.answered, what="--answered"), n, "--answered"
        )
        if spec.always_answers:
            raise InputError(
                f"--answered does not apply to --mechanism {spec.name}: it answers every query"
            )

    if spec.always_answers or answered is not None:
        # The realised cost: exactly the event the aggregator charges.
        mask = answered if answered is not None else np.ones(n, dtype=bool)
        event = spec.event(votes, params, answered=mask, orders=orders)
        dep, ind = event.rdp, event.rdp_data_independent
        answered_count = float(mask.sum())
        answered_kind = "all" if answered is None else "realised"
    else:
        dep = spec.expected_rdp(votes, params, orders=orders, data_dependent=True)
        ind = spec.expected_rdp(votes, params, orders=orders, data_dependent=False)
        answered_count = float(spec.pr_answered(votes, params).sum())
        answered_kind = "expected"

    eps_dep, order_dep = analysis.eps_from_rdp(
        dep, orders=orders, delta=delta, conversion=args.conversion
    )
    eps_ind, order_ind = analysis.eps_from_rdp(
        ind, orders=orders, delta=delta, conversion=args.conversion
    )
    result = {
        "mechanism": args.mechanism,
        "params": params,
        "delta": delta,
        "queries": n,
        "answered": answered_count,
        "answered_kind": answered_kind,
        "orders": orders_name,
        "conversion": args.conversion,
        "eps_data_independent": float(eps_ind),
        "order_data_independent": float(order_ind),
        "eps_data_dependent": float(eps_dep),
        "order": float(order_dep),
        "data_dependent_is_private": False,
    }
    if args.smooth_sensitivity:
        ss = analysis.search_smooth_sensitivity_parameters(
            votes, **release, order=float(order_dep), num_teachers=int(votes[0].sum()), delta=delta
        )
        result["smooth_sensitivity_search_not_private"] = {
            k: (None if isinstance(v, float) and v == float("inf") else v) for k, v in ss.items()
        }
    return result


def epsilon_summary(privacy: dict) -> str:
    """The epsilon figures of an analysis (``analysis.json``/``report.json`` ``privacy``) in one
    line: the guarantee, the data-independent epsilon and -- only where a sanitized
    data-dependent epsilon was released (and, in report.json, charged) -- that one."""
    text = (
        f"guarantee {privacy['eps_guarantee']:.4f}, data-independent "
        f"{privacy['eps_data_independent']:.4f}"
    )
    sanitized = privacy.get("sanitized") or {}
    if sanitized.get("fallback", "none") is None and "eps_sanitized" in privacy:
        return text + f", sanitized {privacy['eps_sanitized']:.4f}"
    return text + " (no sanitized release)"


def _run_stage(args: argparse.Namespace) -> int:
    """The analysis stage of a run directory (:func:`pate.run.stages.analysis_stage`)."""
    from pate.run import rundir, stages

    run = rundir.Run.open(args.run_dir, progress=False)
    info = stages.run_stage(run, "analysis")
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
        return 0
    from pate.core.io import read_json

    privacy = read_json(run.path(rundir.ANALYSIS), what="the analysis stage")["privacy"]
    print(f"analysis: eps {epsilon_summary(privacy)}; wrote {run.path(rundir.ANALYSIS)}")
    print(f"next: pate report {run.run_dir}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.run_dir is not None:
        given = [
            f"--{k}"
            for k in ("votes", "mechanism", "delta", "answered")
            if getattr(args, k) is not None
        ]
        if given:
            raise InputError(
                f"--run-dir analyses a run directory with its own config; drop {', '.join(given)}"
            )
        return _run_stage(args)
    missing = [f"--{k}" for k in ("votes", "mechanism", "delta") if getattr(args, k) is None]
    if missing:
        raise InputError(f"pass --run-dir RUN_DIR, or a vote matrix with {', '.join(missing)}")
    result = compute(args)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    kind = {
        "expected": "expected (Pr[answered]-weighted)",
        "realised": "realised (from --answered)",
        "all": "all",
    }[result["answered_kind"]]
    print(f"mechanism            {result['mechanism']} {result['params']}")
    print(f"queries              {result['queries']}, answered {result['answered']:.2f} ({kind})")
    print(
        f"delta                {result['delta']:g}   conversion {result['conversion']}, "
        f"orders {result['orders']}"
    )
    print(
        f"eps data-independent {result['eps_data_independent']:.6f} "
        f"(order {result['order_data_independent']:g})"
    )
    print(
        f"eps data-dependent   {result['eps_data_dependent']:.6f} (order {result['order']:g})  "
        "-- depends on the votes: NOT private to publish as is"
    )
    ss = result.get("smooth_sensitivity_search_not_private")
    if ss:
        print(
            f"smooth sensitivity   beta {ss['beta']:.6f}, SS {ss['smooth_sensitivity']:.6g}, "
            f"sigma_ss {ss['sigma_ss'] if ss['sigma_ss'] is not None else 'inf'}; "
            f"eps {ss['eps_before']:.6f} -> {ss['eps_after']:.6f} with the GNSS release "
            "(parameters searched on the votes: NOT private)"
        )
    return 0
