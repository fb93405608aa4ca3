"""The report's layout: the sections of ``report.md`` and ``report.html``, in order, as typed
blocks (:mod:`pate.run.report.model`) built from the content of ``report.json``
(:func:`pate.run.report.model.build_report`). Markdown and HTML render the same blocks
(:mod:`pate.run.report.render`), so both documents always say the same thing.
"""

from __future__ import annotations

import json

from pate import mechanisms
from pate.run.report import formatting as F
from pate.run.report import resources as RS
from pate.run.report import wording as W
from pate.run.report.model import (
    INTERNAL_PLOT_NAMES,
    PUBLIC_PLOT_NAMES,
    Block,
    BulletList,
    CodeBlock,
    Figure,
    Heading,
    Note,
    Paragraph,
    Table,
)
from pate.run.report.schema import ANALYSIS_FILE

__all__ = ["document"]


def document(report: dict) -> list[Block]:
    """The blocks of the report (from :func:`pate.run.report.model.build_report`), in order: the
    title and banners, what the run is worth, the privacy statement and warnings, the numbers,
    the accounting, queries and budget, the ledger, utility, plots and configuration."""
    blocks = _title(report)
    for section in (
        _at_a_glance,
        _statement,
        _privacy_numbers,
        _why_renyi,
        _queries_and_budget,
        _ledger,
        _utility,
        _plots,
        _configuration,
    ):
        blocks += section(report)
    return blocks


def _title(report: dict) -> list[Block]:
    """The title, the smoke-test and seeded-noise banners, and where the report comes from."""
    run = report["run"]
    blocks: list[Block] = [Heading(f"Privacy report: {run['name']}", level=1)]
    if W.is_smoke_test(report):
        blocks.append(Paragraph(W.SMOKE_BANNER))
    if report["privacy"].get("noise_seeded") is True:
        blocks.append(Paragraph(W.SEEDED_BANNER))
    if report["privacy"].get("keys_seeded") is True:
        blocks.append(Paragraph(W.KEYS_SEEDED_BANNER))
    blocks.append(
        Note(
            f"Run directory {run['run_dir']}, created {run['created']}, pate-learn "
            f"{run['pate_learn_version']}. Generated from {ANALYSIS_FILE}; regenerate with "
            f"`pate report RUN_DIR`. Figures marked INTERNAL are computed from the private "
            f"teacher votes: share this report with auditors under confidentiality and "
            f"publish only the figures marked publishable."
        )
    )
    return blocks


def _at_a_glance(report: dict) -> list[Block]:
    """The report's first section: what the run is worth, in plain words, with its utility
    warnings (each saying what to change)."""
    q, u = report["queries"], report["utility"]
    lines = [
        f"**Student** (the released model): {F.pct(u['student_accuracy'])} on "
        f"{F.count(u['evaluation_size'])} evaluation items"
        + (
            ""
            if "majority_class_rate" not in u
            else f"; always answering the majority class gives {F.pct(u['majority_class_rate'])}, "
            f"guessing {F.pct(u['chance_rate'])}"
        )
        + "."
    ]
    if u["teacher_mean_accuracy"] is not None:
        lines.append(
            f"**Teachers:** {F.pct(u['teacher_mean_accuracy'])} each on average; their "
            f"noiseless plurality vote {F.pct(u['plurality_vote_accuracy'])}."
        )
    answered = u.get("answered_labels", q["answered"])
    text = f"**Labels:** {F.count(answered)} of {F.count(q['asked'])} queries answered"
    if u["label_accuracy_answered"] is not None:
        text += f", {F.pct(u['label_accuracy_answered'])} of them right (benchmark-only figure)"
    agreement = u.get("answered_plurality_agreement")
    if agreement is not None:
        text += (
            f"; {F.pct(agreement)} agree with the teachers' plurality vote "
            f"(**{W.NOT_PRIVATE}**: computed from the private votes)"
        )
    lines.append(text + ".")
    if u.get("student_steps") is not None:
        lines.append(f"**Student training:** {F.count(u['student_steps'])} optimiser steps.")
    blocks: list[Block] = [Heading("What you get"), BulletList(tuple(lines))]
    warnings = W.utility_warnings(report)
    if warnings:
        blocks.append(Paragraph("**Utility warnings** (what to change):"))
        blocks.append(BulletList(tuple(warnings)))
    elif "warnings" in u:
        blocks.append(
            Paragraph(
                "No utility warning: the student is well above chance and close "
                "to its labels and the teachers' vote."
            )
        )
    return blocks


