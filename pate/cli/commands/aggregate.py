"""`pate aggregate`: the aggregate stage (:func:`pate.run.stages.aggregate`) of a run directory.

Noisy labels of the public queries from ``<run-dir>/votes.npy``, within the budget, charged to
the ledger before anything is written (``labels.npy``, ``answered.npy``, ``aggregate.json``).
Every ``[aggregator]`` and ``[privacy]`` key of the config is a flag. Votes are never printed.
No torch import.
"""

from __future__ import annotations

import argparse

from pate.cli.commands.stage_cli import add_stage_arguments, run_stage_command

TABLES = ("aggregator", "privacy")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "aggregate",
        help="noisy labels from the teachers' votes, charged to the ledger before release",
        description=(
            "Answer the public queries of the run in order with the noisy aggregator, stopping "
            "before the (eps, delta) budget could be exceeded. The ledger's budget is the one "
            "authority (a config or flag budget that differs from it is refused before anything "
            "is drawn); answers are drawn only inside a ledger reservation that covers their "
            "worst case and are charged before labels.npy is written. Noise comes from OS "
            "entropy unless --noise-seed is given (then the run is NOT private). The "
            "data-dependent epsilon is printed for information: it depends on the votes and is "
            "not private to publish."
        ),
    )
    add_stage_arguments(p, TABLES)
    p.set_defaults(func=run)


def _describe(run, info) -> str:
    from pate.run import rundir

    s = rundir.read_summary(run.path(rundir.AGGREGATE), rundir.AGGREGATE_KEYS)
    lines = [
        f"{s['mechanism']}: asked {s['queries_asked']} of {s['queries_offered']}, answered "
        f"{s['queries_answered']}"
    ]
    if s["stop_reason"]:
        lines.append(f"stopped: {s['stop_reason']}")
    from pate import mechanisms

    if mechanisms.get(s["mechanism"]).kind.reads_private_records:
        lines.append(
            f"eps of the asked queries at delta={s['delta']:g}: data-independent "
            f"{s['eps_data_independent']:.4f} (a cost that does not depend on the data; "
            "no data-dependent bound, no sanitized release)"
        )
    else:
        lines.append(
            f"eps of these answers at delta={s['delta']:g}: data-independent "
            f"{s['eps_data_independent']:.4f}, data-dependent "
            f"{s['eps_data_dependent']:.4f} (depends on the votes, not private to "
            "publish as is)"
        )
    if s["release"] is not None:
        lines.append(
            "the sanitized release was drawn and charged too: `pate analyze --run-dir` "
            "reports the guarantee (answers + release)"
        )
    lines.append(
        "charged to "
        + (
            f"the ledger {s['ledger']}"
            if s["ledger"]
            else "no ledger (--no-ledger: no budget was enforced)"
        )
    )
    if s["noise_seeded"]:
        lines.append(
            "WARNING: the noise was seeded (--noise-seed): the answers are reproducible "
            "and NOT private"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    return run_stage_command(args, "aggregate", TABLES, _describe)
