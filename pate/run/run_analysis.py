"""Every number of the privacy report, in ``analysis.json``: the privacy cost recomputed by
:mod:`pate.run.run_cost`, the ledger's spend, the vote margins and the utility figures."""

from __future__ import annotations

import logging

import numpy as np

from pate import analysis
from pate.core.io import read_json
from pate.run import run_cost, rundir
from pate.run.rundir import Run
from pate.run.utility_warnings import (
    more_labels_advice,
    scale_warnings,
    split_utility_warnings,
)

logger = logging.getLogger("pate.run.run_analysis")


def _ledger_summary(run: Run, dataset: str | None) -> dict | None:
    if dataset is None:
        return None
    ledger = run.ledger()
    if ledger is None:
        return None
    try:
        s = ledger.summary(dataset)
        # the report lists changes of a budget after it was first set (raises, lowerings)
        changes = [
            {
                "time_utc": c["time_utc"],
                "old_eps": c["previous"]["eps"],
                "old_delta": c["previous"]["delta"],
                "new_eps": c["eps"],
                "new_delta": c["delta"],
                "spent_eps": c["spent_eps"],
                "change": c["change"],
            }
            for c in ledger.budget_changes(dataset)
            if c["previous"] is not None
        ]
    finally:
        ledger.close()
    budget = s["budget"] or {}
    eps = budget.get("eps")
    spent = None if s["spent"] is None else float(s["spent"])
    remaining = s.get("remaining_effective", s["remaining"])
    names = {row["dataset"]: row["name"] for row in s.get("linked", [])}
    names[s["dataset"]] = s["name"]
    limited = s.get("limited_by")
    # the report names datasets by the user's names, never by an id (a digest of the records)
    return {
        "path": str(s["ledger"]),
        "dataset": s["name"] or "unnamed dataset",
        "name": s["name"],
        "budget_eps": eps,
        "budget_delta": budget.get("delta"),
        "spent_eps": spent,
        "remaining_eps": None if remaining is None else float(remaining),
        "events": int(s["events"]),
        "linked_events": int(s.get("linked_events", 0)),
        "limited_by": None if limited is None else (names.get(limited) or "a linked dataset"),
        "runs": int(s["runs"]),
        "budget_changes": changes,
    }


def _float_or_none(value) -> float | None:
    return None if value is None else float(value)


def _margins_and_teachers(run: Run, saved: run_cost.Saved) -> tuple[dict, str, dict]:
    """The vote-margin histogram, the neighbouring relation of the partition and the teachers'
    metrics (none of them for a run that reads the private records)."""
    from pate.core.partition import Partition

    if saved.reads_records:
        counts, edges = np.zeros(0, dtype=int), np.zeros(1)
        margin_note = (
            f"{saved.spec.title}: no vote margins; what the private records "
            "contributed was drawn inside the aggregate stage and never saved"
        )
        # no partition; with an id column one row per person is read: the bound is per person
        relation = "record" if run.data.unit_ids is None else "unit"
        teachers = {
            "teacher_accuracy_mean": None,
            "teacher_accuracy_std": None,
            "plurality_accuracy": None,
        }
    else:
        votes, asked, num_teachers = saved.votes, saved.asked, saved.num_teachers
        top2 = -np.sort(-votes, axis=1)[:, :2] if asked else np.zeros((0, 2), int)
        margins = top2[:, 0] - top2[:, 1]
        counts, edges = np.histogram(margins, bins=min(25, num_teachers), range=(0, num_teachers))
        margin_note = "internal: derived from the private votes; do not publish"
        part = Partition.load(run.path(rundir.PARTITION))
        relation = "unit" if part.neighbouring_relation.startswith("unit") else "record"
        teachers = read_json(run.path(rundir.TEACHER_METRICS))
    margins_doc = {
        "bin_edges": edges.tolist(),
        "counts": counts.astype(int).tolist(),
        "note": margin_note,
    }
    return margins_doc, relation, teachers


