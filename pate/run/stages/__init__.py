"""The stages of a PATE run, each implemented once: a function of an open
:class:`pate.run.rundir.Run`, called by ``pate run``, the stage subcommands and the Python API
through :func:`run_stage`. What each stage writes and where each lives: docs/pipeline.md."""

from __future__ import annotations

from pate.run.stages.aggregate import aggregate
from pate.run.stages.analysis import analysis_stage
from pate.run.stages.budget import authorize, check_budget_fits
from pate.run.stages.fork import fork
from pate.run.stages.partition import partition
from pate.run.stages.preflight import check_device, preflight
from pate.run.stages.records import knn_prior
from pate.run.stages.release import release_plan
from pate.run.stages.report import report
from pate.run.stages.runner import run_stage
from pate.run.stages.student import student
from pate.run.stages.teachers import teachers
from pate.run.stages.votes import votes

__all__ = [
    "run_stage",
    "preflight",
    "authorize",
    "check_budget_fits",
    "release_plan",
    "knn_prior",
    "check_device",
    "fork",
    "partition",
    "teachers",
    "votes",
    "aggregate",
    "student",
    "analysis_stage",
    "report",
]
