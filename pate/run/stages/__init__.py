"""The stages of a PATE run, each implemented once: a function of an open
:class:`pate.run.rundir.Run`, called by ``pate run``, the stage subcommands and the Python API
through :func:`run_stage`. What each stage writes and where each lives: docs/pipeline.md."""

from __future__ import annotations

from pate.run.stages.analysis import analysis_stage
from pate.run.stages.budget import authorize, check_budget_fits
from pate.run.stages.fork import fork
from pate.run.stages.preflight import check_device, preflight
from pate.run.stages.records import knn_prior
from pate.run.stages.runner import run_stage

__all__ = [
    "run_stage",
    "preflight",
    "authorize",
    "check_budget_fits",
    "knn_prior",
    "check_device",
    "fork",
    "analysis_stage",
]
