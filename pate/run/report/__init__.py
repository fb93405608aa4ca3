"""The auditor-ready privacy report of a PATE run: ``report.json``, ``report.md``, ``report.html``
and six PNG plots, generated from the run's ``analysis.json``.

The report never recomputes a privacy number, never loads the votes and never imports torch:
every figure comes from ``<run_dir>/analysis.json`` (written by the pipeline's analysis stage;
schema ``format`` 1, see :data:`ANALYSIS_SCHEMA`). What it adds is the wording an auditor needs:

* the **neighbouring relation** -- record-level (one sensitive record added or removed) or
  unit-level (all records of one privacy unit, e.g. one patient, added or removed);
* the **guarantee** ``eps_guarantee``: the (eps, delta) that provably holds for everything the
  run releases (the data-independent cost of the answers composed with the release of the
  sanitized epsilon);
* the **sanitized** data-dependent epsilon ``eps_sanitized``: the data-dependent privacy cost
  of [P18] released through the smooth-sensitivity (GNSS) mechanism with order, beta and
  sigma_ss fixed in the config before the votes were seen, its release cost included;
* the raw **data-dependent** epsilon, computed from the private votes: marked
  ``NOT PRIVATE -- for internal use only, do not publish`` (as is everything else derived from
  the votes: the vote-margin histogram, the data-dependent curves);
* basic and advanced composition figures beside the RDP one ([M17], [DRV10]), the utility of the
  student and teachers, and the cumulative spend recorded by the privacy ledger;
* when ``privacy.noise_seeded`` is true (the noise came from a user-given seed), a statement
  that opens with: reproducible, NOT differentially private, do not publish; when
  ``privacy.ledger_enforced`` is false, that no budget was enforced across runs; and the
  ledger's ``privacy.budget_changes``. These keys are optional: an older analysis.json without
  them gets none of these sentences;
* when ``run.smoke_test`` is true (optional, false when absent), a banner on the first line
  under the title, the first paragraph of the statement and the first warning (each after the
  seeded-noise one, if any): the run only checks that the pipeline works and its privacy
  figures are not a meaningful guarantee;
* when the guarantee's epsilon is above :data:`WEAK_EPSILON` (10), a warning right after the
  guarantee sentence (and in ``warnings``) that it protects individuals very weakly, with the
  factor e^eps by which it lets an attacker's odds about one record (or person) change.

Plots (:data:`PLOT_NAMES`, written to ``plots/<name>.png``): ``epsilon_vs_answered`` and
``rdp_per_order`` are INTERNAL (they draw the data-dependent curves, computed from the private
votes), as is ``vote_margins``; ``epsilon_vs_answered_public`` and ``rdp_per_order_public`` are
their publishable versions, drawn only from the data-independent figures and the released
epsilons (:func:`publishable_plot_data`, the only input of their plotting functions);
``confusion_matrix`` is publishable.

The mechanism's name, description and parameter symbols come from its spec in
:mod:`pate.mechanisms`.

Symbols: eps / delta the (epsilon, delta) of differential privacy; lambda (``order``) a Renyi
order; beta the smoothness parameter and sigma_ss the noise multiplier of the GNSS release.

References: [P17] Papernot et al., "Semi-supervised knowledge transfer for deep learning from
private training data", ICLR 2017. [P18] Papernot et al., "Scalable private learning with PATE",
ICLR 2018. [M17] Mironov, "Renyi differential privacy", CSF 2017. [DRV10] Dwork, Rothblum,
Vadhan, "Boosting and differential privacy", FOCS 2010.

The package, one concept a module (each importable on its own; this module re-exports the
public API):

* :mod:`pate.run.report.schema`: the input, ``analysis.json``: its schema, validation and reading;
* :mod:`pate.run.report.model`: the report's content built from a run directory (``report.json``)
  and the typed blocks of its document;
* :mod:`pate.run.report.wording`: the sentences and paragraphs (statement, warnings, captions);
* :mod:`pate.run.report.resources`: what the run computed on (where the teachers trained, the
  CPU threads and the peak GPU memory of each stage);
* :mod:`pate.run.report.formatting`: how numbers are written;
* :mod:`pate.run.report.layout`: the document's sections, as blocks;
* :mod:`pate.run.report.render`: Markdown and HTML from the jinja2 templates shipped in
  ``pate/run/report/templates/`` (edit them to restyle or translate the report);
* :mod:`pate.run.report.plots`: the PNG plots (matplotlib Agg);
* :mod:`pate.run.report.writer`: :func:`write_report`, the files of a run directory.

Public API: :func:`write_report`, :func:`load_analysis`, :func:`validate_analysis`,
:func:`build_report`, :func:`plain_language_statement`, :func:`render_markdown`,
:func:`render_html`, :func:`render_plots`, :func:`publishable_plot_data`; constants
:data:`ANALYSIS_FILE`, :data:`ANALYSIS_SCHEMA`, :data:`REPORT_FILES`, :data:`PLOT_NAMES`,
:data:`PUBLIC_PLOT_NAMES`, :data:`INTERNAL_PLOT_NAMES`, :data:`NOT_PRIVATE`,
:data:`WEAK_EPSILON`.
"""

from __future__ import annotations

from pate.run.report.model import (
    INTERNAL_PLOT_NAMES,
    PLOT_NAMES,
    PLOTS_DIR,
    PUBLIC_PLOT_NAMES,
    build_report,
)
from pate.run.report.plots import publishable_plot_data, render_plots
from pate.run.report.render import render_html, render_markdown
from pate.run.report.schema import ANALYSIS_FILE, ANALYSIS_SCHEMA, load_analysis, validate_analysis
from pate.run.report.wording import NOT_PRIVATE, WEAK_EPSILON, plain_language_statement
from pate.run.report.writer import REPORT_FILES, write_report

__all__ = [
    "ANALYSIS_FILE",
    "ANALYSIS_SCHEMA",
    "INTERNAL_PLOT_NAMES",
    "NOT_PRIVATE",
    "PLOTS_DIR",
    "PLOT_NAMES",
    "PUBLIC_PLOT_NAMES",
    "REPORT_FILES",
    "WEAK_EPSILON",
    "build_report",
    "load_analysis",
    "plain_language_statement",
    "publishable_plot_data",
    "render_html",
    "render_markdown",
    "render_plots",
    "validate_analysis",
    "write_report",
]
