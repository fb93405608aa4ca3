"""The report's warnings (:func:`report_warnings`), worded from whatever report they are given:
the publishable report's come from its public fields alone."""

from __future__ import annotations

from pate.run.report import formatting
from pate.run.report.wording import (
    INTERNAL_MARK,
    WEAK_EPSILON,
    dataset_name,
    is_smoke_test,
    release_asked,
    samples_records,
    weak_guarantee,
)


def _budget_raised(change: dict) -> bool:
    """The change loosened an existing budget (a larger epsilon or delta, or none at all)."""
    if change["old_eps"] is None:
        return False  # a first budget: nothing was promised before
    looser_eps = change["new_eps"] is None or change["new_eps"] > change["old_eps"]
    old_delta, new_delta = change["old_delta"], change["new_delta"]
    looser_delta = old_delta is not None and (new_delta is None or new_delta > old_delta)
    return looser_eps or looser_delta


def utility_warnings(a: dict) -> list[str]:
    """The utility warnings of ``analysis.json``: those judged on public figures, then (in the
    internal report) those that fire on internal ones, marked."""
    u = a["utility"]
    return list(u.get("warnings") or []) + [
        f"{INTERNAL_MARK} {w}" for w in u.get("internal_warnings") or []
    ]


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
            f"The guarantee \u03b5 = {formatting.eps(p['eps_guarantee'])} is above "
            f"{formatting.param(WEAK_EPSILON)}. {weak} Quote it only with this caveat; answer fewer "
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
            f"The dataset's budget was raised {formatting.count(len(raised))} time(s) (see Budget "
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
        if key in p and p[key] in (lo, hi) and len(orders) > 1:
            mark = f"{INTERNAL_MARK} " if key == "order" else ""  # the data-dependent order
            out.append(
                f"{mark}privacy.{key} = {formatting.param(p[key])} is at the edge of the order grid "
                f"[{formatting.param(lo)}, {formatting.param(hi)}]: the best order may lie outside it; widen "
                f"the orders in the config for a tighter (never looser) epsilon."
            )
    if p["eps_guarantee"] < p["eps_data_independent"] * (1 - 1e-9):
        out.append(
            f"privacy.eps_guarantee ({formatting.eps(p['eps_guarantee'])}) is smaller than the "
            f"data-independent epsilon of the answers alone "
            f"({formatting.eps(p['eps_data_independent'])}), which composition cannot give: check "
            f"the analysis before quoting it."
        )
    fallback = (p.get("sanitized") or {}).get("fallback")
    if release_asked(a) and fallback is not None:  # asked for (the statement says if not)
        out.append(f"The sanitized epsilon fell back to the data-independent one: {fallback}.")
    elif (
        release_asked(a)
        and "eps_sanitized" in p
        and p["eps_sanitized"] >= p["eps_data_independent"]
    ):
        out.append(
            f"The sanitized epsilon ({formatting.eps(p['eps_sanitized'])}) is not smaller than the "
            f"data-independent epsilon of the answers ({formatting.eps(p['eps_data_independent'])}): "
            f"on this run the data-dependent analysis saves less than its release costs. "
            f"Publishing only the data-independent figure, without the sanitized one, gives "
            f"the stronger guarantee (\u03b5 = {formatting.eps(p['eps_data_independent'])})."
        )
    if "num_teachers" in p and not samples_records(a) and p["delta"] >= 1.0 / p["num_teachers"]:
        out.append(
            f"\u03b4 = {formatting.delta(p['delta'])} is at least 1/{p['num_teachers']} (one over the "
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
    ledger = p.get("ledger")
    if (
        ledger is not None
        and ledger["remaining_eps"] is not None
        and ledger["remaining_eps"] < -formatting.EPS_RESIDUE
    ):
        out.append(
            f"The ledger's budget for dataset {dataset_name(ledger)} is overspent "
            f"(remaining \u03b5 = {formatting.eps(ledger['remaining_eps'])})."
        )
    return out
