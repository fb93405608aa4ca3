"""The report's words: the plain-language privacy statement (:func:`plain_language_statement`,
as (heading, text) paragraphs in :func:`statement_paragraphs`), the plot captions (:data:`CAPTIONS`) and the sentences the layout
reuses (banners).

Every figure comes from a validated ``analysis.json`` (:mod:`pate.run.report.schema`); the
mechanism's name, description and parameter symbols come from its spec in
:mod:`pate.mechanisms`. The data-dependent epsilon, computed from the private votes, is always
marked :data:`NOT_PRIVATE`.
"""

from __future__ import annotations

import math

from pate import mechanisms
from pate.run.config import RunConfig
from pate.run.report import formatting

__all__ = [
    "CAPTIONS",
    "INTERNAL_MARK",
    "NOT_PRIVATE",
    "RELATION_TEXT",
    "SEEDED_BANNER",
    "KEYS_SEEDED_BANNER",
    "SMOKE_BANNER",
    "WEAK_EPSILON",
    "dataset_name",
    "is_smoke_test",
    "params_text",
    "plain_language_statement",
    "samples_records",
    "statement_paragraphs",
    "weak_guarantee",
]

NOT_PRIVATE = "NOT PRIVATE \u2014 for internal use only, do not publish"
#: The mark of an internal line of a list (a warning that fires on an internal figure).
INTERNAL_MARK = "INTERNAL (do not publish):"
#: A guarantee epsilon above this gets the "protects individuals very weakly" warning.
WEAK_EPSILON = 10.0

# (short name, "adding or removing ..." phrase, what the relation means, what it does not claim)
RELATION_TEXT = {
    "record": (
        "record",
        "adding or removing any one record",
        "Record-level: two training sets are neighbours when they differ by one sensitive record "
        "(added or removed), so the guarantee bounds what anyone can learn about any single record.",
        "Unit-level protection (all records of one person added or removed at once) is NOT claimed; "
        "a person who contributed several records is protected only by group privacy, with a "
        "correspondingly larger epsilon.",
    ),
    "unit": (
        "unit",
        "adding or removing all records of any one privacy unit (person)",
        "Unit-level: two training sets are neighbours when they differ by all records of one "
        "privacy unit, e.g. one patient or customer (added or removed), so the guarantee bounds "
        "what anyone can learn about any one person, however many records they contributed.",
        "This is stronger than record-level protection (one sensitive record added or removed), "
        "which it implies; it holds because the sensitive data was split among the teachers by "
        "unit, so all records of one person reached the same teacher.",
    ),
}


def params_text(mechanism: str, params: dict) -> str:
    """The mechanism's parameters with their symbols ("T = 200, σ₁ = 150, ...")."""
    if not params:
        return "no parameters"
    symbols = {p.name: p.display for p in mechanisms.get(mechanism).params}
    return ", ".join(f"{symbols.get(k, k)} = {formatting.param(v)}" for k, v in params.items())


def samples_records(a: dict) -> bool:
    """The run's mechanism reads the private records itself: no teachers, no
    data-dependent analysis, no sanitized release; its wording comes from its spec."""
    return mechanisms.get(a["privacy"]["mechanism"]).kind.reads_private_records


def _rule_text(a: dict) -> str:
    """How a run whose one release labels every query labelled from it ("" for
    any other mechanism)."""
    if not mechanisms.get(a["privacy"]["mechanism"]).kind.releases_once:
        return ""
    from pate.core.labelling_rules import RULE_TEXT

    rule = RunConfig.parse(a["config"]).knn.labelling_rule
    return f'Labelling rule ([knn] rule = "{rule}", post-processing): {RULE_TEXT[rule]}. '


def _mechanism_text(mechanism: str) -> str:
    """ "Title [reference]: description" of a registered mechanism."""
    spec = mechanisms.get(mechanism)
    return f"{spec.title} [{spec.reference}]: {spec.description}"


