"""The report's facts in words that more than one template or the warnings need (the marks of
internal figures, the weak-guarantee sentence, e^eps in words, the plot captions); everything
else is written in the templates."""

from __future__ import annotations

import math
import re

from pate import mechanisms
from pate.run.report import formatting

NOT_PRIVATE = "NOT PRIVATE \u2014 for internal use only, do not publish"
#: The mark of an internal line of a list (a warning that fires on an internal figure).
INTERNAL_MARK = "INTERNAL (do not publish):"
#: A guarantee epsilon above this gets the "protects individuals very weakly" warning.
WEAK_EPSILON = 10.0


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


def release_asked(a: dict) -> bool:
    """A teachers' run whose config asked for the sanitized release (``[privacy] release``): only
    then does the report speak of a sanitized epsilon."""
    fallback = ((a["privacy"].get("sanitized") or {}).get("fallback")) or ""
    return not samples_records(a) and "release = false" not in fallback


def is_smoke_test(a: dict) -> bool:
    """``run.smoke_test`` (false when absent)."""
    return a["run"].get("smoke_test") is True


def odds_factor(eps: float) -> str:
    """e^eps in words: "7.4", "22,000" (2 significant digits) up to a million, "≈ 4.9 × 10^8"
    up to e^50, then "more than 10^k" (the figure is meaningless by then; only its size
    matters)."""
    if math.isinf(eps):
        return "infinity"
    log10 = eps / math.log(10.0)
    if log10 < 1.0:
        return f"{math.exp(eps):.2g}"
    if log10 < 6.0:
        return f"{float(f'{math.exp(eps):.2g}'):,.0f}"
    exponent = math.floor(log10)
    if eps >= 50.0:
        return f"more than 10^{exponent:,}"
    mantissa = round(10.0 ** (log10 - exponent), 1)
    if mantissa >= 10.0:
        mantissa, exponent = mantissa / 10.0, exponent + 1
    return f"\u2248 {mantissa:g} \u00d7 10^{exponent}"


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
    factor = odds_factor(eps)
    if factor.startswith("more"):
        factor = f", {factor}"
    elif not factor.startswith("\u2248"):
        factor = f" \u2248 {factor}"
    else:
        factor = f" {factor}"
    text = (
        f"This bound protects individuals very weakly: an epsilon above "
        f"{formatting.param(WEAK_EPSILON)} allows an attacker's odds about any one {who} to "
        f"change by a factor of e^{formatting.eps(eps)}{factor}"
    )
    if eps >= 50.0:
        text += ", which is no meaningful protection"
    return text + "."


def dataset_name(ledger: dict) -> str:
    """The dataset as the user named it; never the ledger's key when that is a digest (64 hex
    digits of the records, internal)."""
    name = ledger.get("name") or ledger.get("dataset")
    if not name or re.fullmatch(r"[0-9a-f]{64}", str(name)):
        return "unnamed dataset"
    return str(name)


# The caption of each plot (which are internal: pate.run.report.content.INTERNAL_PLOT_NAMES).
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
        "with the guarantee (and, for a teachers' run, the sanitized epsilon it releases); no "
        "data-dependent curve."
    ),
    "rdp_per_order_public": (
        "Data-independent Renyi-DP of the run's queries at each order (log scale), with the "
        "order chosen for the conversion marked; no data-dependent curve."
    ),
}
