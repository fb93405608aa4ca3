"""The analysis stage of ``pate run``: every number of the privacy report, in ``analysis.json``.

Privacy numbers are recomputed from the saved votes and answered mask with :mod:`pate.analysis` (and
checked against the event the aggregator charged); nothing here trusts a number it did not
compute. The sanitized data-dependent epsilon is released once, with the order, beta and sigma_ss
fixed in the config and noise from the run's ``release`` stream.

A run whose mechanism reads the private records (``kind.reads_private_records``) has no votes
matrix, no teachers and no data-dependent or smooth-sensitivity analysis: its privacy figures are
the data-independent cost of every asked query -- or of its one release (``kind.releases_once``) --
(recomputed from the asked count and checked against the charged events);
the data-dependent fields repeat it (the realised cost is the bound), its sanitized fields carry
the fallback reason, its teacher figures are null and its vote-margin histogram is empty.
"""

from __future__ import annotations

import dataclasses
import logging
import math

import numpy as np

from pate import analysis, mechanisms
from pate.analysis.errors import CorruptFileError
from pate.core.io import load_npy, read_json
from pate.run import rundir
from pate.run.config import PrivacyTable
from pate.run.rundir import Run
from pate.run.utility_warnings import scale_warnings, split_utility_warnings

_CURVE_POINTS = 300
logger = logging.getLogger("pate.run.run_analysis")


def _downsample(n: int) -> np.ndarray:
    if n <= _CURVE_POINTS:
        return np.arange(n)
    return np.unique(np.round(np.linspace(0, n - 1, _CURVE_POINTS)).astype(int))


def _composition(per_query: np.ndarray, orders: np.ndarray, delta: float, k: int) -> dict:
    """Basic and advanced composition of k queries (each (eps0, delta/(2k))-DP) at total delta.

    Basic: (k eps0, delta/2). Advanced (Dwork, Rothblum, Vadhan 2010):
    eps = sqrt(2 k ln(2/delta)) eps0 + k eps0 (e^eps0 - 1) at delta/2 + k delta0 = delta.
    """
    if k == 0:
        return {
            "per_query_eps": 0.0,
            "per_query_delta": 0.0,
            "basic_eps": 0.0,
            "advanced_eps": 0.0,
            "delta": delta,
            "queries_composed": 0,
        }
    delta0 = delta / (2 * k)
    eps0 = float(analysis.eps_from_rdp(per_query, orders=orders, delta=delta0)[0])
    advanced = math.sqrt(2 * k * math.log(2 / delta)) * eps0 + k * eps0 * math.expm1(eps0)
    return {
        "per_query_eps": eps0,
        "per_query_delta": delta0,
        "basic_eps": k * eps0,
        "advanced_eps": advanced,
        "delta": delta,
        "queries_composed": int(k),
    }


def _gnss_curve(release: dict, orders: np.ndarray) -> np.ndarray:
    """RDP of the smooth-sensitivity release at every order (inf where Theorem 23 does not hold)."""
    if release.get("fallback") is not None or release.get("noise_std", 0.0) == 0.0:
        return np.zeros(orders.size)
    return analysis.gnss_rdp_curve(
        beta=release["beta"], sigma_ss=release["sigma_ss"], orders=orders
    )


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


@dataclasses.dataclass(frozen=True)
class _Saved:
    """What the earlier stages saved, cut to the asked queries, with the accounting settings of
    the config. A run that reads the private records has no votes (module docstring): its
    ``votes`` are zeros, one row an asked query, and ``num_teachers`` the records voting on one."""

    summary: dict
    spec: mechanisms.MechanismSpec
    orders: np.ndarray
    delta: float
    conversion: str
    answered_all: np.ndarray
    labels: np.ndarray
    asked: int
    answered: np.ndarray
    votes: np.ndarray
    num_teachers: int

    @property
    def params(self) -> dict:
        return self.summary["params"]

    @property
    def reads_records(self) -> bool:
        """The mechanism reads the private records: no votes, no teachers (module docstring)."""
        return self.spec.kind.reads_private_records


@dataclasses.dataclass(frozen=True)
class _Cost:
    """The realised cost recomputed per query (rows: asked queries; columns: orders), its totals
    and their epsilons at the config's delta."""

    ind: np.ndarray
    dep: np.ndarray
    rdp_ind: np.ndarray
    rdp_dep: np.ndarray
    eps_ind: float
    order_ind: float
    eps_dep: float
    order_dep: float


