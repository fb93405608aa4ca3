"""The one line between what a run may publish and what it may not (docs/publishing.md): the
allow-list :data:`PUBLIC_FIELDS`, each field with why it is public, what :data:`NOT_PUBLIC` carves
out of it, and :func:`public_part`, which keeps nothing else."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pate import mechanisms


@dataclass(frozen=True)
class Public:
    """Why a field may be published: ``basis`` (declared, charged, derived or constant), the
    reason in words, and ``when``: the name of a condition (:data:`CONDITIONS`) that must hold
    for this run, or None."""

    basis: str
    reason: str
    when: str | None = None


def _evaluation_public(report: dict) -> bool:
    """The evaluation data was declared public (``utility.evaluation_public``)."""
    return (report.get("utility") or {}).get("evaluation_public") is True


def _release_public(report: dict) -> bool:
    """The sanitized epsilon may be published: it was released with its own charge (the
    ``gnss-release`` event, ``privacy.sanitized.charged``), or the release fell back to the
    data-independent cost (no data-dependent figure at all)."""
    sanitized = (report.get("privacy") or {}).get("sanitized") or {}
    fallback = sanitized.get("fallback")
    released = sanitized.get("charged") is True or fallback is not None
    return released and _has_teachers(report) and "release = false" not in (fallback or "")


def _has_teachers(report: dict) -> bool:
    """The run has teachers (a mechanism that reads the records has none: its voters are the
    records, an exact count)."""
    mechanism = (report.get("privacy") or {}).get("mechanism")
    return mechanism in mechanisms.REGISTRY and not (
        mechanisms.get(mechanism).kind.reads_private_records
    )


#: The conditions a field of :data:`PUBLIC_FIELDS` may name in ``when``.
CONDITIONS: dict[str, Callable[[dict], bool]] = {
    "evaluation_public": _evaluation_public,
    "release_public": _release_public,
    "teachers": _has_teachers,
}

_D, _C, _P, _K = "declared", "charged", "derived", "constant"
_ON_EVALUATION = (
    "the released student evaluated on evaluation data declared public (post-processing)"
)

#: The allow-list: a dotted path (``[]`` for the items of a list) names a field and everything
#: below it; the longest matching path of this table or :data:`NOT_PUBLIC` decides.
PUBLIC_FIELDS: dict[str, Public] = {
    "format": Public(_K, "the schema's version"),
    "run.name": Public(_D, "the run's name, from the config"),
    "run.pate_learn_version": Public(_K, "the software that made the report"),
    "run.smoke_test": Public(_D, "[run] smoke_test, from the config"),
    "config": Public(_D, "the settings the user wrote or confirmed, fixed before any data"),
    "privacy.neighbouring_relation": Public(_D, "[partition] mode: record or unit"),
    "privacy.relation": Public(_K, "add-remove, the one relation of every bound"),
    "privacy.relation_text": Public(_K, "the relation in words"),
    "privacy.mechanism": Public(_D, "[aggregator] mechanism"),
    "privacy.params": Public(_D, "the mechanism's noise parameters, set or calibrated in advance"),
    "privacy.num_teachers": Public(_D, "[partition] num_teachers", when="teachers"),
    "privacy.records": Public(_D, "[data] records, or a built-in dataset's published size"),
    "privacy.delta": Public(_D, "[privacy] delta"),
    "privacy.conversion": Public(_D, "[privacy] conversion"),
    "privacy.orders": Public(_D, "[privacy] orders"),
    "privacy.rdp_data_independent": Public(_P, "the worst-case cost of the charged answers"),
    "privacy.eps_data_independent": Public(_P, "the worst-case cost of the charged answers"),
    "privacy.order_data_independent": Public(_P, "the order of that conversion"),
    "privacy.eps_sanitized": Public(
        _C, "the smooth-sensitivity release, charged as its own event", when="release_public"
    ),
    "privacy.sanitized.order": Public(_D, "[privacy] release_order", when="teachers"),
    "privacy.sanitized.beta": Public(_D, "[privacy] release_beta", when="teachers"),
    "privacy.sanitized.sigma_ss": Public(_D, "[privacy] release_sigma_ss", when="teachers"),
    "privacy.sanitized.rdp_gnss": Public(
        _P, "the release's cost, from beta and sigma_ss alone", when="teachers"
    ),
    "privacy.sanitized.eps_data_independent": Public(
        _P, "the worst case at the release order", when="teachers"
    ),
    "privacy.sanitized.fallback": Public(
        _P, "why no release was drawn, decided before the votes", when="teachers"
    ),
    "privacy.sanitized.charged": Public(
        _C, "whether the release was charged to the ledger", when="teachers"
    ),
    "privacy.eps_guarantee": Public(_P, "the charged answers composed with the release's cost"),
    "privacy.prior_rounds.eps": Public(_C, "the charged cost of the earlier rounds"),
    "privacy.prior_rounds.runs[].eps": Public(_C, "the charged cost of each earlier round"),
    "privacy.composition": Public(_P, "classic composition of the charged answers"),
    "privacy.noise_seeded": Public(_D, "whether the user seeded the noise"),
    "privacy.keys_seeded": Public(_D, "whether the user seeded the run's keys ([run] seed)"),
    "privacy.calibration": Public(_D, "the declared target the noise was calibrated to"),
    "privacy.private": Public(_D, "whether the config asks for a private run"),
    "privacy.ledger_enforced": Public(_D, "whether the user kept the ledger on"),
    "privacy.budget_changes": Public(_D, "the budgets the user set, and the charged spend then"),
    "privacy.budget": Public(_D, "[privacy] budget_eps, delta and basis; why the charges stopped"),
    "privacy.ledger.name": Public(_D, "the dataset's name, as the user gave it"),
    "privacy.ledger.budget_eps": Public(_D, "the dataset's budget, set by the user"),
    "privacy.ledger.budget_delta": Public(_D, "the dataset's budget, set by the user"),
    "privacy.ledger.spent_eps": Public(_C, "the sum of the charges recorded on the dataset"),
    "privacy.ledger.remaining_eps": Public(_P, "the budget less the charges"),
    "privacy.ledger.events": Public(_C, "the number of charged events"),
    "privacy.ledger.linked_events": Public(_C, "the number of charged events of linked datasets"),
    "privacy.ledger.runs": Public(_C, "the number of runs that charged the dataset"),
    "privacy.ledger.sum_of_charges_eps": Public(_P, "the charged events' epsilons, summed"),
    "privacy.ledger.next_run_eps": Public(_P, "the charged events composed with this run's again"),
    "privacy.ledger.budget_changes": Public(_D, "the budgets the user set"),
    "queries": Public(_C, "how many queries were asked and answered: the charged answers"),
    "utility.class_names": Public(_D, "the declared label set"),
    "utility.chance_rate": Public(_D, "one over the declared number of classes"),
    "utility.answered_labels": Public(_C, "the number of charged answers"),
    "utility.label_accuracy_answered": Public(_P, "the released labels against public labels"),
    "utility.label_accuracy_note": Public(_K, "what that figure means"),
    "utility.student_steps": Public(_P, "the declared epochs times the steps the labels give"),
    "utility.scale_warnings": Public(_P, "checks of the public inputs only"),
    "utility.preprocessing": Public(_D, "the table's encoder: statistics of the public rows only"),
    "utility.warnings": Public(_P, "the utility rules applied to the public figures only"),
    "utility.evaluation_public": Public(_D, "whether the evaluation data was declared public"),
    "utility.public_from_pool": Public(
        _D, "how many rows of the user's file the user marked public (unprotected)"
    ),
    "utility.student_accuracy": Public(_P, _ON_EVALUATION, when="evaluation_public"),
    "utility.student_alone_accuracy": Public(_P, _ON_EVALUATION, when="evaluation_public"),
    "utility.student_per_class_accuracy": Public(_P, _ON_EVALUATION, when="evaluation_public"),
    "utility.confusion_matrix": Public(_P, _ON_EVALUATION, when="evaluation_public"),
    "utility.evaluation_size": Public(
        _D, "the size of public evaluation data", "evaluation_public"
    ),
    "utility.majority_class_rate": Public(_P, _ON_EVALUATION, when="evaluation_public"),
    "curves.answered_count": Public(_C, "the running count of charged answers"),
    "curves.eps_data_independent": Public(_P, "the worst-case cost after each answer"),
    "statement": Public(_P, "worded from the public fields alone"),
    "warnings": Public(_P, "worded from the public fields alone"),
    "plots": Public(_K, "the files of the publishable plots, drawn from the public fields"),
    "publication": Public(_K, "what is published, what is internal, what to share"),
}

#: Carved out of a public folder above: never published, with the reason.
NOT_PUBLIC: dict[str, str] = {
    "config.run.run_dir": "a path on the operator's machine",
    "config.privacy.ledger": "a path on the operator's machine",
}

#: What the publishable report says about itself (``publication`` in report.json, and the
#: report's first note): the rule, what is internal, what to share (docs/publishing.md).
PUBLICATION = {
    "rule": (
        "The publishable report (report.md, report.html, report.json, plots/) holds only facts "
        "the user declared public (the configuration, the declared "
        "classes, the mechanism, its parameters, delta and the budget), outputs of charged "
        "mechanisms (the noisy answers and their count, the sanitized epsilon when it was "
        "released with its own charge) and post-processing of those (the data-independent "
        "epsilon, the guarantee, the student's figures on evaluation data declared public)."
    ),
    "internal": (
        "Everything else is internal and kept in the run directory's private/ folder "
        "(private/report_internal.md, private/report_internal.json, private/plots/): the "
        "smooth sensitivity and the noise scaled by it, the raw data-dependent epsilon and "
        "curves, the teachers' accuracies, the noise-free plurality vote and the agreement of "
        "the answers with it, exact record counts and shard sizes, figures on evaluation data "
        "not declared public, the warnings that fire on any of these, and the operator's "
        "paths and times."
    ),
    "share": (
        "Share report.md, report.html, report.json, plots/ and the released student; never "
        "share anything under private/ or the run's other files."
    ),
}


def field_of(path: str) -> tuple[str, Public | str] | None:
    """The entry of :data:`PUBLIC_FIELDS` or :data:`NOT_PUBLIC` that decides the field at
    ``path`` (the longest one naming it or a folder above it): ``(key, Public)`` or
    ``(key, reason it is not public)``; None when neither table names it."""
    best: tuple[str, Public | str] | None = None
    for table in (PUBLIC_FIELDS, NOT_PUBLIC):
        for key, entry in table.items():
            covers = path == key or path.startswith(key + ".") or path.startswith(key + "[")
            if covers and (best is None or len(key) > len(best[0])):
                best = (key, entry)
    return best


def leaf_paths(doc: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(path, value)`` of every leaf of a JSON document: scalars, and empty objects and
    lists; list items are written ``[]``."""
    if isinstance(doc, dict) and doc:
        for key, value in doc.items():
            yield from leaf_paths(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(doc, list) and doc:
        for value in doc:
            yield from leaf_paths(value, f"{prefix}[]")
    else:
        yield prefix, doc


def _allowed(path: str, report: dict) -> bool:
    found = field_of(path)
    if found is None or not isinstance(found[1], Public):
        return False
    when = found[1].when
    return when is None or CONDITIONS[when](report)


def _cut(doc: Any, prefix: str, report: dict) -> tuple[bool, Any]:
    """``(keep, part)``: the public part of ``doc`` at ``prefix``."""
    if isinstance(doc, dict) and doc:
        out = {}
        for key, value in doc.items():
            keep, part = _cut(value, f"{prefix}.{key}" if prefix else str(key), report)
            if keep:
                out[key] = part
        return bool(out), out
    if isinstance(doc, list) and doc:
        if _allowed(prefix, report):  # a list named as a whole
            return True, copy.deepcopy(doc)
        parts = [_cut(value, f"{prefix}[]", report) for value in doc]
        kept = [part for keep, part in parts if keep]
        return len(kept) == len(doc), kept
    return _allowed(prefix, report), copy.deepcopy(doc)


def public_part(report: dict) -> dict:
    """The fields of ``report`` (the full report, :func:`pate.run.report.content.build_report`)
    that :data:`PUBLIC_FIELDS` allows for this run, nothing else. Pure."""
    return _cut(report, "", report)[1]