_SEEDED_HEAD = "NOT DIFFERENTIALLY PRIVATE (seeded noise)"
_SEEDED_TEXT = (
    "The aggregator's noise was seeded: it came from a seed given by the user, so this run is "
    "reproducible and its noise can be replayed exactly \u2014 and anyone with the seed can remove "
    "it: this run is NOT differentially private; do not publish its outputs (the student, its "
    "labels or the figures below). The epsilons below describe what the same run would guarantee "
    "with secret noise; rerun with secure noise ([run] secure = true, or --secure) for a private "
    "release."
)
_SAME_RELATION = (
    " Every bound in this report, the partition and the ledger's budget are stated for this one "
    "relation (adding or removing), the one DP-SGD (Opacus, dp_accounting) states its epsilon for."
)
_LEDGER_OFF = (
    " The privacy ledger was turned off for this run: no budget was enforced across runs on this "
    "data, so the figures below cover this run alone and nothing stopped earlier or later runs "
    "from spending more on the same records."
)


_SMOKE_HEAD = "SMOKE TEST"
_SMOKE_TEXT = (
    "This run is a smoke test: it only checks that the pipeline works end to end ([run] "
    "smoke_test = true in its configuration). Its privacy figures are not a meaningful guarantee "
    "and its student is not fit for use: do not quote or publish them."
)
SMOKE_BANNER = (
    "**SMOKE TEST: this run only checks that the pipeline works; its privacy figures "
    "are not a meaningful guarantee. Do not quote or publish them.**"
)

KEYS_SEEDED_BANNER = (
    "**This run's keys are seeded, not private: they were derived from [run] seed, so anyone "
    "who knows the seed can tell which teacher saw which record. Leave [run] seed unset for keys "
    "from OS entropy, kept in the run's private folder.**"
)
SEEDED_BANNER = (
    "**This run is NOT differentially private: its noise was seeded by the user. Do "
    "not publish its outputs (see the privacy statement).**"
)


def is_smoke_test(a: dict) -> bool:
    """``run.smoke_test`` (false when absent, as in older analysis.json files)."""
    return a["run"].get("smoke_test") is True


def _odds_factor(eps: float) -> str:
    """e^eps in words: "22,000" (2 significant digits) up to a million, "4.9 × 10^8" up to
    e^50, then "more than 10^k" (the figure is meaningless by then; only its size matters)."""
    log10 = eps / math.log(10.0)
    if log10 < 6.0:
        return f"{float(f'{math.exp(eps):.2g}'):,.0f}"
    exponent = math.floor(log10)
    if eps >= 50.0:
        return f"more than 10^{exponent:,}"
    mantissa = round(10.0 ** (log10 - exponent), 1)
    if mantissa >= 10.0:
        mantissa, exponent = mantissa / 10.0, exponent + 1
    return f"\u2248 {mantissa:g} \u00d7 10^{exponent}"


def _prior_rounds(p: dict) -> str:
    """The clause naming the earlier rounds composed into the guarantee ("" when none)."""
    prior = p.get("prior_rounds")
    if not prior:
        return ""
    runs = ", ".join(
        f"{r['run_dir']} (\u03b5 = {formatting.eps(r['eps'])})"
        if "run_dir" in r
        else formatting.eps(r["eps"])
        for r in prior["runs"]
    )
    return (
        f", composed with the cost of the earlier rounds whose released student embeds "
        f"this run's neighbour search: {runs}. On their own, the earlier rounds cost "
        f"\u03b5 = {formatting.eps(prior['eps'])} and this run's queries \u03b5 = "
        f"{formatting.eps(p['eps_data_independent'])}"
    )


def weak_guarantee(a: dict) -> str | None:
    """The warning sentence for a guarantee epsilon above :data:`WEAK_EPSILON`, else None."""
    p = a["privacy"]
    eps = p["eps_guarantee"]
    if not eps > WEAK_EPSILON:
        return None
    who = "record" if p["neighbouring_relation"] == "record" else "person (privacy unit)"
    if math.isinf(eps):
        return (
            f"This bound protects individuals not at all: an infinite epsilon puts no limit on "
            f"how much an attacker's odds about any one {who} can change."
        )
    factor = _odds_factor(eps)
    if factor.startswith("more"):
        factor = f", {factor}"
    elif not factor.startswith("\u2248"):
        factor = f" \u2248 {factor}"
    else:
        factor = f" {factor}"
    text = (
        f"This bound protects individuals very weakly: an epsilon above "
        f"{formatting.param(WEAK_EPSILON)} allows an attacker's odds about any one {who} to change by "
        f"a factor of e^{formatting.eps(eps)}{factor}"
    )
    if eps >= 50.0:
        text += ", which is no meaningful protection"
    return text + "."


