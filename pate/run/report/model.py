"""The report's content, built from a run directory: ``report.json`` (:func:`build_report`:
the validated ``analysis.json`` plus the statement, the plots' paths and the warnings) and the
typed blocks that make up the report's
document (:class:`Heading`, :class:`Paragraph`, ...), laid out by :mod:`pate.run.report.layout` and
rendered to Markdown and HTML by the templates of :mod:`pate.run.report.render`.

Block text may use two inline marks: ``**bold**`` and ```code```. Markdown keeps them; HTML
turns them into ``<strong>`` and ``<code>``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from pate.run import rundir
from pate.run.report.publishable import PUBLICATION, public_part
from pate.run.report.report_warnings import report_warnings
from pate.run.report.wording import plain_language_statement

__all__ = [
    "INTERNAL_PLOT_NAMES",
    "PLOTS_DIR",
    "PLOT_NAMES",
    "PUBLIC_PLOT_NAMES",
    "Block",
    "BulletList",
    "CodeBlock",
    "Figure",
    "Heading",
    "Note",
    "Paragraph",
    "Table",
    "build_report",
    "plot_paths",
    "public_plot_names",
    "public_report",
    "read_rule_check",
]

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
#: The folder of the run directory that holds the publishable plots (``plots/<name>.png``); the
#: internal ones are in ``private/plots/`` (``rundir.INTERNAL_PLOTS``).
PLOTS_DIR = "plots"


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
        name: f"{PLOTS_DIR if name in public else rundir.INTERNAL_PLOTS}/{name}.png"
        for name in PLOT_NAMES
    }


def build_report(analysis: dict) -> dict:
    """The content of the INTERNAL report (``private/report_internal.json``): the (validated)
    analysis plus ``statement`` (the plain-language text, internal figures marked),
    ``plots`` (name -> path relative to the run directory), ``warnings`` (a list of strings,
    internal ones marked) and ``publication`` (the rule). Pure: writes nothing. The publishable
    report is cut out of it by :func:`public_report`."""
    report = json.loads(json.dumps(analysis))  # a deep copy, JSON types only
    report["statement"] = plain_language_statement(analysis)
    report["plots"] = plot_paths(analysis)
    report["warnings"] = report_warnings(analysis)
    report["publication"] = dict(PUBLICATION)
    return report


def public_report(report: dict) -> dict:
    """The publishable report (``report.json``): the fields of the full ``report`` that
    :data:`pate.run.report.publishable.PUBLIC_FIELDS` allows, and the statement, warnings and
    plots worded and drawn from those fields alone. Pure."""
    worded = ("statement", "warnings", "plots", "publication")
    public = public_part({k: v for k, v in report.items() if k not in worded})
    public["statement"] = plain_language_statement(public)
    public["warnings"] = report_warnings(public)
    public["plots"] = {name: f"{PLOTS_DIR}/{name}.png" for name in public_plot_names(public)}
    public["publication"] = dict(PUBLICATION)
    return public


def read_rule_check(run_dir: Path):
    """The labelling rule's check a release's aggregate stage recorded (``aggregate.json``,
    ``records.rule_check``: :class:`pate.core.release_check.RuleCheck`), None for other runs or
    an unreadable summary."""
    from pate.core.release_check import RuleCheck

    try:
        summary = json.loads((Path(run_dir) / rundir.AGGREGATE).read_text())
        data = (summary.get("records") or {}).get("rule_check")
        return None if data is None else RuleCheck.from_dict(data)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


# ------------------------------------------------------------------------------ document blocks
# ``kind`` names the block for the templates (templates/report.md.j2, templates/report.html.j2).


@dataclass(frozen=True)
class Heading:
    """A heading: level 1 (the title) or 2 (a section)."""

    text: str
    level: int = 2
    kind: ClassVar[str] = "heading"


@dataclass(frozen=True)
class Paragraph:
    """A paragraph."""

    text: str
    kind: ClassVar[str] = "paragraph"


@dataclass(frozen=True)
class Note:
    """A paragraph set apart (italic): where the report comes from and how to share it."""

    text: str
    kind: ClassVar[str] = "note"


@dataclass(frozen=True)
class BulletList:
    """A bulleted list (shown highlighted in HTML: warnings and the run at a glance)."""

    items: tuple[str, ...]
    kind: ClassVar[str] = "list"


@dataclass(frozen=True)
class Table:
    """A table: a header row and rows of cells (strings)."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    kind: ClassVar[str] = "table"


@dataclass(frozen=True)
class CodeBlock:
    """Preformatted JSON (the effective configuration)."""

    text: str
    kind: ClassVar[str] = "code"


@dataclass(frozen=True)
class Figure:
    """A plot (one of :data:`PLOT_NAMES`) with its caption; ``internal``: not publishable (drawn
    from the private votes, or the confusion matrix on evaluation data not declared public)."""

    name: str
    caption: str
    internal: bool
    kind: ClassVar[str] = "figure"


Block = Heading | Paragraph | Note | BulletList | Table | CodeBlock | Figure
