"""The report's content: the validated ``analysis.json`` plus the statement, the plots' paths and
the warnings (:func:`build_report`), and its publishable cut (:func:`public_report`)."""

from __future__ import annotations

import json
from pathlib import Path

from pate.run import rundir
from pate.run.report.publishable import PUBLICATION, public_part
from pate.run.report.report_warnings import report_warnings
from pate.run.report.templating import render_statement
from pate.run.report.wording import samples_records

PLOT_NAMES = (
    "epsilon_vs_answered",
    "vote_margins",
    "rdp_per_order",
    "confusion_matrix",
    "epsilon_vs_answered_public",
    "rdp_per_order_public",
)
#: The plots drawn from the private votes (data-dependent curves, vote margins): never publish.
INTERNAL_PLOT_NAMES = ("epsilon_vs_answered", "vote_margins", "rdp_per_order")
#: The plots that may be published (no figure computed from the private votes); the confusion
#: matrix only where the evaluation data is declared public (:func:`public_plot_names`).
PUBLIC_PLOT_NAMES = ("epsilon_vs_answered_public", "rdp_per_order_public", "confusion_matrix")


def public_plot_names(report: dict) -> tuple[str, ...]:
    """The plots this run may publish: the data-independent ones, and the confusion matrix when
    its figures are public (the evaluation data declared public)."""
    return tuple(
        name
        for name in PUBLIC_PLOT_NAMES
        if name != "confusion_matrix" or "confusion_matrix" in report["utility"]
    )


def plot_paths(report: dict) -> dict[str, str]:
    """Every plot of the run, name -> path relative to the run directory: the publishable ones in
    ``plots/``, the others in ``private/plots/``."""
    public = public_plot_names(public_part(report))
    return {
        name: f"{rundir.PLOTS_DIR if name in public else rundir.PRIVATE_PLOTS_DIR}/{name}.png"
        for name in PLOT_NAMES
        if name != "vote_margins" or not samples_records(report)  # no votes, no margins
    }


def build_report(analysis: dict) -> dict:
    """The content of the INTERNAL report: the validated analysis plus ``statement``, ``plots``
    (name -> path relative to the run directory), ``warnings`` and ``publication``. Pure."""
    report = json.loads(json.dumps(analysis))  # a deep copy, JSON types only
    report["statement"] = render_statement(analysis)
    report["plots"] = plot_paths(analysis)
    report["warnings"] = report_warnings(analysis)
    report["publication"] = dict(PUBLICATION)
    return report


def public_report(report: dict) -> dict:
    """The publishable report: the fields of the full ``report`` that ``PUBLIC_FIELDS`` allows,
    with the statement, warnings and plots worded from those alone. Pure."""
    worded = ("statement", "warnings", "plots", "publication")
    public = public_part({k: v for k, v in report.items() if k not in worded})
    public["statement"] = render_statement(public)
    public["warnings"] = report_warnings(public)
    public["plots"] = {name: f"{rundir.PLOTS_DIR}/{name}.png" for name in public_plot_names(public)}
    public["publication"] = dict(PUBLICATION)
    return public


def _recorded(run_dir: Path, key: str, reader):
    """``reader`` of what a release's aggregate stage recorded under ``records.key``, else None."""
    try:
        records = json.loads((Path(run_dir) / rundir.AGGREGATE).read_text()).get("records")
        data = records.get(key) if isinstance(records, dict) else None
        return None if data is None else reader(data)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def read_rule_check(run_dir: Path):
    """The labelling rule's check a release's aggregate stage recorded, else None."""
    from pate.core.release_check import RuleCheck

    return _recorded(run_dir, "rule_check", RuleCheck.from_dict)


def read_class_separation(run_dir: Path):
    """How far apart a release's aggregate stage found the classes, else None."""
    from pate.core.release_check import ClassSeparation

    return _recorded(run_dir, "class_separation", ClassSeparation.from_dict)
