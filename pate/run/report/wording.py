"""The report's words: the plain-language privacy statement (:func:`plain_language_statement`,
as (heading, text) paragraphs in :func:`statement_paragraphs`), the warnings
(:func:`report_warnings`), the plot captions (:data:`CAPTIONS`) and the sentences the layout
reuses (banners).

Every figure comes from a validated ``analysis.json`` (:mod:`pate.run.report.schema`); the
mechanism's name, description and parameter symbols come from its spec in
:mod:`pate.mechanisms`. The data-dependent epsilon, computed from the private votes, is always
marked :data:`NOT_PRIVATE`.
"""

from __future__ import annotations

import math

from pate import mechanisms
from pate.run import config as C
from pate.run.report import formatting as F

__all__ = [
    "CAPTIONS",
    "NOT_PRIVATE",
    "RELATION_TEXT",
    "SEEDED_BANNER",
    "KEYS_SEEDED_BANNER",
    "SMOKE_BANNER",
    "WEAK_EPSILON",
    "is_smoke_test",
    "params_text",
    "plain_language_statement",
    "report_warnings",
    "samples_records",
    "statement_paragraphs",
    "utility_warnings",
    "weak_guarantee",
]

NOT_PRIVATE = "NOT PRIVATE \u2014 for internal use only, do not publish"
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
    return ", ".join(f"{symbols.get(k, k)} = {F.param(v)}" for k, v in params.items())


def samples_records(a: dict) -> bool:
    """The run's mechanism samples the private records itself (Private-kNN): no teachers, no
    data-dependent analysis, no sanitized release; its wording comes from its spec."""
    return mechanisms.get(a["privacy"]["mechanism"]).kind.reads_private_records


def _rule_text(a: dict) -> str:
    """How a run whose one release labels every query (class-means) labelled from it ("" for
    any other mechanism)."""
    if not mechanisms.get(a["privacy"]["mechanism"]).kind.releases_once:
        return ""
    from pate.core.mean_release import RULE_TEXT

    rule = C.class_means_rule(a["config"])
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
    runs = ", ".join(f"{r['run_dir']} (\u03b5 = {F.eps(r['eps'])})" for r in prior["runs"])
    return (
        f", composed with the cost of the earlier rounds whose released student embeds "
        f"this run's neighbour search: {runs}. On their own, the earlier rounds cost "
        f"\u03b5 = {F.eps(prior['eps'])} and this run's queries \u03b5 = "
        f"{F.eps(p['eps_data_independent'])}"
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
        f"{F.param(WEAK_EPSILON)} allows an attacker's odds about any one {who} to change by "
        f"a factor of e^{F.eps(eps)}{factor}"
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
                    else f"{F.count(p['num_teachers'])} teachers, each trained on a disjoint part of the "
                    f"sensitive data. "
                )
                + f"Privacy is accounted with Renyi differential privacy over {len(p['orders'])} "
                f"orders and converted to (\u03b5, \u03b4) with the {p['conversion']} conversion at "
                f"\u03b4 = {F.delta(p['delta'])}."
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
                    f"(ε = {F.eps(cal['target_eps'])}); it is lower when fewer queries were answered "
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
        f"about {F.count(q['asked'])} of "
        f"{F.count(q['public_size'])} public (non-sensitive) items; {F.count(q['answered'])} "
        f"({F.pct(answered_frac)}) were answered and used as training labels."
    )
    if q["labelled_by_student"]:
        text += (
            f" A further {F.count(q['labelled_by_student'])} public items were labelled by "
            f"the student itself (semi-supervised training), at no privacy cost."
        )
    stop = q["stop_reason"] or p["budget"]["stop_reason"]
    if stop:
        text += f" Querying stopped early: {stop}."
    return text


