"""The report's jinja2 templates (``templates/``, found with :mod:`importlib.resources`), their
filters and context (:func:`context`; what it holds: docs/publishing.md), and the Markdown the
templates write turned into the HTML page's body (:func:`markdown_html`)."""

from __future__ import annotations

import functools
import html
import json
import re
from importlib import resources

import jinja2
from markupsafe import Markup

from pate import mechanisms
from pate.ledger import identity_note
from pate.run import rundir
from pate.run.report import formatting, report_warnings, wording
from pate.run.report import resources as run_resources
from pate.run.report.publishable import CONDITIONS, PUBLICATION
from pate.run.utility_warnings import WEAK_GAP_CLOSED, gap_closed

#: The template folder, inside the package ``pate.run.report``.
TEMPLATES = "templates"


def template_source(name: str) -> str:
    """The text of the packaged template ``name``; ``jinja2.TemplateNotFound`` if it is missing."""
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
    """Markdown inline text as HTML: escaped (quotes kept), ``**bold**``, ``*italic*``,
    ```code``` and ``[text](#anchor)`` links."""
    escaped = html.escape(str(text), quote=False).replace("\\|", "|")
    escaped = re.sub(r"`(.+?)`", r"<code>\1</code>", escaped)
    escaped = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", escaped)
    escaped = re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"<em>\1</em>", escaped)
    return Markup(re.sub(r"\[([^\]]+)\]\((#[\w-]+)\)", r'<a href="\2">\1</a>', escaped))


def anchor(text: str) -> str:
    """The id of a heading: its words in lower case, joined by hyphens."""
    return "-".join(re.findall(r"[a-z0-9]+", text.lower()))


def _html_block(block: str, images: dict[str, str]) -> str:
    """One Markdown block (no blank line inside) as HTML."""
    lines = block.splitlines()
    if block.startswith("#"):
        level, text = len(block) - len(block.lstrip("#")), block.lstrip("#").strip()
        return f'<h{level} id="{anchor(text)}">{inline_html(text)}</h{level}>'
    if block.startswith("```"):
        return f"<pre><code>{html.escape(chr(10).join(lines[1:-1]), quote=False)}</code></pre>"
    if block.startswith("- "):
        items = "".join(f"<li>{inline_html(line[2:])}</li>" for line in lines)
        return f"<ul>{items}</ul>"
    if block.startswith("|"):
        rows = [re.split(r"(?<!\\)\|", line.strip())[1:-1] for line in lines]
        head = "".join(f"<th>{inline_html(c.strip())}</th>" for c in rows[0])
        body = "".join(
            "<tr>" + "".join(f"<td>{inline_html(c.strip())}</td>" for c in row) + "</tr>"
            for row in rows[2:]
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    image = re.fullmatch(r"!\[([\w-]+)\]\([^)]*\)", lines[0])
    if image:
        name = image.group(1)
        caption = str(inline_html(" ".join(lines[1:]))).replace(
            "Publishable.", '<span class="public">Publishable</span>', 1
        )
        return (
            f'<figure id="{name}"><img alt="{name}" src="data:image/png;base64,{images[name]}">'
            f"<figcaption>{caption}</figcaption></figure>"
        )
    css = ' class="note"' if re.fullmatch(r"\*[^*].*[^*]\*", block) else ""
    return f"<p{css}>{inline_html(' '.join(lines))}</p>"


def markdown_html(markdown: str, images: dict[str, str]) -> Markup:
    """The Markdown the report's templates write (headings, paragraphs, lists, tables, fenced
    code, figures), as HTML; ``images`` maps each figure's name to its base64 PNG."""
    blocks = [b.strip("\n") for b in re.split(r"\n\s*\n", markdown) if b.strip()]
    return Markup("\n".join(_html_block(block, images) for block in blocks))


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
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
        md_cell=md_cell,
        eps=formatting.eps,
        left=formatting.left,
        delta=formatting.delta,
        pct=formatting.pct,
        count=formatting.count,
        param=formatting.param,
        sig=formatting.sig,
        odds=wording.odds_factor,
    )
    return env


