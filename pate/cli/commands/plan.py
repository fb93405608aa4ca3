"""`pate plan`: what `pate run` would do with a config, from the declared number of private
records and the public facts, before any model is trained or any budget spent (see
pate.run.planner)."""

from __future__ import annotations

import argparse
import json


def add_parser(subparsers) -> None:
    from pate.run.config import packaged_configs

    p = subparsers.add_parser(
        "plan",
        help="the plan of a run: teachers, noise, queries, the answers the budget buys; "
        "refused when it cannot give a useful student",
        description=(
            "Plan a run of `pate run` from the same config and flags: fill in what the config "
            "leaves to the planner ([partition] num_teachers, [aggregator] queries, the Confident "
            'GNMax threshold, mechanism = "auto"), check what it sets, and print what to expect '
            "(records per teacher, noise relative to the ensemble, the answers the budget buys, "
            "the guarantee; for a table, which columns it uses and how). Works from [data] records (the declared, public number of private "
            "records; built-in datasets declare their own), the public split's size, the classes "
            "and the input shape (and what the ledger has left); writes nothing. Exit 0 when the "
            "plan is usable, 2 with the setting to change and a fix when it is not "
            "(docs/plan.md)."
        ),
    )
    p.add_argument(
        "--config",
        required=True,
        help=f"a TOML file, or a config shipped with pate-learn: {', '.join(packaged_configs())}",
    )
    p.add_argument("--run-dir", help="override [run] run_dir (default runs/<name>)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    from pate.cli.commands.run import RUN_TABLES
    from pate.cli.commands.stage_cli import add_start_arguments

    add_start_arguments(p, RUN_TABLES)  # the flags of `pate run`
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pate.cli.commands.stage_cli import start_flags
    from pate.run import planner
    from pate.run.config import load, planning

    flags = start_flags(args)
    config = load(args.config, run_dir=args.run_dir, **flags)
    data = config.load_data()
    _, plan = planning.plan(
        config,
        data,
        remaining_eps=planner.ledger_remaining(config.privacy.ledger_path(), data),
    )
    if args.json:
        print(json.dumps(plan.to_dict(), indent=2))
    else:
        print(plan)
        if plan.usable:
            same = " with the same flags" if flags["overrides"] else ""
            print(f"usable      yes: `pate run --config {args.config}`{same} runs this plan")
        else:  # only a smoke test gets here: its refusals are warnings
            print(
                "usable      no: [run] smoke_test = true runs it anyway, to check that the "
                "pipeline works (its report says so first)"
            )
    return 0
