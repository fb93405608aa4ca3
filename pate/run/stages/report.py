"""The report stage: the publishable report (report.json, report.md, report.html, plots/) and the
internal one (private/report_internal.json, .md, private/plots/)."""

from __future__ import annotations

from pate.run.rundir import Run


def report(run: Run) -> dict:
    from pate.run.report import INTERNAL_REPORT_FILES, REPORT_FILES, write_report

    doc = write_report(run.run_dir)
    return {"files": [*REPORT_FILES, *doc["plots"].values(), *INTERNAL_REPORT_FILES]}