def _statement(report: dict) -> list[Block]:
    """The plain-language statement (the NOT PRIVATE marks and a weak guarantee in bold), then
    the warnings other than the utility ones (those are in the first section)."""
    blocks: list[Block] = [Heading("Privacy statement")]
    weak = W.weak_guarantee(report)
    for head, text in W.statement_paragraphs(report):
        text = text.replace(W.NOT_PRIVATE, f"**{W.NOT_PRIVATE}**")
        if weak:
            text = text.replace(weak, f"**{weak}**")
        blocks.append(Paragraph(f"**{head}:** {text}"))
    utility_warnings = W.utility_warnings(report)
    others = [w for w in report["warnings"] if w not in utility_warnings]
    if others:
        blocks += [Heading("Warnings"), BulletList(tuple(others))]
    return blocks


def _privacy_numbers(report: dict) -> list[Block]:
    """Every epsilon with whether it may be published, and the run's privacy settings."""
    p = report["privacy"]
    s = p["sanitized"]
    rows = [
        [
            "Guarantee \u03b5 (answers + release, data-independent)",
            F.eps(p["eps_guarantee"]),
            "yes",
        ],
        [
            "Sanitized data-dependent \u03b5 (release cost included)",
            F.eps(p["eps_sanitized"]),
            "yes",
        ],
        [
            "Sanitized \u03b5 + 2 noise std (conservative)",
            F.eps(s["eps_sanitized_upper_2std"]),
            "yes",
        ],
        [
            f"Data-independent \u03b5 of the answers (order {F.param(p['order_data_independent'])})",
            F.eps(p["eps_data_independent"]),
            "yes",
        ],
        [
            f"Data-dependent \u03b5 (order {F.param(p['order'])})",
            F.eps(p["eps_data_dependent"]),
            "**NO \u2014 INTERNAL**",
        ],
        ["\u03b4", F.delta(p["delta"]), "yes"],
        [
            "Neighbouring relation",
            f"{W.RELATION_TEXT[p['neighbouring_relation']][0]}-level, added or removed",
            "yes",
        ],
        [
            "Mechanism",
            f"{mechanisms.get(p['mechanism']).title} "
            f"({W.params_text(p['mechanism'], p['params'])})",
            "yes",
        ],
        ["Teachers", F.count(p["num_teachers"]), "yes"],
        [
            "Sanitization (fixed in advance)",
            f"\u03bb = {F.param(s['order'])}, \u03b2 = {F.param(s['beta'])}, "
            f"\u03c3_ss = {F.param(s['sigma_ss'])}; noise std {F.sig(s['noise_std'])}, "
            f"release RDP {F.sig(s['rdp_gnss'])}",
            "yes",
        ],
        [
            "Conversion, orders",
            f"{p['conversion']}, {len(p['orders'])} orders in "
            f"[{F.param(min(p['orders']))}, {F.param(max(p['orders']))}]",
            "yes",
        ],
    ]
    if W.samples_records(report):  # no teachers, no sanitized release, no data-dependent analysis
        dropped = ("Sanitized", "Data-dependent", "Teachers")
        rows = [r for r in rows if not r[0].startswith(dropped)]
        rows[0][0] = "Guarantee \u03b5 (everything released, data-independent)"
        rows.append(
            [
                "Sanitized release",
                f"none: no data-dependent analysis for {mechanisms.get(p['mechanism']).title}",
                "yes",
            ]
        )
    return [Heading("Privacy numbers"), _table(["Quantity", "Value", "Publishable"], rows)]


