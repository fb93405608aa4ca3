"""The privacy reports of a PATE run, generated from the run's ``analysis.json``: the
publishable report (``report.json``, ``report.md``, ``report.html``, ``plots/``) and the
internal one (``private/report_internal.json``, ``private/report_internal.md``,
``private/plots/``).

**One line between what may be published and what may not** (docs/publishing.md): the
publishable report holds only facts the user declared public, outputs of charged mechanisms
and post-processing of those. It is cut out of the full report by the allow-list
:data:`PUBLIC_FIELDS` (:mod:`pate.run.report.publishable`, the reason for each field in one
place), and its Markdown, HTML, statement, warnings and plots are worded and drawn from that
cut alone. Everything else -- the smooth sensitivity and the noise it scales, the raw
data-dependent epsilon and curves, the vote margins, the teachers' accuracies, the noise-free
plurality vote and the answers' agreement with it, figures on evaluation data not declared
public and the warnings that fire on them, the operator's paths, times and resources -- is in
the internal report only, marked ``NOT PRIVATE -- for internal use only, do not publish``.

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
  sigma_ss fixed in the config before the votes were seen, its release charged (public only
  then; the smooth sensitivity and the noise std are internal);
* the raw **data-dependent** epsilon (internal report only);
* basic and advanced composition figures beside the RDP one ([M17], [DRV10]), the utility of the
  student (public where its evaluation data is) and the cumulative spend recorded by the
  privacy ledger;
* when ``privacy.noise_seeded`` is true (the noise came from a user-given seed), a statement
  that opens with: reproducible, NOT differentially private, do not publish; when
  ``privacy.ledger_enforced`` is false, that no budget was enforced across runs; and the
  ledger's ``privacy.budget_changes``. These keys are optional;
* when ``run.smoke_test`` is true (optional, false when absent), a banner on the first line
  under the title, the first paragraph of the statement and the first warning: the run only
  checks that the pipeline works and its privacy figures are not a meaningful guarantee;
* when the guarantee's epsilon is above :data:`WEAK_EPSILON` (10), a warning right after the
  guarantee sentence (and in ``warnings``) that it protects individuals very weakly, with the
  factor e^eps by which it lets an attacker's odds about one record (or person) change.

Plots (:data:`PLOT_NAMES`): ``epsilon_vs_answered_public`` and ``rdp_per_order_public`` are
publishable (``plots/``), drawn only from the publishable report (:func:`publishable_plot_data`),
as is ``confusion_matrix`` where the evaluation data is declared public; the others
(``epsilon_vs_answered``, ``rdp_per_order`` and ``vote_margins``, drawn from the private votes)
are internal (``private/plots/``).

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
* :mod:`pate.run.report.publishable`: the allow-list of the publishable report's fields;
* :mod:`pate.run.report.model`: the reports' content (the full one and its publishable cut) and
  the typed blocks of their documents;
* :mod:`pate.run.report.wording`: the sentences and paragraphs (statement, captions);
* :mod:`pate.run.report.report_warnings`: the warnings;
* :mod:`pate.run.report.resources`: what the run computed on (where the teachers trained, the
  CPU threads and the peak GPU memory of each stage);
* :mod:`pate.run.report.formatting`: how numbers are written;
* :mod:`pate.run.report.layout`: the document's sections, as blocks;
* :mod:`pate.run.report.render`: Markdown and HTML from the jinja2 templates shipped in
  ``pate/run/report/templates/`` (edit them to restyle or translate the report);
* :mod:`pate.run.report.plots`: the PNG plots (matplotlib Agg);
* :mod:`pate.run.report.writer`: :func:`write_report`, the files of a run directory.

Public API: :func:`write_report`, :func:`load_analysis`, :func:`validate_analysis`,
:func:`build_report`, :func:`public_report`, :func:`public_part`, :func:`plain_language_statement`, :func:`render_markdown`,
:func:`render_html`, :func:`render_plots`, :func:`publishable_plot_data`; constants
:data:`ANALYSIS_FILE`, :data:`ANALYSIS_SCHEMA`, :data:`REPORT_FILES`, :data:`PLOT_NAMES`,
:data:`PUBLIC_PLOT_NAMES`, :data:`INTERNAL_PLOT_NAMES`, :data:`PUBLIC_FIELDS`,
:data:`INTERNAL_REPORT_FILES`, :data:`NOT_PRIVATE`,
:data:`WEAK_EPSILON`.
"""

from __future__ import annotations

from pate.run.report.model import (
    INTERNAL_PLOT_NAMES,
    PLOT_NAMES,
    PLOTS_DIR,
    PUBLIC_PLOT_NAMES,
    build_report,
    public_report,
)
from pate.run.report.plots import publishable_plot_data, render_plots
from pate.run.report.publishable import PUBLIC_FIELDS, public_part
from pate.run.report.render import render_html, render_markdown
from pate.run.report.schema import ANALYSIS_FILE, ANALYSIS_SCHEMA, load_analysis, validate_analysis
from pate.run.report.wording import NOT_PRIVATE, WEAK_EPSILON, plain_language_statement
from pate.run.report.writer import INTERNAL_REPORT_FILES, REPORT_FILES, write_report

__all__ = [
    "ANALYSIS_FILE",
    "ANALYSIS_SCHEMA",
    "INTERNAL_PLOT_NAMES",
    "INTERNAL_REPORT_FILES",
    "NOT_PRIVATE",
    "PLOTS_DIR",
    "PLOT_NAMES",
    "PUBLIC_FIELDS",
    "PUBLIC_PLOT_NAMES",
    "REPORT_FILES",
    "WEAK_EPSILON",
    "build_report",
    "load_analysis",
    "plain_language_statement",
    "public_part",
    "public_report",
    "publishable_plot_data",
    "render_html",
    "render_markdown",
    "render_plots",
    "validate_analysis",
    "write_report",
]
