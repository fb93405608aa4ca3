"""The stages of a PATE run, each implemented once: a function of an open :class:`pate.run.rundir.Run`.

``pate run`` (:class:`pate.run.pipeline.Pipeline`), the stage subcommands (``pate partition``,
``pate train-teachers``, ``pate vote``, ``pate aggregate``, ``pate train-student``,
``pate analyze --run-dir``, ``pate report``) and the Python API all call :func:`run_stage`, so the
same files, the same JSON keys and the same ledger charges come out whichever path ran a stage.

=========  =====================================================================================
partition  ``partition.npz``: disjoint shards of the private split, one per teacher
teachers   ``teachers/``: one model per shard, predictions and accuracy metrics
votes      ``votes.npy``: teacher votes on the public split (sensitive: never printed)
aggregate  ``labels.npy``, ``answered.npy``, ``aggregate.json``: noisy labels within the budget,
           charged to the ledger BEFORE they are written (see :func:`aggregate`)
student    ``student.pt``, ``student_metrics.json``: the only model that is ever released
analysis   ``analysis.json``: every privacy and utility number, including the sanitized release
report     ``report.json``, ``report.md``, ``report.html``, ``plots/*.png`` (publishable);
           ``private/report_internal.{json,md}``, ``private/plots/*.png`` (docs/publishing.md)
=========  =====================================================================================

A run of a mechanism that reads the private records itself (its kind's
``reads_private_records``) trains no teachers: partition and teachers
are recorded as skipped (``stages/<stage>.json`` with ``skipped`` and ``reason``, see
:func:`skip_reason`); its votes stage writes ``knn_embeddings.npz`` (public-fitted embeddings of
the public and private splits) and its aggregate stage draws from the records inside each ledger
round, after the round's reservation (:func:`aggregate`: one loop per kind of mechanism, each on
the round driver of :mod:`pate.run.stages.rounds`). Which votes stage and which aggregate loop a
run has is its kind's (``kind.votes_stage``, ``kind.aggregate_loop``: :mod:`pate.mechanisms.kinds`).

Symbols (each documented where it is defined): ``STAGE_FUNCTIONS`` and ``run_stage``
(:mod:`~pate.run.stages.runner`), ``skip_reason`` and ``knn_prior`` (:mod:`~pate.run.stages.records`),
``preflight``, ``check_device`` and ``check_data`` (:mod:`~pate.run.stages.preflight`),
``authorize`` and ``check_budget_fits`` (:mod:`~pate.run.stages.budget`), ``release_plan``
(:mod:`~pate.run.stages.release`).

The stages live one per file (``partition``, ``teachers``, ``votes``, ``aggregate``, ``student``,
``analysis``, ``report``), beside what they share: :mod:`~pate.run.stages.runner` (``run_stage``),
:mod:`~pate.run.stages.preflight` and :mod:`~pate.run.stages.budget` (the checks before any work),
:mod:`~pate.run.stages.records` (mechanisms that read the private records), the aggregate loop of
each kind of mechanism (``aggregate_votes``, ``aggregate_sample``, ``aggregate_release``),
:mod:`~pate.run.stages.rounds` (the aggregate stage's round driver), :mod:`~pate.run.stages.pending`
(the pending file), :mod:`~pate.run.stages.resume` (charging and publishing it after a crash),
:mod:`~pate.run.stages.release` (the sanitized release) and :mod:`~pate.run.stages.fork`. This package re-exports every name used outside it; a stage
function's name here is the function (``pate.run.stages.aggregate``), not its module (import the
module as ``importlib.import_module("pate.run.stages.aggregate")``).
"""

from __future__ import annotations

from pate.run.stages.aggregate import aggregate
from pate.run.stages.analysis import analysis_stage
from pate.run.stages.budget import authorize, check_budget_fits, config_identity
from pate.run.stages.fork import FORKED_FILES, FORKED_STAGES, fork
from pate.run.stages.partition import partition
from pate.run.stages.pending import PENDING_FORMAT
from pate.run.stages.preflight import check_data, check_device, preflight
from pate.run.stages.records import knn_prior
from pate.run.stages.release import release_plan
from pate.run.stages.report import report
from pate.run.stages.runner import (
    STAGE_FUNCTIONS,
    TORCH_STAGES,
    run_stage,
    skip_reason,
)
from pate.run.stages.student import student
from pate.run.stages.teachers import teachers
from pate.run.stages.votes import votes

__all__ = [
    "STAGE_FUNCTIONS",
    "TORCH_STAGES",
    "run_stage",
    "preflight",
    "authorize",
    "check_budget_fits",
    "release_plan",
    "config_identity",
    "skip_reason",
    "knn_prior",
    "check_data",
    "check_device",
    "fork",
    "FORKED_FILES",
    "FORKED_STAGES",
    "PENDING_FORMAT",
    "partition",
    "teachers",
    "votes",
    "aggregate",
    "student",
    "analysis_stage",
    "report",
]