def _privacy_section(
    config: dict,
    saved: run_cost.Saved,
    cost: run_cost.Cost,
    *,
    relation: str,
    release: dict,
    guarantee: tuple[float, dict | None],
    ledger: dict | None,
) -> dict:
    """The ``privacy`` object of ``analysis.json``."""
    s, summary = saved, saved.summary
    eps_guarantee, prior = guarantee
    return {
        "neighbouring_relation": relation,
        # the one relation of every bound, the partition, the ledger and this report
        "relation": analysis.ADD_REMOVE,
        "relation_text": analysis.RELATIONS[analysis.ADD_REMOVE],
        "mechanism": summary["mechanism"],
        "params": s.params,
        "num_teachers": s.num_teachers,
        "delta": s.delta,
        "conversion": s.conversion,
        "orders": s.orders.tolist(),
        "rdp_data_dependent": cost.rdp_dep.tolist(),
        "rdp_data_independent": cost.rdp_ind.tolist(),
        "eps_data_independent": float(cost.eps_ind),
        "order_data_independent": float(cost.order_ind),
        "eps_data_dependent": float(cost.eps_dep),
        "order": float(cost.order_dep),
        "data_dependent_is_private": False,
        "eps_sanitized": float(release["eps_sanitized"]),
        "sanitized": {
            k: release.get(k)
            for k in (
                "order",
                "beta",
                "sigma_ss",
                "noise_std",
                "rdp_gnss",
                "smooth_sensitivity",
                "eps_sanitized_upper_2std",
                "eps_data_independent",
                "fallback",
            )
        }
        # the release is public only with its own charge (docs/publishing.md)
        | {"charged": any(e.get("mechanism") == "gnss-release" for e in summary["events"])},
        "eps_guarantee": float(eps_guarantee),
        "prior_rounds": prior,
        # one release labels every query: one mechanism, nothing to compose
        "composition": run_cost.composition(
            s.spec.worst_case_query_rdp(s.params, orders=s.orders),
            s.orders,
            s.delta,
            min(s.asked, 1) if s.spec.kind.releases_once else s.asked,
        ),
        "noise_seeded": bool(summary["noise_seeded"]),
        "keys_seeded": config.run.seed is not None,
        "calibration": config.calibration(),
        "private": config.is_private,
        "ledger_enforced": summary.get("dataset") is not None,
        "budget_changes": [] if ledger is None else ledger["budget_changes"],
        "budget": {
            "eps": summary["budget_eps"],
            "delta": summary["delta"],
            "basis": summary["budget_basis"].replace("_", "-"),
            "stop_reason": summary.get("stop_reason"),
        },
        "ledger": ledger,
    }