def statement_paragraphs(a: dict) -> list[tuple[str, str]]:
    """(heading, text) pairs of the plain-language statement of a (validated) analysis."""
    paras = _opening_paragraphs(a)
    paras += _mechanism_paragraphs(a)
    paras.append(("Queries", _queries_text(a)))
    paras += _records_guarantee(a) if samples_records(a) else _teachers_guarantee(a)
    paras.append(("Utility", _utility_text(a["utility"])))
    paras += _ledger_paragraphs(a["privacy"])
    return paras


def _opening_paragraphs(a: dict) -> list[tuple[str, str]]:
    """Seeded noise first (the statement of a non-private run opens by saying so), then a smoke
    test (the report's banners put the smoke test first, on the line under the title), then what
    is protected."""
    p = a["privacy"]
    short, _, relation, other = RELATION_TEXT[p["neighbouring_relation"]]
    ledger_off = _LEDGER_OFF if p.get("ledger_enforced") is False else ""
    paras = []
    if p.get("noise_seeded") is True:
        paras.append((_SEEDED_HEAD, _SEEDED_TEXT + ledger_off))
        ledger_off = ""
    if is_smoke_test(a):
        paras.append((_SMOKE_HEAD, _SMOKE_TEXT))
    split = (
        ""
        if samples_records(a)
        else f" The teachers' split decides each {short}'s teacher from the {short} alone (a keyed "
        f"hash), so adding or removing one changes one teacher's vote."
    )
    paras.append(
        (
            "What is protected",
            (
                f"This run protects the sensitive training data at the {short} level. {relation} {other}"
                f"{split}{_SAME_RELATION}" + ledger_off
            ),
        )
    )
    return paras


def _mechanism_paragraphs(a: dict) -> list[tuple[str, str]]:
    """The mechanism, its parameters and accounting; how its noise was calibrated, if it was."""
    p = a["privacy"]
    paras = [
        (
            "Mechanism",
            (
                f"{_mechanism_text(p['mechanism'])} Parameters: "
                f"{params_text(p['mechanism'], p['params'])}; "
                + (
                    f"no teachers: {mechanisms.get(p['mechanism']).voters_text}. {_rule_text(a)}"
                    if samples_records(a)
                    else f"{formatting.count(p['num_teachers'])} teachers, each trained on a disjoint part of the "
                    f"sensitive data. "
                )
                + f"Privacy is accounted with Renyi differential privacy over {len(p['orders'])} "
                f"orders and converted to (\u03b5, \u03b4) with the {p['conversion']} conversion at "
                f"\u03b4 = {formatting.delta(p['delta'])}."
            ),
        )
    ]
    cal = p.get("calibration")
    if cal:
        chosen = params_text(p["mechanism"], cal["calibrated"])
        paras.append(
            (
                "Calibration",
                (
                    f"The noise was calibrated for a target before any data was seen: {chosen}, "
                    f"{cal['method']}. The realised guarantee below is at most the target "
                    f"(ε = {formatting.eps(cal['target_eps'])}); it is lower when fewer queries were answered "
                    "than the calibration assumed."
                ),
            )
        )
    return paras


def _queries_text(a: dict) -> str:
    """How many public items were asked and answered, and why querying stopped."""
    p, q = a["privacy"], a["queries"]
    answered_frac = q["answered"] / q["asked"] if q["asked"] else 0.0
    text = (
        f"The student asked {'the private records' if samples_records(a) else 'the teachers'} "
        f"about {formatting.count(q['asked'])} of "
        f"{formatting.count(q['public_size'])} public items (declared public by the user); "
        f"{formatting.count(q['answered'])} ({formatting.pct(answered_frac)}) were answered and used as training "
        "labels."
    )
    from_pool = (a.get("utility") or {}).get("public_from_pool") or 0
    if from_pool:
        text += (
            f" {formatting.count(from_pool)} of the public items are rows of the user's own file marked "
            "public: the teachers label them and the student learns from them WITHOUT any "
            "privacy protection (this report's guarantee does not cover them)."
        )
    if q["labelled_by_student"]:
        text += (
            f" A further {formatting.count(q['labelled_by_student'])} public items were labelled by "
            f"the student itself (semi-supervised training), at no privacy cost."
        )
    stop = q["stop_reason"] or p["budget"]["stop_reason"]
    if stop:
        text += f" Querying stopped early: {stop}."
    return text


