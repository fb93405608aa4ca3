"""``report.md`` and ``report.html`` from the report's blocks (:func:`pate.run.report.layout.document`),
through the jinja2 templates shipped in ``pate/run/report/templates/`` (found with
:mod:`importlib.resources`, so they work from a wheel or a zipped install too): ``report.md.j2``
(plots linked relative to the run directory) and ``report.html.j2`` (one self-contained page that
renders offline). What the templates receive, to restyle or translate the report:
docs/publishing.md.
"""

from __future__ import annotations

import base64
import functools
import html
import re
from importlib import resources

import jinja2
from markupsafe import Markup

from pate.analysis.errors import InputError
from pate.run import rundir
from pate.run.report.layout import document
from pate.run.report.model import public_report
from pate.run.report.wording import NOT_PRIVATE

__all__ = [
    "TEMPLATES",
    "inline_html",
    "md_cell",
    "render_html",
    "render_markdown",
    "template_source",
]

#: The template folder, inside the package ``pate.run.report``.
TEMPLATES = "templates"


def template_source(name: str) -> str:
    """The text of the packaged template ``name`` (``templates/<name>``, via importlib.resources).
    Raises ``jinja2.TemplateNotFound`` naming it when the package does not hold it."""
    entry = resources.files("pate.run.report").joinpath(TEMPLATES, name)
    if not entry.is_file():
        raise jinja2.TemplateNotFound(
            f"{name} (pate/run/report/{TEMPLATES}/{name} is missing from the installed package: "
            f"reinstall pate-learn)"
        )
    return entry.read_text(encoding="utf-8")


def md_cell(text) -> str:
    """A Markdown table cell: ``|`` escaped, line breaks as spaces."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def inline_html(text) -> Markup:
    """Block text as HTML: escaped (quotes kept), ``**bold**`` as ``<strong>`` and ```code```
    as ``<code>``."""
    escaped = html.escape(str(text), quote=False)
    escaped = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", escaped)
    return Markup(re.sub(r"`(.+?)`", r"<code>\1</code>", escaped))


def _html_text(text) -> Markup:
    return Markup(html.escape(str(text), quote=False))


def _html_attr(text) -> Markup:
    return Markup(html.escape(str(text), quote=True))


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(template_source),
        autoescape=jinja2.select_autoescape(
            enabled_extensions=("html.j2",), default_for_string=False, default=False
        ),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(
        md_cell=md_cell, inline_html=inline_html, html_text=_html_text, html_attr=_html_attr
    )
    return env


def _internal_links(report: dict) -> dict[str, str]:
    """The plots' paths relative to ``private/``, where the internal report lies."""
    prefix = rundir.PRIVATE_DIR + "/"
    return {
        name: path[len(prefix) :] if path.startswith(prefix) else f"../{path}"
        for name, path in report["plots"].items()
    }


def render_markdown(report: dict, *, internal: bool = False) -> str:
    """``report.md``: the publishable report (:func:`pate.run.report.model.public_report`, cut out
    of ``report`` when given the full one) as Markdown, plots linked relative to the run directory; with ``internal``, the internal report
    ``private/report_internal.md`` of the full one (:func:`pate.run.report.build_report`), plots
    linked relative to ``private/``."""
    if not internal:  # the publishable documents are rendered from the public cut alone
        report = public_report(report)
    return (
        _environment()
        .get_template("report.md.j2")
        .render(
            blocks=document(report, internal=internal),
            title=f"Privacy report: {report['run']['name']}",
            plots=_internal_links(report) if internal else report["plots"],
            not_private=NOT_PRIVATE,
        )
    )


def render_html(report: dict, images: dict[str, bytes]) -> str:
    """``report.html``: the publishable report (cut out of ``report`` by
    :func:`pate.run.report.model.public_report` when given the full one) as one self-contained page (inline CSS, its plots
    embedded as base64 PNG, no external resource) that renders offline. ``images`` maps each
    plot name of ``report["plots"]`` to its PNG bytes."""
    report = public_report(report)  # the publishable documents: from the public cut alone
    missing = [name for name in report["plots"] if name not in images]
    if missing:
        raise InputError(f"images is missing the plot(s) {', '.join(missing)}")
    encoded = {name: base64.b64encode(images[name]).decode("ascii") for name in report["plots"]}
    return (
        _environment()
        .get_template("report.html.j2")
        .render(
            blocks=document(report),
            title=f"Privacy report: {report['run']['name']}",
            plots=report["plots"],
            images=encoded,
            not_private=NOT_PRIVATE,
        )
    )