def _why_renyi(report: dict) -> list[Block]:
    """Basic and advanced composition beside the Renyi-DP figure ([M17], [DRV10])."""
    p, q = report["privacy"], report["queries"]
    comp, delta = p["composition"], F.delta(p["delta"])
    rdp_eps = p["eps_data_independent"]
    best_classic = min(comp["basic_eps"], comp["advanced_eps"])
    if best_classic > rdp_eps > 0:
        verdict = (
            f"Renyi-DP accounting is {best_classic / rdp_eps:.1f}\u00d7 tighter than the "
            f"better of the two, for the same mechanism and the same noise."
        )
    else:
        verdict = (
            "Here classic composition is not looser than Renyi-DP accounting (few queries); "
            "the report quotes the Renyi-DP figure, which is never an understatement."
        )
    if mechanisms.get(p["mechanism"]).kind.releases_once:
        text = (
            f"One release labels all {F.count(q['asked'])} queries asked, so nothing is composed "
            f"across queries: the release on its own is (\u03b5\u2080 = "
            f"{F.eps(comp['per_query_eps'])}, \u03b4\u2080 = {F.delta(comp['per_query_delta'])})-"
            f"differentially private, and the classic bounds below are for that one mechanism. "
            f"Renyi-DP accounting (Mironov 2017), used for this report, gives \u03b5 = "
            f"{F.eps(rdp_eps)} at \u03b4 = {delta}. {verdict}"
        )
    else:
        text = (
            f"Each query on its own is (\u03b5\u2080 = {F.eps(comp['per_query_eps'])}, "
            f"\u03b4\u2080 = {F.delta(comp['per_query_delta'])})-differentially private. Composing "
            f"{F.count(comp['queries_composed'])} such queries with basic composition (the "
            f"epsilons add up) gives \u03b5 = {F.eps(comp['basic_eps'])}; advanced composition (Dwork, "
            f"Rothblum and Vadhan 2010) gives \u03b5 = {F.eps(comp['advanced_eps'])} at \u03b4 = "
            f"{F.delta(comp['delta'])}. Renyi-DP accounting (Mironov 2017), used for this report, "
            f"tracks the Gaussian noise exactly across queries and gives \u03b5 = {F.eps(rdp_eps)} "
            f"at \u03b4 = {delta} (data-independent, before any data-dependent saving). {verdict}"
        )
    return [
        Heading("Why Renyi differential privacy"),
        Paragraph(text),
        _table(
            ["Accounting", "\u03b5", "\u03b4"],
            [
                [
                    "Basic composition",
                    F.eps(comp["basic_eps"]),
                    f"{F.count(comp['queries_composed'])} \u00d7 \u03b4\u2080",
                ],
                ["Advanced composition", F.eps(comp["advanced_eps"]), F.delta(comp["delta"])],
                ["Renyi DP (data-independent)", F.eps(rdp_eps), delta],
            ],
        ),
    ]


def _queries_and_budget(report: dict) -> list[Block]:
    """What was asked and answered, the run's budget and why querying stopped."""
    q, budget = report["queries"], report["privacy"]["budget"]
    return [
        Heading("Queries and budget"),
        _table(
            ["Item", "Value"],
            [
                ["Public items available", F.count(q["public_size"])],
                ["Queries asked", F.count(q["asked"])],
                [
                    "Queries answered",
                    f"{F.count(q['answered'])} "
                    f"({F.pct(q['answered'] / q['asked'] if q['asked'] else 0.0)})",
                ],
                ["Labelled by the student (no privacy cost)", F.count(q["labelled_by_student"])],
                [
                    "Run budget",
                    f"\u03b5 = {F.eps(budget['eps'])}, \u03b4 = {F.delta(budget['delta'])} "
                    f"({budget['basis']})",
                ],
                ["Stop reason", q["stop_reason"] or budget["stop_reason"] or "all queries asked"],
            ],
        ),
    ]


def _ledger(report: dict) -> list[Block]:
    """The ledger's cumulative spend on the dataset and its budget's changes (when recorded)."""
    p = report["privacy"]
    blocks: list[Block] = []
    ledger = p["ledger"]
    if ledger is not None:
        blocks += [
            Heading("Privacy ledger (cumulative spend on this dataset)"),
            _table(
                ["Item", "Value"],
                [
                    ["Ledger", ledger["path"]],
                    ["Dataset", ledger["dataset"]],
                    ["Spent \u03b5", F.eps(ledger["spent_eps"])],
                    ["Budget \u03b5", _or_none(F.eps, ledger["budget_eps"])],
                    ["Budget \u03b4", _or_none(F.delta, ledger["budget_delta"])],
                    ["Remaining \u03b5", _or_none(F.eps, ledger["remaining_eps"], "n/a")],
                    ["Runs / events", f"{F.count(ledger['runs'])} / {F.count(ledger['events'])}"],
                ],
            ),
        ]
    changes = p.get("budget_changes") or []
    if changes:
        blocks += [
            Heading("Budget changes (privacy ledger)"),
            _table(
                ["Time (UTC)", "Old \u03b5", "Old \u03b4", "New \u03b5", "New \u03b4"],
                [
                    [
                        c["time_utc"],
                        _or_none(F.eps, c["old_eps"]),
                        _or_none(F.delta, c["old_delta"]),
                        _or_none(F.eps, c["new_eps"]),
                        _or_none(F.delta, c["new_delta"]),
                    ]
                    for c in changes
                ],
            ),
        ]
    return blocks