def _guarantee_opening(a: dict) -> str:
    """The guarantee paragraph up to "everything the run releases \u2014 the student model"."""
    p = a["privacy"]
    weak = weak_guarantee(a)
    return (
        f"The released student satisfies (\u03b5 = {formatting.eps(p['eps_guarantee'])}, \u03b4 = "
        f"{formatting.delta(p['delta'])})-differential privacy with respect to "
        f"{RELATION_TEXT[p['neighbouring_relation']][1]} of the sensitive training data. "
        + (f"{weak} " if weak else "")
        + "This bound holds for everything the run releases \u2014 the student model"
    )


def _records_guarantee(a: dict) -> list[tuple[str, str]]:
    """The guarantee of a mechanism that samples the private records itself (no teachers): its
    cost does not depend on the data, and nothing data-dependent is released."""
    p, q = a["privacy"], a["queries"]
    spec = mechanisms.get(p["mechanism"])
    return [
        (
            "Guarantee",
            (
                _guarantee_opening(a)
                + (
                    ", the labels it was trained on and the labelling rule's class scores of every "
                    "item (label_scores.npy, post-processing of the same release)"
                    if spec.kind.gives_label_scores
                    else " and the labels it was trained on"
                )
                + " \u2014 whatever the data: it is "
                + spec.cost_text.format(asked=formatting.count(q["asked"]))
                + f" (order \u03bb = {formatting.param(p['order_data_independent'])})"
                + _prior_rounds(p)
                + "."
            ),
        ),
        (
            "No sanitized release",
            (
                f"{spec.title} has no data-dependent or smooth-sensitivity analysis: its cost does not "
                f"depend on the data, so there is no sanitized epsilon and no "
                f"data-dependent epsilon to release; the guarantee above is the figure to quote."
            ),
        ),
    ]


def _teachers_guarantee(a: dict) -> list[tuple[str, str]]:
    """The guarantee of a teachers' run, its sanitized data-dependent epsilon and the raw
    data-dependent one (:data:`NOT_PRIVATE`)."""
    p, q = a["privacy"], a["queries"]
    paras = [
        (
            "Guarantee",
            (
                _guarantee_opening(a)
                + ", the labels "
                + (
                    "it was trained on and the sanitized epsilon below"
                    if "eps_sanitized" in p
                    else "it was trained on"
                )
                + f" \u2014 whatever the data: it is the "
                f"data-independent cost of the {formatting.count(q['answered'])} answers "
                f"(\u03b5 = {formatting.eps(p['eps_data_independent'])} on its own, at order "
                f"\u03bb = {formatting.param(p['order_data_independent'])}) composed with the cost of releasing the "
                f"sanitized epsilon."
            ),
        ),
        ("Sanitized data-dependent epsilon", _sanitized_text(p)),
    ]
    if "eps_data_dependent" not in p:  # the publishable report: nothing computed from the votes
        return paras
    return paras + [
        (
            "Data-dependent epsilon",
            (
                f"\u03b5 = {formatting.eps(p['eps_data_dependent'])} (order \u03bb = {formatting.param(p['order'])}) "
                f"\u2014 {NOT_PRIVATE}. It is computed directly from the private teacher votes, so "
                f"publishing it would itself leak information about the sensitive data; it is shown for "
                f"tuning and for checking the sanitized figure only. The vote-margin histogram and the "
                f"data-dependent curves in the plots are likewise internal ({NOT_PRIVATE}): they are "
                f"derived from the private votes."
            ),
        ),
    ]