def _votes(run: Run, spec, summary: dict, asked: int) -> tuple[np.ndarray, int]:
    """The votes of the asked queries and the number of voters on one query."""
    if spec.kind.reads_private_records:
        # its histograms were drawn inside the aggregate stage and never saved: the cost of an
        # asked query does not depend on them (only their number is used here)
        votes = np.zeros((asked, 2), dtype=np.int64)
        # the records voting on one query (Private-kNN: k; class-means: all of them, counted
        # as declared -- the exact count is internal: pate.run.config.DataTable.declared_records)
        num_teachers = spec.voters(
            summary["params"], private_records=run.config.data.declared_records(run.data)[0]
        )
        return votes, num_teachers
    votes_all = load_npy(run.path(rundir.VOTES), what="the votes stage")
    return votes_all[:asked], int(votes_all[0].sum())


def _load_saved(run: Run) -> _Saved:
    """Read the aggregate stage's summary, answered mask and labels (and the votes stage's votes)."""
    config = run.config
    priv = config.privacy
    summary = rundir.read_summary(run.path(rundir.AGGREGATE), rundir.AGGREGATE_KEYS)
    spec = mechanisms.get(summary["mechanism"])
    orders = config.privacy.order_grid()
    delta, conversion = priv.delta, priv.conversion
    answered_all = load_npy(run.path(rundir.ANSWERED), what="the aggregate stage")
    labels = load_npy(run.path(rundir.LABELS), what="the aggregate stage")
    asked = int(summary["queries_asked"])
    votes, num_teachers = _votes(run, spec, summary, asked)
    return _Saved(
        summary=summary,
        spec=spec,
        orders=orders,
        delta=delta,
        conversion=conversion,
        answered_all=answered_all,
        labels=labels,
        asked=asked,
        answered=answered_all[:asked],
        votes=votes,
        num_teachers=num_teachers,
    )


def _check_charged(
    run: Run, summary: dict, orders: np.ndarray, *, rdp_dep: np.ndarray, rdp_ind: np.ndarray
) -> None:
    """Raise unless the events the aggregator charged are stated for adding or removing one
    record and compose to the recomputed totals."""
    events = [analysis.PrivacyEvent.from_dict(e) for e in summary["events"]]
    stated_for = sorted({e.relation for e in events} - {analysis.ADD_REMOVE})
    if stated_for:  # an aggregate.json written before the stable (keyed-hash) partition
        raise CorruptFileError(
            f"{run.path(rundir.AGGREGATE)} holds privacy events analysed for {', '.join(stated_for)} "
            "neighbours (written by a pate-learn whose teacher split reshuffled the records when "
            "one was added); this pate-learn states every guarantee for adding or removing one "
            "record and cannot report that run's. Start a new run directory",
            path=run.path(rundir.AGGREGATE),
        )
    charged = analysis.RdpAccountant(orders).compose(
        *[e for e in events if e.mechanism != "gnss-release"]
    )
    if not (
        np.allclose(charged.rdp(), rdp_dep, rtol=1e-9, atol=0)
        and np.allclose(charged.rdp(False), rdp_ind, rtol=1e-9, atol=0)
    ):
        raise RuntimeError(
            "the recomputed privacy cost differs from the cost the aggregator charged; "
            "the run directory may have been modified"
        )


def _realised_cost(run: Run, saved: _Saved) -> _Cost:
    """Realised cost, recomputed per query; its total must equal the charged event."""
    s = saved
    ind = s.spec.per_query_rdp(
        s.votes, s.params, answered=s.answered, orders=s.orders, data_dependent=False
    )
    dep = (
        ind
        if s.reads_records
        else s.spec.per_query_rdp(
            s.votes, s.params, answered=s.answered, orders=s.orders, data_dependent=True
        )
    )
    rdp_dep, rdp_ind = dep.sum(axis=0), ind.sum(axis=0)
    _check_charged(run, s.summary, s.orders, rdp_dep=rdp_dep, rdp_ind=rdp_ind)
    eps_dep, order_dep = analysis.eps_from_rdp(
        rdp_dep, orders=s.orders, delta=s.delta, conversion=s.conversion
    )
    eps_ind, order_ind = analysis.eps_from_rdp(
        rdp_ind, orders=s.orders, delta=s.delta, conversion=s.conversion
    )
    return _Cost(
        ind=ind,
        dep=dep,
        rdp_ind=rdp_ind,
        rdp_dep=rdp_dep,
        eps_ind=eps_ind,
        order_ind=order_ind,
        eps_dep=eps_dep,
        order_dep=order_dep,
    )


