"""The report's layout: the sections of ``report.md`` and ``report.html``, in order, as typed
blocks (:mod:`pate.run.report.model`) built from the content of ``report.json``
(:func:`pate.run.report.model.build_report`). Markdown and HTML render the same blocks
(:mod:`pate.run.report.render`), so both documents always say the same thing.
"""

from __future__ import annotations

import json

from pate import mechanisms
from pate.run.report import formatting, resources, wording
from pate.run.report.model import (
    PLOT_NAMES,
    PLOTS_DIR,
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
from pate.run.report.publishable import CONDITIONS
from pate.run.report.report_warnings import utility_warnings
from pate.run.report.schema import ANALYSIS_FILE

__all__ = ["document"]


def document(report: dict, *, internal: bool = False) -> list[Block]:
    """The blocks of a report, in order: the title and banners, what the run is worth, the
    privacy statement and warnings, the numbers, the accounting, queries and budget, the
    ledger, utility, plots and configuration. ``report``: the publishable report
    (:func:`pate.run.report.model.public_report`), whose document says only what its fields
    hold, or with ``internal`` the full one (:func:`pate.run.report.model.build_report`), whose
    internal figures are marked."""
    blocks = _title(report, internal)
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
        blocks += section(report, internal)
    return blocks


INTERNAL_BANNER = (
    f"**INTERNAL REPORT \u2014 {wording.NOT_PRIVATE}.** It holds figures computed from the private "
    f"records that no noise covers, marked INTERNAL. For the operator only: keep it in the run "
    f"directory's private/ folder and share the publishable report (report.md, report.html, "
    f"report.json, plots/) instead."
)


def _title(report: dict, internal: bool) -> list[Block]:
    """The title, the internal, smoke-test and seeded-noise banners, the publication rule and
    where the report comes from."""
    run, rule = report["run"], report["publication"]
    if internal:
        blocks: list[Block] = [
            Heading(f"INTERNAL privacy report: {run['name']}", level=1),
            Paragraph(INTERNAL_BANNER),
        ]
    else:
        blocks = [Heading(f"Privacy report: {run['name']}", level=1)]
    if wording.is_smoke_test(report):
        blocks.append(Paragraph(wording.SMOKE_BANNER))
    if report["privacy"].get("noise_seeded") is True:
        blocks.append(Paragraph(wording.SEEDED_BANNER))
    if report["privacy"].get("keys_seeded") is True:
        blocks.append(Paragraph(wording.KEYS_SEEDED_BANNER))
    blocks.append(
        Paragraph(
            f"**{'What may be published' if internal else 'What this report publishes'}:** "
            f"{rule['rule']} **What is internal:** "
            f"{rule['internal']} **What to share:** {rule['share']}"
        )
    )
    origin = (
        f"Run directory {run['run_dir']}, created {run['created']}, run {run.get('run_id', '?')}, "
        if internal
        else ""
    )
    blocks.append(
        Note(
            f"{origin}pate-learn {run['pate_learn_version']}. Generated from {ANALYSIS_FILE}; "
            f"regenerate with `pate report RUN_DIR`."
        )
    )
    return blocks


def _mark(text: str) -> str:
    """A line with its internal mark in bold."""
    return text.replace(wording.INTERNAL_MARK, f"**{wording.INTERNAL_MARK}**")


def _at_a_glance(report: dict, internal: bool) -> list[Block]:
    """The report's first section: what the run is worth, in plain words, with its utility
    warnings (each saying what to change)."""
    q, u = report["queries"], report["utility"]
    if "student_accuracy" in u:
        lines = [
            f"**Student** (the released model): {formatting.pct(u['student_accuracy'])} on "
            f"{formatting.count(u['evaluation_size'])} evaluation items"
            + (
                ""
                if "majority_class_rate" not in u
                else f"; always answering the majority class gives "
                f"{formatting.pct(u['majority_class_rate'])}, guessing {formatting.pct(u['chance_rate'])}"
            )
            + (
                ""
                if u.get("evaluation_public") is True
                else f" ({wording.INTERNAL_MARK} evaluation data not declared public)"
            )
            + "."
        ]
    else:
        lines = [
            "**Student** (the released model): its accuracy was measured on evaluation data "
            "not declared public, so it is in the internal report only."
        ]
    if u.get("teacher_mean_accuracy") is not None:
        lines.append(
            f"**Teachers** ({wording.INTERNAL_MARK} computed from the private records): "
            f"{formatting.pct(u['teacher_mean_accuracy'])} each on average; their noiseless plurality "
            f"vote {formatting.pct(u['plurality_vote_accuracy'])}."
        )
    answered = u.get("answered_labels", q["answered"])
    text = f"**Labels:** {formatting.count(answered)} of {formatting.count(q['asked'])} queries answered"
    if u.get("label_accuracy_answered") is not None:
        text += f", {formatting.pct(u['label_accuracy_answered'])} of them right (benchmark-only figure)"
    agreement = u.get("answered_plurality_agreement")
    if agreement is not None:
        text += (
            f"; {formatting.pct(agreement)} agree with the teachers' plurality vote "
            f"({wording.INTERNAL_MARK} computed from the private votes)"
        )
    lines.append(text + ".")
    if u.get("student_steps") is not None:
        lines.append(
            f"**Student training:** {formatting.count(u['student_steps'])} optimiser steps."
        )
    blocks: list[Block] = [
        Heading("What you get"),
        BulletList(tuple(_mark(line) for line in lines)),
    ]
    warnings = utility_warnings(report)
    if warnings:
        blocks.append(Paragraph("**Utility warnings** (what to change):"))
        blocks.append(BulletList(tuple(_mark(w) for w in warnings)))
    elif "warnings" in u:
        blocks.append(Paragraph("No utility warning on the figures this report holds."))
    return blocks


def _statement(report: dict, internal: bool) -> list[Block]:
    """The plain-language statement (the NOT PRIVATE marks and a weak guarantee in bold), then
    the warnings other than the utility ones (those are in the first section)."""
    blocks: list[Block] = [Heading("Privacy statement")]
    weak = wording.weak_guarantee(report)
    for head, text in wording.statement_paragraphs(report):
        text = text.replace(wording.NOT_PRIVATE, f"**{wording.NOT_PRIVATE}**")
        if weak:
            text = text.replace(weak, f"**{weak}**")
        blocks.append(Paragraph(f"**{head}:** {text}"))
    listed = utility_warnings(report)
    others = [w for w in report["warnings"] if w not in listed]
    if others:
        blocks += [Heading("Warnings"), BulletList(tuple(_mark(w) for w in others))]
    return blocks


_NO = "**NO \u2014 INTERNAL**"


def _epsilon_rows(report: dict) -> list[list[str]]:
    """The rows of every epsilon the report holds: (quantity, value, publishable)."""
    p, s = report["privacy"], report["privacy"]["sanitized"]
    rows = [
        [
            "Guarantee \u03b5 (answers + release, data-independent)",
            formatting.eps(p["eps_guarantee"]),
            "yes",
        ]
    ]
    if "eps_sanitized" in p:
        rows.append(
            ["Sanitized data-dependent \u03b5 (released)", formatting.eps(p["eps_sanitized"])]
        )
        rows[-1].append("yes" if CONDITIONS["release_public"](report) else _NO)
    if "eps_sanitized_upper_2std" in s:
        rows.append(
            ["Sanitized \u03b5 + 2 noise std", formatting.eps(s["eps_sanitized_upper_2std"]), _NO]
        )
    rows.append(
        [
            f"Data-independent \u03b5 of the answers (order {formatting.param(p['order_data_independent'])})",
            formatting.eps(p["eps_data_independent"]),
            "yes",
        ]
    )
    if "eps_data_dependent" in p:
        rows.append(
            [
                f"Data-dependent \u03b5 (order {formatting.param(p['order'])})",
                formatting.eps(p["eps_data_dependent"]),
                _NO,
            ]
        )
    return rows


def _privacy_numbers(report: dict, internal: bool) -> list[Block]:
    """Every epsilon the report holds and the run's privacy settings; in the internal report,
    whether each may be published."""
    p = report["privacy"]
    s = p["sanitized"]
    rows = _epsilon_rows(report)
    rows += [
        ["\u03b4", formatting.delta(p["delta"]), "yes"],
        [
            "Neighbouring relation",
            f"{wording.RELATION_TEXT[p['neighbouring_relation']][0]}-level, added or removed",
            "yes",
        ],
        [
            "Mechanism",
            f"{mechanisms.get(p['mechanism']).title} "
            f"({wording.params_text(p['mechanism'], p['params'])})",
            "yes",
        ],
    ]
    if "num_teachers" in p:
        rows.append(
            [
                "Teachers",
                formatting.count(p["num_teachers"]),
                "yes" if CONDITIONS["teachers"](report) else _NO,
            ]
        )
    rows.append(
        [
            "Sanitization (fixed in advance)",
            f"\u03bb = {formatting.param(s['order'])}, \u03b2 = {formatting.param(s['beta'])}, "
            f"\u03c3_ss = {formatting.param(s['sigma_ss'])}; release RDP {formatting.sig(s['rdp_gnss'])}",
            "yes",
        ]
    )
    if "smooth_sensitivity" in s:
        rows.append(
            [
                "Smooth sensitivity; sanitization noise std",
                f"{formatting.sig(s['smooth_sensitivity'])}; {formatting.sig(s['noise_std'])}",
                _NO,
            ]
        )
    rows.append(
        [
            "Conversion, orders",
            f"{p['conversion']}, {len(p['orders'])} orders in "
            f"[{formatting.param(min(p['orders']))}, {formatting.param(max(p['orders']))}]",
            "yes",
        ]
    )
    if "records" in p:
        rows.append(_records_row(p["records"]))
    if wording.samples_records(
        report
    ):  # no teachers, no sanitized release, no data-dependent analysis
        dropped = ("Sanitized", "Data-dependent", "Teachers", "Smooth")
        rows = [r for r in rows if not r[0].startswith(dropped)]
        rows[0][0] = "Guarantee \u03b5 (everything released, data-independent)"
        rows.append(
            [
                "Sanitized release",
                f"none: no data-dependent analysis for {mechanisms.get(p['mechanism']).title}",
                "yes",
            ]
        )
    if internal:
        return [Heading("Privacy numbers"), _table(["Quantity", "Value", "Publishable"], rows)]
    return [Heading("Privacy numbers"), _table(["Quantity", "Value"], [r[:2] for r in rows])]


def _records_row(records: dict) -> list[str]:
    """The number of private records the run was sized from: declared, or a built-in dataset's
    published size; never the exact count, which is internal."""
    basis = (
        "declared by the user"
        if records["basis"] == "declared"
        else "the built-in dataset's published size"
    )
    return [
        "Private records the run was sized from",
        f"{formatting.count(records['declared'])} ({basis}; the exact count is internal)",
        "yes",
    ]


def _why_renyi(report: dict, internal: bool) -> list[Block]:
    """Basic and advanced composition beside the Renyi-DP figure ([M17], [DRV10])."""
    p, q = report["privacy"], report["queries"]
    comp, delta = p["composition"], formatting.delta(p["delta"])
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
            f"One release labels all {formatting.count(q['asked'])} queries asked, so nothing is composed "
            f"across queries: the release on its own is (\u03b5\u2080 = "
            f"{formatting.eps(comp['per_query_eps'])}, \u03b4\u2080 = {formatting.delta(comp['per_query_delta'])})-"
            f"differentially private, and the classic bounds below are for that one mechanism. "
            f"Renyi-DP accounting (Mironov 2017), used for this report, gives \u03b5 = "
            f"{formatting.eps(rdp_eps)} at \u03b4 = {delta}. {verdict}"
        )
    else:
        text = (
            f"Each query on its own is (\u03b5\u2080 = {formatting.eps(comp['per_query_eps'])}, "
            f"\u03b4\u2080 = {formatting.delta(comp['per_query_delta'])})-differentially private. Composing "
            f"{formatting.count(comp['queries_composed'])} such queries with basic composition (the "
            f"epsilons add up) gives \u03b5 = {formatting.eps(comp['basic_eps'])}; advanced composition (Dwork, "
            f"Rothblum and Vadhan 2010) gives \u03b5 = {formatting.eps(comp['advanced_eps'])} at \u03b4 = "
            f"{formatting.delta(comp['delta'])}. Renyi-DP accounting (Mironov 2017), used for this report, "
            f"tracks the Gaussian noise exactly across queries and gives \u03b5 = {formatting.eps(rdp_eps)} "
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
                    formatting.eps(comp["basic_eps"]),
                    f"{formatting.count(comp['queries_composed'])} \u00d7 \u03b4\u2080",
                ],
                [
                    "Advanced composition",
                    formatting.eps(comp["advanced_eps"]),
                    formatting.delta(comp["delta"]),
                ],
                ["Renyi DP (data-independent)", formatting.eps(rdp_eps), delta],
            ],
        ),
    ]


