"""`pate vote`: the votes stage (:func:`pate.run.stages.votes`): the teachers' vote matrix on the
public split, ``<run-dir>/votes.npy``. Only its shape is printed: votes are sensitive."""

from __future__ import annotations

import argparse

from pate.cli.commands.stage_cli import add_stage_arguments, run_stage_command
from pate.run import rundir


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "vote",
        help="count the teachers' votes on the public split (writes votes.npy)",
        description=(
            "Build the (queries, classes) vote matrix from the teachers' predictions on the "
            "public split and write <run-dir>/votes.npy for `pate aggregate`. Only its shape is "
            "printed."
        ),
    )
    add_stage_arguments(p, ())
    p.set_defaults(func=run)


def _describe(run, info) -> str:
    if "embedding" in info:  # Private-kNN: embeddings for its neighbour search, no votes
        return (
            f"Private-kNN embeddings ({info['features']} features -> PCA of the public split, "
            f"{info['dims']} dims) of {info['queries']} public items and the private ones "
            f"(INTERNAL, do not publish: {info['private_records']}); wrote "
            f"{run.run_dir / info['embedding']}"
        )
    return (
        f"{info['queries']} queries x {info['classes']} classes from {info['teachers']} "
        f"teachers; wrote {run.path(rundir.VOTES)}"
    )


def run(args: argparse.Namespace) -> int:
    return run_stage_command(args, "votes", (), _describe)