def _release(saved: _Saved, cost: _Cost, priv: PrivacyTable) -> dict:
    """The sanitized release: drawn (and charged) by the aggregate stage, with the parameters
    fixed in the config; without one, nothing data-dependent is released."""
    release = saved.summary.get("release")
    if release is None:
        orders, delta = saved.orders, saved.delta
        lam = priv.release_order
        idx = int(np.argmin(np.abs(orders - lam)))
        eps_at = float(
            cost.rdp_ind[idx]
            + analysis.conversion_term(order=orders[idx], delta=delta, conversion=saved.conversion)
        )
        release = {
            "order": float(orders[idx]),
            "beta": priv.release_beta,
            "sigma_ss": priv.release_sigma_ss,
            "noise_std": 0.0,
            "rdp_gnss": 0.0,
            "smooth_sensitivity": 0.0,
            "eps_data_independent": eps_at,
            "fallback": saved.summary["release_plan"]["fallback"],
            # nothing data-dependent is released: the data-independent epsilon holds at
            # every order, so its best order may be used
            "eps_sanitized": float(cost.eps_ind),
            "eps_sanitized_upper_2std": float(cost.eps_ind),
        }
    return dict(release)


def _guarantee(saved: _Saved, cost: _Cost, release: dict) -> tuple[float, dict | None]:
    """The epsilon of what the run releases, and the earlier rounds composed into it (or None)."""
    orders, delta, conversion = saved.orders, saved.delta, saved.conversion
    guarantee_rdp = cost.rdp_ind + _gnss_curve(release, orders)
    # Earlier rounds whose released student embeds this run ([knn] features = "student"):
    # what this run releases depends on them too, so their cost is composed in.
    prior = saved.summary.get("prior")
    if prior is not None:
        prior_rdp = np.asarray(prior["rdp"], dtype=float)
        guarantee_rdp = guarantee_rdp + prior_rdp
        prior = {
            "runs": prior["runs"],
            "eps": float(
                analysis.eps_from_rdp(prior_rdp, orders=orders, delta=delta, conversion=conversion)[
                    0
                ]
            ),
        }
    eps_guarantee, _ = analysis.eps_from_rdp(
        guarantee_rdp, orders=orders, delta=delta, conversion=conversion
    )
    return eps_guarantee, prior


def _curves(saved: _Saved, cost: _Cost) -> dict:
    """Epsilon after each asked query, against the number answered so far."""
    asked, orders, delta, conversion = saved.asked, saved.orders, saved.delta, saved.conversion
    idx = _downsample(asked)
    if not asked:
        return {"answered_count": [], "eps_data_independent": [], "eps_data_dependent": []}
    eps_i, _ = analysis.eps_from_rdp(
        np.cumsum(cost.ind, axis=0)[idx], orders=orders, delta=delta, conversion=conversion
    )
    eps_d, _ = analysis.eps_from_rdp(
        np.cumsum(cost.dep, axis=0)[idx], orders=orders, delta=delta, conversion=conversion
    )
    return {
        "answered_count": np.cumsum(saved.answered)[idx].astype(int).tolist(),
        "eps_data_independent": eps_i.tolist(),
        "eps_data_dependent": eps_d.tolist(),
    }


def _margins_and_teachers(run: Run, saved: _Saved) -> tuple[dict, str, dict]:
    """The vote-margin histogram, the neighbouring relation of the partition and the teachers'
    metrics (none of them for a run that reads the private records)."""
    from pate.core.partition import Partition

    if saved.reads_records:
        counts, edges = np.zeros(0, dtype=int), np.zeros(1)
        margin_note = (
            f"{saved.spec.title}: no vote margins; what the private records "
            "contributed was drawn inside the aggregate stage and never saved"
        )
        relation = "record"  # every record may be sampled for any query: no partition
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