def _utility(report: dict) -> list[Block]:
    """The accuracies of the student and the teachers, where the teachers trained, per class."""
    u = report["utility"]
    rows = [
        [
            f"Student (evaluation split, {F.count(u['evaluation_size'])} items)"
            + ("" if "student_alone_accuracy" not in u else ", times its labelling rule"),
            F.pct(u["student_accuracy"]),
        ],
        [
            "Teachers, mean \u00b1 std",
            f"{F.pct(u['teacher_mean_accuracy'])} \u00b1 {F.pct(u['teacher_accuracy_std'])}",
        ],
        ["Plurality vote of all teachers (no noise)", F.pct(u["plurality_vote_accuracy"])],
        ["Labels of the answered queries", F.pct(u["label_accuracy_answered"])],
    ]
    if u["teacher_mean_accuracy"] is None:  # no teachers (Private-kNN)
        rows = [rows[0], rows[-1]]
    if "student_alone_accuracy" in u:
        rows.insert(1, ["Student alone", F.pct(u["student_alone_accuracy"])])
    blocks: list[Block] = [Heading("Utility"), _table(["Model", "Accuracy"], rows)]
    note = u["label_accuracy_note"]
    if u["label_accuracy_answered"] is None:
        blocks.append(Paragraph(f"Label accuracy of the answered queries is not available: {note}"))
    else:
        blocks.append(Paragraph(f"**Label accuracy is a benchmark-only figure:** {note}"))
    where = None if W.samples_records(report) else RS.execution_text(report)
    texts = (where, RS.threads_text(report), RS.gpu_memory_text(report), RS.precision_text(report))
    for text in texts:
        if text:
            blocks.append(Paragraph(text))
    blocks.append(
        _table(
            ["Class", "Student accuracy"],
            [
                [n, "n/a (no evaluation items)" if acc is None else F.pct(acc)]
                for n, acc in zip(F.class_names(u), u["student_per_class_accuracy"])
            ],
        )
    )
    return blocks


def _plots(report: dict) -> list[Block]:
    """The publishable plots, then the INTERNAL ones, each with its caption."""
    blocks: list[Block] = [
        Heading("Plots: publishable"),
        Paragraph(
            "These plots show only data-independent figures and released values (no "
            "figure computed from the private votes): they **may be published**."
        ),
        *(Figure(name, W.CAPTIONS[name][0], internal=False) for name in PUBLIC_PLOT_NAMES),
        Heading("Plots: INTERNAL (do not publish)"),
        Paragraph(
            f"These plots draw data-dependent curves or vote margins computed from the "
            f"private teacher votes: **{W.NOT_PRIVATE}**. Publish the versions above "
            f"instead."
        ),
    ]
    for name in INTERNAL_PLOT_NAMES:
        caption = W.CAPTIONS[name][0]
        if name == "vote_margins":
            note = report["vote_margins"]["note"].strip().rstrip(".")
            if note:
                caption += f" Note: {note}."
        blocks.append(Figure(name, caption, internal=True))
    return blocks


def _configuration(report: dict) -> list[Block]:
    """The effective configuration, as JSON."""
    return [
        Heading("Effective configuration"),
        CodeBlock(json.dumps(report["config"], indent=2, sort_keys=True)),
    ]


def _table(header: list[str], rows: list[list[str]]) -> Table:
    return Table(tuple(header), tuple(tuple(row) for row in rows))


def _or_none(fmt, value, missing: str = "none") -> str:
    """``fmt(value)``, or ``missing`` for None."""
    return missing if value is None else fmt(value)