def _sanitized_text(p: dict) -> str:
    """The sanitized data-dependent epsilon: its smooth-sensitivity release, or its fallback to
    the data-independent cost. The smooth sensitivity, the noise it scales and the conservative
    reading built on them are INTERNAL: only the internal report holds and says them."""
    s, delta = p["sanitized"], formatting.delta(p["delta"])
    fixed = (
        f"The order \u03bb = {formatting.param(s['order'])}, smoothness \u03b2 = "
        f"{formatting.param(s['beta'])} and noise multiplier \u03c3_ss = {formatting.param(s['sigma_ss'])} "
        f"were fixed in the configuration before the votes were seen"
    )
    if "eps_sanitized" not in p:
        return (
            f"None is published: the smooth-sensitivity release was not charged to the ledger, "
            f"so only the guarantee above may be quoted. {fixed}."
        )
    if s["fallback"] is not None:
        text = (
            f"\u03b5 = {formatting.eps(p['eps_sanitized'])} (\u03b4 = {delta}). The smooth-sensitivity "
            f"release fell back to the data-independent cost at order "
            f"\u03bb = {formatting.param(s['order'])} because {s['fallback']}; no noise was added and "
            f"nothing data-dependent is released. The release parameters (smoothness "
            f"\u03b2 = {formatting.param(s['beta'])}, noise multiplier \u03c3_ss = "
            f"{formatting.param(s['sigma_ss'])}) were fixed in the configuration before the votes were seen."
        )
    else:
        if "smooth_sensitivity" in s:
            noise = (
                f"Gaussian noise of standard deviation {formatting.sig(s['noise_std'])} (smooth "
                f"sensitivity {formatting.sig(s['smooth_sensitivity'])} \u00d7 \u03c3_ss; both "
                f"{NOT_PRIVATE}: the smooth sensitivity is computed from the private votes)"
            )
        else:
            noise = (
                "Gaussian noise scaled by the smooth sensitivity of the votes times \u03c3_ss "
                "(the smooth sensitivity itself is computed from the private votes and is not "
                "published)"
            )
        text = (
            f"\u03b5 = {formatting.eps(p['eps_sanitized'])} (\u03b4 = {delta}), released with its own "
            f"charge. When the teachers agree strongly, the data-dependent analysis of Papernot "
            f"et al. (2018) charges much less than the worst case, but it is computed from the "
            f"private votes, so it is published only after sanitization with the "
            f"smooth-sensitivity (GNSS) mechanism: {noise} was added to the Renyi divergence at "
            f"order \u03bb = {formatting.param(s['order'])}. {fixed}, and the cost of this release (Renyi "
            f"divergence {formatting.sig(s['rdp_gnss'])} at order \u03bb) is included in the figure. It is "
            f"a private measurement of the privacy loss actually incurred on this data, not a "
            f"worst-case bound."
        )
        if "eps_sanitized_upper_2std" in s:
            text += (
                f" Because of the noise, a conservative reading adds two standard deviations: "
                f"\u03b5 \u2264 {formatting.eps(s['eps_sanitized_upper_2std'])} ({NOT_PRIVATE})."
            )
    if p["eps_sanitized"] >= p["eps_guarantee"]:
        text += (
            " Here it is not smaller than the guarantee above, which remains the figure to quote."
        )
    return text


def _utility_text(u: dict) -> str:
    """The student's accuracy where the evaluation data is public (in the internal report:
    always, marked), beside the teachers' (internal report only, marked)."""
    if "student_accuracy" not in u:
        return (
            "The student's accuracy was measured on evaluation data not declared public, so it "
            "is internal (private/report_internal.md); declare the evaluation data public to "
            "publish it."
        )
    internal = "" if u.get("evaluation_public") is True else f" ({NOT_PRIVATE})"
    text = (
        f"The student's accuracy is {formatting.pct(u['student_accuracy'])} on "
        f"{formatting.count(u['evaluation_size'])} held-out evaluation items{internal}"
    )
    if u.get("teacher_mean_accuracy") is not None:
        text += (
            f"; teachers: {formatting.pct(u['teacher_mean_accuracy'])} on average; the noiseless "
            f"plurality vote of all teachers: {formatting.pct(u['plurality_vote_accuracy'])} "
            f"({NOT_PRIVATE}: computed from the private votes)"
        )
    text += "."
    if "student_alone_accuracy" in u:
        text += (
            f" The released model is the student times its labelling rule (their class "
            f"probabilities multiplied: post-processing of the one release and of public data, no "
            f"further privacy cost); the student alone: {formatting.pct(u['student_alone_accuracy'])}."
        )
    return text


