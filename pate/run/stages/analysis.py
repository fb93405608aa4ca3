"""The analysis stage: every privacy and utility number of the run."""

from __future__ import annotations

import logging

from pate import mechanisms
from pate.core.io import atomic_write_json
from pate.run import rundir
from pate.run.rundir import Run

logger = logging.getLogger("pate")


def analysis_stage(run: Run) -> dict:
    from pate.run.run_analysis import build_analysis

    doc = build_analysis(run)
    atomic_write_json(run.path(rundir.ANALYSIS), doc)
    p = doc["privacy"]
    if mechanisms.get(p["mechanism"]).kind.reads_private_records:
        logger.info(
            "analysis: eps data-independent %.4f at delta %g (a cost that does not "
            "depend on the data; no data-dependent analysis, no sanitized release)",
            p["eps_data_independent"],
            p["delta"],
        )
    else:
        logger.info(
            "analysis: eps data-independent %.4f, sanitized %.4f, data-dependent (not "
            "private) %.4f at delta %g",
            p["eps_data_independent"],
            p["eps_sanitized"],
            p["eps_data_dependent"],
            p["delta"],
        )
    return {k: p[k] for k in ("eps_data_independent", "eps_sanitized", "eps_guarantee")}
