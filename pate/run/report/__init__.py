"""The privacy reports of a run, from its validated ``analysis.json``: the publishable one, cut
out of the full one by the allow-list :data:`PUBLIC_FIELDS` and worded from that cut alone, and
the internal one. It never recomputes a privacy number, loads the votes or imports torch;
what each report says and the package's modules: ``docs/publishing.md``."""

from __future__ import annotations

from pate.run.report.content import (
    INTERNAL_PLOT_NAMES,
    PLOT_NAMES,
    PUBLIC_PLOT_NAMES,
    build_report,
    public_report,
)
from pate.run.report.plots import publishable_plot_data, render_plots
from pate.run.report.publishable import PUBLIC_FIELDS, public_part
from pate.run.report.render import render_markdown
from pate.run.report.schema import validate_analysis
from pate.run.report.templating import render_statement
from pate.run.report.wording import NOT_PRIVATE
from pate.run.report.writer import INTERNAL_REPORT_FILES, REPORT_FILES, write_report

__all__ = [
    "INTERNAL_PLOT_NAMES",
    "INTERNAL_REPORT_FILES",
    "NOT_PRIVATE",
    "PLOT_NAMES",
    "PUBLIC_FIELDS",
    "PUBLIC_PLOT_NAMES",
    "REPORT_FILES",
    "build_report",
    "public_part",
    "public_report",
    "publishable_plot_data",
    "render_markdown",
    "render_plots",
    "render_statement",
    "validate_analysis",
    "write_report",
]