def _queries_and_budget(report: dict, internal: bool) -> list[Block]:
    """What was asked and answered, the run's budget and why querying stopped."""
    q, budget = report["queries"], report["privacy"]["budget"]
    return [
        Heading("Queries and budget"),
        _table(
            ["Item", "Value"],
            [
                ["Public items available", formatting.count(q["public_size"])],
                ["Queries asked", formatting.count(q["asked"])],
                [
                    "Queries answered",
                    f"{formatting.count(q['answered'])} "
                    f"({formatting.pct(q['answered'] / q['asked'] if q['asked'] else 0.0)})",
                ],
                [
                    "Labelled by the student (no privacy cost)",
                    formatting.count(q["labelled_by_student"]),
                ],
                [
                    "Run budget",
                    f"\u03b5 = {formatting.eps(budget['eps'])}, \u03b4 = {formatting.delta(budget['delta'])} "
                    f"({budget['basis']})",
                ],
                ["Stop reason", q["stop_reason"] or budget["stop_reason"] or "all queries asked"],
            ],
        ),
    ]


def _ledger(report: dict, internal: bool) -> list[Block]:
    """The ledger's cumulative spend on the dataset and its budget's changes (when recorded);
    its path and key only in the internal report."""
    p = report["privacy"]
    blocks: list[Block] = []
    ledger = p["ledger"] if "ledger" in p else None
    if ledger is not None:
        rows = [
            ["Dataset", wording.dataset_name(ledger)],
            ["Spent \u03b5", formatting.eps(ledger["spent_eps"])],
            ["Budget \u03b5", _or_none(formatting.eps, ledger.get("budget_eps"))],
            ["Budget \u03b4", _or_none(formatting.delta, ledger.get("budget_delta"))],
            ["Remaining \u03b5", _or_none(formatting.eps, ledger.get("remaining_eps"), "n/a")],
            [
                "Runs / events",
                f"{formatting.count(ledger['runs'])} / {formatting.count(ledger['events'])}",
            ],
        ]
        if "path" in ledger:
            rows.insert(0, ["Ledger (INTERNAL: a path on this machine)", ledger["path"]])
        blocks += [
            Heading("Privacy ledger (cumulative spend on this dataset)"),
            _table(["Item", "Value"], rows),
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
                        _or_none(formatting.eps, c["old_eps"]),
                        _or_none(formatting.delta, c["old_delta"]),
                        _or_none(formatting.eps, c["new_eps"]),
                        _or_none(formatting.delta, c["new_delta"]),
                    ]
                    for c in changes
                ],
            ),
        ]
    return blocks


