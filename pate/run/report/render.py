"""``report.md`` and ``report.html``: the publishable report (cut out of the full one) or the
internal one, rendered through the templates of :mod:`pate.run.report.templating`: the Markdown
once, and the HTML page from that same Markdown."""

from __future__ import annotations

import base64

from pate.analysis.errors import InputError
from pate.run.report.content import public_report
from pate.run.report.templating import context, environment, markdown_html, tidy


def render_markdown(report: dict, *, internal: bool = False) -> str:
    """``report.md``: the publishable report (cut out of ``report`` when given the full one), or
    with ``internal`` the internal one of the full ``report``."""
    if not internal:  # the publishable documents are rendered from the public cut alone
        report = public_report(report)
    text = environment().get_template("report.md.j2").render(context(report, internal), b="**")
    return tidy(text) + "\n"


def render_html(report: dict, images: dict[str, bytes]) -> str:
    """``report.html``: the publishable report as one self-contained page (inline CSS, plots
    embedded, no script); ``images`` maps each plot name of ``report["plots"]`` to its PNG."""
    report = public_report(report)  # the publishable documents: from the public cut alone
    missing = [name for name in report["plots"] if name not in images]
    if missing:
        raise InputError(f"images is missing the plot(s) {', '.join(missing)}")
    encoded = {name: base64.b64encode(images[name]).decode("ascii") for name in report["plots"]}
    body = markdown_html(render_markdown(report), encoded)
    return (
        environment()
        .get_template("report.html.j2")
        .render(title=f"Privacy report: {report['run']['name']}", body=body)
    )
