"""`pate train-teachers`: the teachers stage (:func:`pate.run.stages.teachers`) of a run directory.

One teacher per shard of ``<run_dir>/partition.npz``, trained into ``<run_dir>/teachers/``
(checkpoints, ``predictions.npz``, ``metrics.json``); an interrupted stage continues from its
checkpoints when the command is run again. Every ``[teachers]`` and ``[cluster]`` key of the
config is a flag (``--backend ray --address auto``: one Ray task per chunk of teachers).
torch is imported only when the stage runs.
"""

from __future__ import annotations

import argparse

from pate.cli.commands.stage_cli import add_stage_arguments, run_stage_command
from pate.run import rundir

TABLES = ("teachers", "cluster")  # [cluster]: local or on Ray (docs/cluster.md)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "train-teachers",
        help="train one teacher per shard of the partition (all teachers at once)",
        description=(
            "Train one model per shard of <run-dir>/partition.npz on the private split. "
            "Same-architecture torch teachers are trained simultaneously with torch.func (vmap), "
            "in chunks that fit in memory; other models one after another; scikit-learn "
            "estimators (--model sklearn:package.module.Class) with joblib. Running the command "
            "again continues an interrupted stage to the same teachers. Prints per-teacher and "
            "plurality-vote accuracy on the evaluation split (internal figures: do not publish)."
        ),
    )
    add_stage_arguments(p, TABLES)
    p.set_defaults(func=run)


def _describe(run, info) -> str:
    return (
        f"{info.get('num_teachers', '?')} teachers; INTERNAL (do not publish): mean accuracy "
        f"{100 * info['teacher_accuracy_mean']:.2f} %, plurality vote "
        f"{100 * info['plurality_accuracy']:.2f} % on the evaluation split "
        f"({run.path(rundir.TEACHER_METRICS)})"
    )


def run(args: argparse.Namespace) -> int:
    return run_stage_command(args, "teachers", TABLES, _describe)