def _plot_links(report: dict, internal: bool) -> dict[str, str]:
    """The plots' paths relative to the report (``private/`` for the internal one)."""
    if not internal:
        return dict(report["plots"])
    prefix = rundir.PRIVATE_DIR + "/"
    return {
        name: path[len(prefix) :] if path.startswith(prefix) else f"../{path}"
        for name, path in report["plots"].items()
    }


def context(report: dict, internal: bool) -> dict:
    """What the templates receive (docs/publishing.md)."""
    p, u = report["privacy"], report["utility"]
    spec = mechanisms.get(p["mechanism"])
    listed = report_warnings.utility_warnings(report)
    internal_plot = rundir.PRIVATE_DIR + "/"  # the paths of the plots that are not publishable
    public_plots = [n for n, path in report["plots"].items() if not path.startswith(internal_plot)]
    return {
        "r": report,
        "p": p,
        "q": report["queries"],
        "u": u,
        "internal": internal,
        "spec": spec,
        "kind": spec.kind.name,
        "teachers": not spec.kind.reads_private_records,
        "release": wording.release_asked(report),
        "person": p["neighbouring_relation"] == "unit",
        "params": wording.params_text(p["mechanism"], p["params"]),
        "rule_text": _rule_text(report, spec),
        "weak": wording.weak_guarantee(report),
        "weak_limit": wording.WEAK_EPSILON,
        "not_private": wording.NOT_PRIVATE,
        "mark": wording.INTERNAL_MARK,
        "smoke": wording.is_smoke_test(report),
        "dataset": wording.dataset_name(p["ledger"]) if p.get("ledger") else None,
        "release_public": CONDITIONS["release_public"](report),
        "publication": PUBLICATION,
        "utility_warnings": listed,
        "other_warnings": [w for w in report["warnings"] if w not in listed],
        "resources": [
            text
            for text in (
                None if spec.kind.reads_private_records else run_resources.execution_text(report),
                run_resources.threads_text(report),
                run_resources.gpu_memory_text(report),
                run_resources.precision_text(report),
            )
            if text
        ],
        "public_plots": public_plots,
        "internal_plots": [n for n in report["plots"] if n not in public_plots],
        "captions": wording.CAPTIONS,
        "links": _plot_links(report, internal),
        "per_class": list(zip(formatting.class_names(u), u["student_per_class_accuracy"]))
        if "student_per_class_accuracy" in u
        else [],
        "calibrated": wording.params_text(
            p["mechanism"], (p.get("calibration") or {}).get("calibrated") or {}
        ),
        "config_json": json.dumps(report["config"], indent=2, sort_keys=True),
        "gap_closed": gap_closed(u, u.get("reference_accuracy")) if internal else None,
        "weak_gap": WEAK_GAP_CLOSED,
        "identity_note": identity_note(bool((report["config"].get("data") or {}).get("id"))),
    }


def _rule_text(report: dict, spec) -> str:
    """How a run whose one release labels every query labelled from it ("" otherwise)."""
    if not spec.kind.releases_once:
        return ""
    from pate.core.labelling_rules import RULE_TEXT
    from pate.run.config import RunConfig

    rule = RunConfig.parse(report["config"]).knn.labelling_rule
    return f'Labelling rule ([knn] rule = "{rule}", post-processing): {RULE_TEXT[rule]}.'


def tidy(markdown: str) -> str:
    """The templates' Markdown with each paragraph on one line (tables, lists, code and figures
    keep their lines) and blocks one blank line apart."""
    blocks = [b.strip("\n") for b in re.split(r"\n[ \t]*\n", markdown) if b.strip()]
    out = []
    for block in blocks:
        if not block.startswith(("|", "- ", "```", "![")):
            block = re.sub(r"\s*\n\s*", " ", block)
            block = re.sub(r" +([,.;)])(?= |$)", r"\1", re.sub(r" {2,}", " ", block))
        out.append(block)
    return "\n\n".join(out)


def render_statement(analysis: dict) -> str:
    """The privacy statement of a (validated) analysis, as plain-text paragraphs ("Head: text")
    separated by blank lines (``statement.md.j2``)."""
    report = {"plots": {}, "warnings": [], **analysis}
    return tidy(environment().get_template("statement.md.j2").render(context(report, False), b=""))