def _utility_section(run: Run, saved: run_cost.Saved, teachers: dict) -> dict:
    """The ``utility`` object of ``analysis.json`` (its warnings are added by the caller)."""
    data, labels, answered, asked = run.data, saved.labels, saved.answered, saved.asked
    # only where the public split's true label is known (in-memory public data may have none: -1)
    known = saved.answered_all & (np.asarray(data.public.y) >= 0)
    label_acc = float(np.mean(labels[known] == data.public.y[known])) if known.any() else None
    student = rundir.read_summary(run.path(rundir.STUDENT_METRICS), rundir.STUDENT_METRICS_KEYS)
    # INTERNAL: computed from the private votes (like the vote margins)
    agreement = None
    if not saved.reads_records and answered.any():
        agreement = float(np.mean(labels[:asked][answered] == saved.votes[answered].argmax(axis=1)))
    y_eval = np.asarray(data.evaluation.y)
    settings = student.get("settings") or {}
    steps = (
        int(settings["epochs"]) * int(settings["steps_per_epoch"])
        if isinstance(settings.get("epochs"), int)
        and isinstance(settings.get("steps_per_epoch"), int)
        else None
    )
    return {
        "student_accuracy": float(student["accuracy"]),
        "student_per_class_accuracy": student.get("per_class_accuracy"),
        "confusion_matrix": student.get("confusion_matrix"),
        "class_names": (
            None
            if getattr(data, "class_names", None) is None
            else [str(c) for c in data.class_names]
        ),
        "teacher_mean_accuracy": _float_or_none(teachers["teacher_accuracy_mean"]),
        "teacher_accuracy_std": _float_or_none(teachers["teacher_accuracy_std"]),
        "plurality_vote_accuracy": _float_or_none(teachers["plurality_accuracy"]),
        "label_accuracy_answered": label_acc,
        "label_accuracy_note": (
            "accuracy of the released labels against the public split's true "
            "labels, which are known here only because this is a benchmark "
            "dataset; in a real deployment the public data is unlabelled"
        ),
        "evaluation_size": int(len(data.evaluation)),
        # False unless the data's source declares its evaluation split public: every figure
        # measured on it is then internal
        "evaluation_public": bool(getattr(data, "evaluation_public", False)),
        # public inputs that are rows of the user's file marked public: no protection
        "public_from_pool": int(getattr(data, "public_from_pool", 0)),
        **(
            {"student_alone_accuracy": float(student["student_alone_accuracy"])}
            if "student_alone_accuracy" in student
            else {}
        ),
        "answered_labels": int(saved.answered.sum()),
        "answered_plurality_agreement": agreement,
        "answered_plurality_agreement_note": (
            "internal: share of the answered labels equal to the teachers' noiseless "
            "plurality vote, computed from the private votes; do not publish"
        ),
        "majority_class_rate": float(
            np.bincount(y_eval, minlength=data.num_classes).max() / y_eval.size
        ),
        "chance_rate": 1.0 / data.num_classes,
        "student_steps": steps,
        "scale_warnings": scale_warnings(run, saved.reads_records),
        # a table's encoder, fitted on the public rows only ([] for arrays)
        "preprocessing": rundir.preprocessing_lines(run.run_dir),
    }


def build_analysis(run: Run) -> dict:
    """The ``analysis.json`` document of a run whose earlier stages are done."""
    from pate import __version__

    config = run.config
    saved = run_cost.load_saved(run)
    cost = run_cost.realised_cost(run, saved)
    release = run_cost.sanitized_release(saved, cost, config.privacy)
    guarantee = run_cost.guarantee(saved, cost, release)
    curves = run_cost.curves(saved, cost)
    vote_margins, relation, teachers = _margins_and_teachers(run, saved)
    ledger = _ledger_summary(run, saved.summary.get("dataset"))

    doc = {
        "format": 1,
        "run": {
            "name": config.run.name,
            "run_dir": str(run.run_dir),
            "created": run.state["created"],
            "pate_learn_version": __version__,
            "run_id": run.state["run_id"],
            "forked_from": run.state.get("forked_from"),
            "smoke_test": bool(config.run.smoke_test),
        },
        "config": config.to_dict(),
        "privacy": _privacy_section(
            config,
            saved,
            cost,
            relation=relation,
            release=release,
            guarantee=guarantee,
            ledger=ledger,
        ),
        "queries": {
            "public_size": int(saved.labels.shape[0]),
            "asked": saved.asked,
            "answered": int(saved.answered.sum()),
            "labelled_by_student": 0,
            "stop_reason": saved.summary.get("stop_reason"),
        },
        "utility": _utility_section(run, saved, teachers),
        "curves": curves,
        "vote_margins": vote_margins,
    }
    records, basis = config.data.declared_records(run.data)  # public: never the exact count
    doc["privacy"]["records"] = {"declared": records, "basis": basis}
    u = doc["utility"]
    u["warnings"], u["internal_warnings"] = split_utility_warnings(
        u,
        num_classes=int(run.data.num_classes),
        answered=int(saved.answered.sum()),
        smoke_test=bool(config.run.smoke_test),
        more_labels=more_labels_advice(saved.spec),
    )
    for warning in u["warnings"]:
        logger.warning("utility: %s", warning)
    for warning in u["internal_warnings"]:
        logger.warning("utility (INTERNAL, do not publish): %s", warning)
    return doc