def _records_guarantee(a: dict) -> list[tuple[str, str]]:
    """The guarantee of a mechanism that samples the private records itself (no teachers): its
    cost does not depend on the data, and nothing data-dependent is released."""
    p, q = a["privacy"], a["queries"]
    spec = mechanisms.get(p["mechanism"])
    weak = weak_guarantee(a)
    return [
        (
            "Guarantee",
            (
                f"The released student satisfies (\u03b5 = {F.eps(p['eps_guarantee'])}, \u03b4 = "
                f"{F.delta(p['delta'])})-differential privacy with respect to "
                f"{RELATION_TEXT[p['neighbouring_relation']][1]} of the sensitive training "
                "data. "
                + (f"{weak} " if weak else "")
                + "This bound holds for everything the run releases \u2014 the student model"
                + (
                    ", the labels it was trained on and the labelling rule's class scores of every "
                    "item (label_scores.npy, post-processing of the same release)"
                    if spec.kind.gives_label_scores
                    else " and the labels it was trained on"
                )
                + " \u2014 whatever the data: it is "
                + spec.cost_text.format(asked=F.count(q["asked"]))
                + f" (order \u03bb = {F.param(p['order_data_independent'])})"
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
    weak = weak_guarantee(a)
    return [
        (
            "Guarantee",
            (
                f"The released student satisfies (\u03b5 = {F.eps(p['eps_guarantee'])}, \u03b4 = "
                f"{F.delta(p['delta'])})-differential privacy with respect to "
                f"{RELATION_TEXT[p['neighbouring_relation']][1]} of the sensitive training data. "
                + (f"{weak} " if weak else "")
                + f"This bound holds for everything the run releases \u2014 the student model, the labels "
                f"it was trained on and the sanitized epsilon below \u2014 whatever the data: it is the "
                f"data-independent cost of the {F.count(q['answered'])} answers "
                f"(\u03b5 = {F.eps(p['eps_data_independent'])} on its own, at order "
                f"\u03bb = {F.param(p['order_data_independent'])}) composed with the cost of releasing the "
                f"sanitized epsilon."
            ),
        ),
        ("Sanitized data-dependent epsilon", _sanitized_text(p)),
        (
            "Data-dependent epsilon",
            (
                f"\u03b5 = {F.eps(p['eps_data_dependent'])} (order \u03bb = {F.param(p['order'])}) "
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
    the data-independent cost."""
    s, delta = p["sanitized"], F.delta(p["delta"])
    if s["fallback"] is None:
        fixed = (
            f"The order \u03bb = {F.param(s['order'])}, smoothness \u03b2 = "
            f"{F.param(s['beta'])} and noise multiplier \u03c3_ss = {F.param(s['sigma_ss'])} "
            f"were fixed in the configuration before the votes were seen"
        )
        text = (
            f"\u03b5 = {F.eps(p['eps_sanitized'])} (\u03b4 = {delta}). When the teachers agree "
            f"strongly, the data-dependent analysis of Papernot et al. (2018) charges much less "
            f"than the worst case, but it is computed from the private votes, so it is published "
            f"only after sanitization with the smooth-sensitivity (GNSS) mechanism: Gaussian noise "
            f"of standard deviation {F.sig(s['noise_std'])} (smooth sensitivity "
            f"{F.sig(s['smooth_sensitivity'])} \u00d7 \u03c3_ss) was added to the Renyi divergence "
            f"at order \u03bb = {F.param(s['order'])}. {fixed}, and the cost of this release (Renyi "
            f"divergence {F.sig(s['rdp_gnss'])} at order \u03bb) is included in the figure. It is a "
            f"private measurement of the privacy loss actually incurred on this data, not a "
            f"worst-case bound; because of the noise, a conservative reading adds two standard "
            f"deviations: \u03b5 \u2264 {F.eps(s['eps_sanitized_upper_2std'])}."
        )
    else:
        text = (
            f"\u03b5 = {F.eps(p['eps_sanitized'])} (\u03b4 = {delta}). The smooth-sensitivity "
            f"release fell back to the data-independent cost at order "
            f"\u03bb = {F.param(s['order'])} because {s['fallback']}; no noise was added and "
            f"nothing data-dependent is released. The release parameters (smoothness "
            f"\u03b2 = {F.param(s['beta'])}, noise multiplier \u03c3_ss = "
            f"{F.param(s['sigma_ss'])}) were fixed in the configuration before the votes were seen."
        )
    if p["eps_sanitized"] >= p["eps_guarantee"]:
        text += (
            " Here it is not smaller than the guarantee above, which remains the figure to quote."
        )
    return text


def _utility_text(u: dict) -> str:
    """The student's accuracy, beside the teachers' (when there are teachers)."""
    return (
        f"The student's accuracy is {F.pct(u['student_accuracy'])} on "
        f"{F.count(u['evaluation_size'])} held-out evaluation items "
        + (
            "(no teachers)."
            if u["teacher_mean_accuracy"] is None
            else f"(teachers: {F.pct(u['teacher_mean_accuracy'])} on average; the noiseless plurality "
            f"vote of all teachers: {F.pct(u['plurality_vote_accuracy'])})."
        )
        + (
            ""
            if "student_alone_accuracy" not in u
            else f" The released model is the student times its labelling rule (their class "
            f"probabilities multiplied: post-processing of the one release and of public data, no "
            f"further privacy cost); the student alone: {F.pct(u['student_alone_accuracy'])}."
        )
    )


def _ledger_paragraphs(p: dict) -> list[tuple[str, str]]:
    """The ledger's cumulative spend on the dataset and the changes of its budget."""
    paras = []
    ledger = p["ledger"]
    if ledger is not None:
        text = (
            f"The privacy ledger ({ledger['path']}) records "
            f"\u03b5 = {F.eps(ledger['spent_eps'])} spent on dataset {ledger['dataset']} over "
            f"{F.count(ledger['runs'])} run(s) ({F.count(ledger['events'])} events), this run "
            f"included."
        )
        if ledger["budget_eps"] is not None:
            text += f" The dataset's budget is \u03b5 = {F.eps(ledger['budget_eps'])}"
            if ledger["budget_delta"] is not None:
                text += f" at \u03b4 = {F.delta(ledger['budget_delta'])}"
            if ledger["remaining_eps"] is not None:
                text += f"; \u03b5 = {F.eps(ledger['remaining_eps'])} remains"
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
                    f"The dataset's privacy budget was changed {F.count(len(changes))} time(s) in the "
                    f"ledger: {listed}. A budget raised after spending no longer bounds the total "
                    f"privacy loss of the dataset by the original figure."
                ),
            )
        )
    return paras


def _budget_text(eps: float | None, delta: float | None) -> str:
    if eps is None:
        return "no budget"
    text = f"\u03b5 = {F.eps(eps)}"
    return text if delta is None else f"{text}, \u03b4 = {F.delta(delta)}"


def _budget_raised(change: dict) -> bool:
    """The change loosened an existing budget (a larger epsilon or delta, or none at all)."""
    if change["old_eps"] is None:
        return False  # a first budget: nothing was promised before
    looser_eps = change["new_eps"] is None or change["new_eps"] > change["old_eps"]
    old_delta, new_delta = change["old_delta"], change["new_delta"]
    looser_delta = old_delta is not None and (new_delta is None or new_delta > old_delta)
    return looser_eps or looser_delta


def plain_language_statement(analysis: dict) -> str:
    """The plain-language privacy statement of a (validated) analysis, as plain text paragraphs
    separated by blank lines. The data-dependent epsilon is marked :data:`NOT_PRIVATE`."""
    return "\n\n".join(f"{head}: {text}" for head, text in statement_paragraphs(analysis))


def utility_warnings(a: dict) -> list[str]:
    """The utility warnings of ``analysis.json`` (:func:`pate.run.utility_warnings.utility_warnings`)."""
    return list(a["utility"].get("warnings") or [])


def report_warnings(a: dict) -> list[str]:
    return (
        utility_warnings(a)
        + _publication_warnings(a)
        + _analysis_warnings(a)
        + _querying_warnings(a)
    )


def _publication_warnings(a: dict) -> list[str]:
    """What keeps the guarantee from being quoted as it is: seeded noise, a smoke test, a weak
    epsilon, no ledger, a raised budget."""
    p = a["privacy"]
    out: list[str] = []
    if p.get("noise_seeded") is True:
        out.append(
            "The aggregator's noise was seeded by the user: the run is reproducible and NOT "
            "differentially private (anyone with the seed can remove the noise). Do not "
            "publish its outputs; rerun with secure noise."
        )
    if p.get("keys_seeded") is True:
        out.append(
            "The run's secret keys (which teacher gets which record, a pool's split) were "
            "derived from [run] seed: they are not private, anyone with the seed can reproduce "
            "the shards. Leave [run] seed unset for keys from OS entropy."
        )
    if is_smoke_test(a):
        out.append(
            "This run is a smoke test ([run] smoke_test = true): it only checks that the "
            "pipeline works, and its privacy figures are not a meaningful guarantee. Do not "
            "quote or publish them."
        )
    weak = weak_guarantee(a)
    if weak:
        out.append(
            f"The guarantee \u03b5 = {F.eps(p['eps_guarantee'])} is above "
            f"{F.param(WEAK_EPSILON)}. {weak} Quote it only with this caveat; answer fewer "
            f"queries or add more noise for a stronger guarantee."
        )
    if p.get("ledger_enforced") is False:
        out.append(
            "The privacy ledger was off: no budget was enforced across runs on this data, "
            "and this run's spend was not recorded for later runs."
        )
    raised = [c for c in p.get("budget_changes") or [] if _budget_raised(c)]
    if raised:
        out.append(
            f"The dataset's budget was raised {F.count(len(raised))} time(s) (see Budget "
            f"changes): the original budget no longer bounds the total privacy loss."
        )
    return out


def _analysis_warnings(a: dict) -> list[str]:
    """Checks of the privacy analysis itself: the order grid, the guarantee against the
    data-independent epsilon, the sanitized release, delta against the number of teachers."""
    p = a["privacy"]
    out: list[str] = []
    orders = p["orders"]
    lo, hi = min(orders), max(orders)
    for key in ("order", "order_data_independent"):
        if p[key] in (lo, hi) and len(orders) > 1:
            out.append(
                f"privacy.{key} = {F.param(p[key])} is at the edge of the order grid "
                f"[{F.param(lo)}, {F.param(hi)}]: the best order may lie outside it; widen "
                f"the orders in the config for a tighter (never looser) epsilon."
            )
    if p["eps_guarantee"] < p["eps_data_independent"] * (1 - 1e-9):
        out.append(
            f"privacy.eps_guarantee ({F.eps(p['eps_guarantee'])}) is smaller than the "
            f"data-independent epsilon of the answers alone "
            f"({F.eps(p['eps_data_independent'])}), which composition cannot give: check "
            f"the analysis before quoting it."
        )
    if samples_records(a):
        pass  # no sanitized release at all (the statement says so); no teachers
    elif p["sanitized"]["fallback"] is not None:
        out.append(
            f"The sanitized epsilon fell back to the data-independent one: "
            f"{p['sanitized']['fallback']}."
        )
    elif p["eps_sanitized"] >= p["eps_data_independent"]:
        out.append(
            f"The sanitized epsilon ({F.eps(p['eps_sanitized'])}) is not smaller than the "
            f"data-independent epsilon of the answers ({F.eps(p['eps_data_independent'])}): "
            f"on this run the data-dependent analysis saves less than its release costs. "
            f"Publishing only the data-independent figure, without the sanitized one, gives "
            f"the stronger guarantee (\u03b5 = {F.eps(p['eps_data_independent'])})."
        )
    if not samples_records(a) and p["delta"] >= 1.0 / p["num_teachers"]:
        out.append(
            f"\u03b4 = {F.delta(p['delta'])} is at least 1/{p['num_teachers']} (one over the "
            f"number of teachers, a lower bound on the number of sensitive records): a "
            f"\u03b4 this large allows leaking whole records; choose \u03b4 well below "
            f"1/(number of sensitive records)."
        )
    return out


def _querying_warnings(a: dict) -> list[str]:
    """How the querying ended: nothing answered, stopped on a data-dependent budget, the ledger
    overspent."""
    p, q = a["privacy"], a["queries"]
    out: list[str] = []
    if q["answered"] == 0:
        out.append("No query was answered: the student learned nothing from the teachers.")
    if p["budget"]["basis"] == "data-dependent" and (
        p["budget"]["stop_reason"] or q["stop_reason"]
    ):
        out.append(
            "Querying stopped on a budget checked against the data-dependent epsilon, "
            "which is not private: when to stop then depends on the private votes in a way "
            "the guarantee above does not account for. Use a data-independent budget for "
            "runs whose numbers will be published."
        )
    ledger = p["ledger"]
    if ledger is not None and ledger["remaining_eps"] is not None and ledger["remaining_eps"] < 0:
        out.append(
            f"The ledger's budget for dataset {ledger['dataset']} is overspent "
            f"(remaining \u03b5 = {F.eps(ledger['remaining_eps'])})."
        )
    return out


# The caption of each plot and whether it is INTERNAL (computed from the private votes).
CAPTIONS: dict[str, tuple[str, bool]] = {
    "epsilon_vs_answered": (
        "Epsilon (at the run's \u03b4) against the number of answered queries: data-independent "
        "(publishable) and data-dependent (internal).",
        True,
    ),
    "vote_margins": (
        "Histogram of vote margins (top-1 minus top-2 vote count) over the queries asked.",
        True,
    ),
    "rdp_per_order": (
        "Renyi-DP of the whole run at each order (log scale), data-independent and "
        "data-dependent (internal), with the orders chosen for the conversion marked.",
        True,
    ),
    "confusion_matrix": (
        "Confusion matrix of the student on the evaluation split (rows: true class, "
        "columns: predicted class).",
        False,
    ),
    "epsilon_vs_answered_public": (
        "Data-independent epsilon (at the run's \u03b4) against the number of answered queries, "
        "with the guarantee and the sanitized epsilon that the run releases; no data-dependent "
        "curve.",
        False,
    ),
    "rdp_per_order_public": (
        "Data-independent Renyi-DP of the run's queries at each order (log scale), with the "
        "order chosen for the conversion marked; no data-dependent curve.",
        False,
    ),
}
