"""`pate train-student`: the student stage (:func:`pate.run.stages.student`) of a run directory.

Trains the student -- the only model that is released -- on the public inputs and the labels the
aggregate stage charged and released (``labels.npy``, -1 = unanswered), and evaluates it on the
evaluation split: ``student.pt`` and ``student_metrics.json``. Every ``[student]`` key of the
config is a flag (the pseudo-label threshold is ``--confidence-threshold``). torch is imported
only when the stage runs.
"""

from __future__ import annotations

import argparse

from pate.cli.commands.stage_cli import add_stage_arguments, run_stage_command

TABLES = ("student",)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "train-student",
        help="train the student (FixMatch or supervised) on the public split and released labels",
        description=(
            "Train the student on the public inputs and the labels released by `pate aggregate` "
            "(only after they were charged), semi-supervised (FixMatch: the unanswered public "
            "items are unlabelled data) or supervised. Evaluates on the held-out evaluation "
            "split and writes student.pt and student_metrics.json into the run directory."
        ),
    )
    add_stage_arguments(p, TABLES)
    p.set_defaults(func=run)


def _describe(run, info) -> str:
    from pate.run import rundir

    m = rundir.read_summary(run.path(rundir.STUDENT_METRICS), rundir.STUDENT_METRICS_KEYS)
    return (
        f"{m['method']} {m['model']}: trained on {m['num_labelled']} labelled of "
        f"{m['num_public']} public items in {m['train_seconds']:.1f} s; accuracy "
        f"{m['accuracy']:.4f} on {m['num_examples']} evaluation items (INTERNAL unless the "
        "evaluation data is declared public)"
    )


def run(args: argparse.Namespace) -> int:
    return run_stage_command(args, "student", TABLES, _describe)