def _ledger_paragraphs(p: dict) -> list[tuple[str, str]]:
    """The ledger's cumulative spend on the dataset and the changes of its budget."""
    paras = []
    ledger = p.get("ledger")  # absent from the publishable report when there was none
    if ledger is not None:
        where = f" ({ledger['path']})" if "path" in ledger else ""
        text = (
            f"The privacy ledger{where} records "
            f"\u03b5 = {formatting.eps(ledger['spent_eps'])} spent on dataset {dataset_name(ledger)} over "
            f"{formatting.count(ledger['runs'])} run(s) ({formatting.count(ledger['events'])} events), this run "
            f"included."
        )
        if ledger["budget_eps"] is not None:
            text += f" The dataset's budget is \u03b5 = {formatting.eps(ledger['budget_eps'])}"
            if ledger["budget_delta"] is not None:
                text += f" at \u03b4 = {formatting.delta(ledger['budget_delta'])}"
            if ledger["remaining_eps"] is not None:
                text += f"; \u03b5 = {formatting.eps(ledger['remaining_eps'])} remains"
            text += "."
        paras.append(("Cumulative spend", text))
    changes = p.get("budget_changes") or []
    if changes:
        listed = "; ".join(
            f"at {c['time_utc']}, from {_budget_text(c['old_eps'], c['old_delta'])} to "
            f"{_budget_text(c['new_eps'], c['new_delta'])}"
            for c in changes
        )
        paras.append(
            (
                "Budget changes",
                (
                    f"The dataset's privacy budget was changed {formatting.count(len(changes))} time(s) in the "
                    f"ledger: {listed}. A budget raised after spending no longer bounds the total "
                    f"privacy loss of the dataset by the original figure."
                ),
            )
        )
    return paras


def dataset_name(ledger: dict) -> str:
    """The dataset as the user named it (the ledger's key beside it in the internal report)."""
    name, key = ledger.get("name"), ledger.get("dataset")
    if key is None or key == name:
        return str(name)
    return f"{name} (ledger key {key})" if name else str(key)


def _budget_text(eps: float | None, delta: float | None) -> str:
    if eps is None:
        return "no budget"
    text = f"\u03b5 = {formatting.eps(eps)}"
    return text if delta is None else f"{text}, \u03b4 = {formatting.delta(delta)}"


def plain_language_statement(analysis: dict) -> str:
    """The plain-language privacy statement of a (validated) analysis, as plain text paragraphs
    separated by blank lines. The data-dependent epsilon is marked :data:`NOT_PRIVATE`."""
    return "\n\n".join(f"{head}: {text}" for head, text in statement_paragraphs(analysis))


# The caption of each plot (which are internal: pate.run.report.model.INTERNAL_PLOT_NAMES).
CAPTIONS: dict[str, str] = {
    "epsilon_vs_answered": (
        "Epsilon (at the run's \u03b4) against the number of answered queries: data-independent "
        "(publishable) and data-dependent (internal)."
    ),
    "vote_margins": (
        "Histogram of vote margins (top-1 minus top-2 vote count) over the queries asked."
    ),
    "rdp_per_order": (
        "Renyi-DP of the whole run at each order (log scale), data-independent and "
        "data-dependent (internal), with the orders chosen for the conversion marked."
    ),
    "confusion_matrix": (
        "Confusion matrix of the student on the evaluation split (rows: true class, "
        "columns: predicted class)."
    ),
    "epsilon_vs_answered_public": (
        "Data-independent epsilon (at the run's \u03b4) against the number of answered queries, "
        "with the guarantee and the sanitized epsilon that the run releases; no data-dependent "
        "curve."
    ),
    "rdp_per_order_public": (
        "Data-independent Renyi-DP of the run's queries at each order (log scale), with the "
        "order chosen for the conversion marked; no data-dependent curve."
    ),
}
