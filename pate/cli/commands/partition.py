"""`pate partition`: the partition stage (:func:`pate.run.stages.partition`) of a run directory.

No torch import at module import time: the command starts fast.
"""

from __future__ import annotations

import argparse

from pate.cli.commands.stage_cli import add_stage_arguments, run_stage_command

TABLES = ("data", "partition")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "partition",
        help="split the sensitive records into disjoint teacher shards (first step of a run)",
        description=(
            "Start a run directory from --config (or continue one) and assign every record of "
            "the private split to exactly one teacher: <run-dir>/partition.npz. The same stage "
            "as `pate run`: mode random (each record's teacher is a keyed hash of the record, so "
            "adding or removing a record changes one teacher) or unit (--unit-ids: one "
            "privacy-unit id per record, e.g. a patient; all records of a unit go to the same "
            "teacher, so the guarantee is per unit). The dataset's identity and budget are checked in the ledger "
            "before anything is written. Next: pate train-teachers --run-dir DIR."
        ),
    )
    add_stage_arguments(p, TABLES)
    p.set_defaults(func=run)


def _describe(run, info) -> str:
    return (
        f"{info['num_teachers']} teachers ({info['mode']}) on {run.data.name}; guarantee: "
        f"{info['neighbouring_relation']}; INTERNAL (do not publish): "
        f"{len(run.data.private)} private records, shards of {info['shard_size_min']} to "
        f"{info['shard_size_max']}"
    )


def run(args: argparse.Namespace) -> int:
    return run_stage_command(args, "partition", TABLES, _describe)
