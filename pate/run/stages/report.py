"""The report stage: report.json, report.md, report.html and the plots."""

from __future__ import annotations

from pate.run import rundir as R
from pate.run.rundir import Run


def report(run: Run) -> dict:
    from pate.run.report import write_report

    doc = write_report(run.run_dir)
    return {"files": [R.REPORT_JSON, R.REPORT_MD, R.REPORT_HTML, *doc["plots"].values()]}