@dataclasses.dataclass(frozen=True)
class _StudentFigures:
    """The student's saved metrics and the figures its warnings are judged against."""

    student: dict
    label_acc: float | None
    agreement: float | None
    majority: float
    steps: int | None


def _student_figures(run: Run, saved: _Saved) -> _StudentFigures:
    """Read the student's metrics; compute the accuracy of the answered labels, their agreement
    with the plurality vote, the evaluation split's majority-class rate and the student's steps."""
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
    majority = float(np.bincount(y_eval, minlength=data.num_classes).max() / y_eval.size)
    settings = student.get("settings") or {}
    steps = (
        int(settings["epochs"]) * int(settings["steps_per_epoch"])
        if isinstance(settings.get("epochs"), int)
        and isinstance(settings.get("steps_per_epoch"), int)
        else None
    )
    return _StudentFigures(
        student=student, label_acc=label_acc, agreement=agreement, majority=majority, steps=steps
    )


def _run_section(run: Run) -> dict:
    """The ``run`` object of ``analysis.json``: which run, made by which pate-learn."""
    from pate import __version__

    section = run.config.run
    return {
        "name": section.name,
        "run_dir": str(run.run_dir),
        "created": run.state["created"],
        "pate_learn_version": __version__,
        "run_id": run.state["run_id"],
        "forked_from": run.state.get("forked_from"),
        "smoke_test": bool(section.smoke_test),
    }


def _privacy_section(
    config: dict,
    saved: _Saved,
    cost: _Cost,
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
        "composition": _composition(
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


def _utility_section(run: Run, saved: _Saved, teachers: dict, figures: _StudentFigures) -> dict:
    """The ``utility`` object of ``analysis.json`` (its warnings are added by the caller)."""
    data, student = run.data, figures.student
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
        "label_accuracy_answered": figures.label_acc,
        "label_accuracy_note": (
            "accuracy of the released labels against the public split's true "
            "labels, which are known here only because this is a benchmark "
            "dataset; in a real deployment the public data is unlabelled"
        ),
        "evaluation_size": int(len(data.evaluation)),
        # False unless the data's source says its evaluation split is public (a built-in's test
        # split, a file's split of its own, pool rows declared public): every figure measured on
        # it (accuracies, confusion matrix, support, majority rate) is then internal
        "evaluation_public": bool(getattr(data, "evaluation_public", False)),
        # public inputs that are rows of the user's file marked public: no protection
        "public_from_pool": int(getattr(data, "public_from_pool", 0)),
        **(
            {"student_alone_accuracy": float(student["student_alone_accuracy"])}
            if "student_alone_accuracy" in student
            else {}
        ),
        "answered_labels": int(saved.answered.sum()),
        "answered_plurality_agreement": figures.agreement,
        "answered_plurality_agreement_note": (
            "internal: share of the answered labels equal to the teachers' noiseless "
            "plurality vote, computed from the private votes; do not publish"
        ),
        "majority_class_rate": figures.majority,
        "chance_rate": 1.0 / data.num_classes,
        "student_steps": figures.steps,
        "scale_warnings": scale_warnings(run, saved.reads_records),
    }


def build_analysis(run: Run) -> dict:
    """The ``analysis.json`` document of a run whose earlier stages are done."""
    config = run.config
    saved = _load_saved(run)
    cost = _realised_cost(run, saved)
    release = _release(saved, cost, config.privacy)
    guarantee = _guarantee(saved, cost, release)
    curves = _curves(saved, cost)
    vote_margins, relation, teachers = _margins_and_teachers(run, saved)
    figures = _student_figures(run, saved)
    ledger = _ledger_summary(run, saved.summary.get("dataset"))

    doc = {
        "format": 1,
        "run": _run_section(run),
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
        "utility": _utility_section(run, saved, teachers, figures),
        "curves": curves,
        "vote_margins": vote_margins,
    }
    records, basis = config.data.declared_records(run.data)  # public: never the exact count
    doc["privacy"]["records"] = {"declared": records, "basis": basis}
    u = doc["utility"]
    u["warnings"], u["internal_warnings"] = split_utility_warnings(
        u, num_classes=int(run.data.num_classes), answered=int(saved.answered.sum())
    )
    for warning in u["warnings"]:
        logger.warning("utility: %s", warning)
    for warning in u["internal_warnings"]:
        logger.warning("utility (INTERNAL, do not publish): %s", warning)
    return doc