def _utility(report: dict, internal: bool) -> list[Block]:
    """The accuracies of the student (where its evaluation data is public, or in the internal
    report, marked) and of the teachers (internal), where the teachers trained, per class."""
    u = report["utility"]
    mark = (
        "" if u.get("evaluation_public") is True else f" ({wording.INTERNAL_MARK} evaluation data)"
    )
    rows = []
    if "student_accuracy" in u:
        rows.append(
            [
                f"Student (evaluation split, {formatting.count(u['evaluation_size'])} items)"
                + ("" if "student_alone_accuracy" not in u else ", times its labelling rule")
                + mark,
                formatting.pct(u["student_accuracy"]),
            ]
        )
    if "student_alone_accuracy" in u:
        rows.append([f"Student alone{mark}", formatting.pct(u["student_alone_accuracy"])])
    if u.get("teacher_mean_accuracy") is not None:
        rows += [
            [
                f"Teachers, mean \u00b1 std ({wording.INTERNAL_MARK} private records)",
                f"{formatting.pct(u['teacher_mean_accuracy'])} \u00b1 {formatting.pct(u['teacher_accuracy_std'])}",
            ],
            [
                f"Plurality vote of all teachers, no noise ({wording.INTERNAL_MARK} private votes)",
                formatting.pct(u["plurality_vote_accuracy"]),
            ],
        ]
    rows.append(
        ["Labels of the answered queries", formatting.pct(u.get("label_accuracy_answered"))]
    )
    blocks: list[Block] = [
        Heading("Utility"),
        _table(["Model", "Accuracy"], [[_mark(a), b] for a, b in rows]),
    ]
    if "student_accuracy" not in u:
        blocks.append(
            Paragraph(
                "The student's accuracy, per class and its confusion matrix were measured on "
                "evaluation data not declared public: they are internal "
                "(private/report_internal.md)."
            )
        )
    note = u["label_accuracy_note"]
    if u.get("label_accuracy_answered") is None:
        blocks.append(Paragraph(f"Label accuracy of the answered queries is not available: {note}"))
    else:
        blocks.append(Paragraph(f"**Label accuracy is a benchmark-only figure:** {note}"))
    where = None if wording.samples_records(report) else resources.execution_text(report)
    texts = (
        where,
        resources.threads_text(report),
        resources.gpu_memory_text(report),
        resources.precision_text(report),
    )
    for text in texts:
        if text:
            blocks.append(Paragraph(text))
    if "student_per_class_accuracy" in u:
        blocks.append(
            _table(
                ["Class", f"Student accuracy{mark}"],
                [
                    [n, "n/a (no evaluation items)" if acc is None else formatting.pct(acc)]
                    for n, acc in zip(formatting.class_names(u), u["student_per_class_accuracy"])
                ],
            )
        )
    return blocks


def _plots(report: dict, internal: bool) -> list[Block]:
    """The publishable plots, then (in the internal report) the INTERNAL ones, each with its
    caption."""
    public = [
        name
        for name in PUBLIC_PLOT_NAMES
        if report["plots"].get(name, "").startswith(PLOTS_DIR + "/")
    ]
    blocks: list[Block] = [
        Heading("Plots: publishable"),
        Paragraph(
            "These plots show only data-independent figures, released values and figures on "
            "data declared public: they **may be published**."
        ),
        *(Figure(name, wording.CAPTIONS[name], internal=False) for name in public),
    ]
    if not internal:
        return blocks
    blocks += [
        Heading("Plots: INTERNAL (do not publish)"),
        Paragraph(
            f"These plots draw data-dependent curves or vote margins computed from the "
            f"private teacher votes, or figures on evaluation data not declared public: "
            f"**{wording.NOT_PRIVATE}**. Publish the versions above instead."
        ),
    ]
    for name in PLOT_NAMES:
        if name in public:
            continue
        caption = wording.CAPTIONS[name]
        if name == "vote_margins":
            note = report["vote_margins"]["note"].strip().rstrip(".")
            if note:
                caption += f" Note: {note}."
        blocks.append(Figure(name, caption, internal=True))
    return blocks


def _configuration(report: dict, internal: bool) -> list[Block]:
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
