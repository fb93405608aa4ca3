"""The helpers of the plan step around :func:`pate.run.planner.rules.plan_config`: whether a
config needs a plan (``needs_plan``), the config with placeholders to validate first
(``probe``), what ``mechanism = "auto"`` becomes (``auto_mechanism``), the ledger's remaining
budget, and logging and writing the plan."""

from __future__ import annotations

import copy
import logging

from pate import mechanisms
from pate.run.planner.model import AUTO_MECHANISM, AUTO_NO_TEACHERS, Plan

logger = logging.getLogger("pate")


def log_plan(plan: Plan) -> None:
    """The plan on the ``pate`` logger (one line each)."""
    for line in plan.lines():
        (logger.warning if line.startswith("WARNING") else logger.info)("plan: %s", line)


def open_threshold(spec, agg: dict) -> bool:
    return (
        "threshold" in spec.param_names
        and agg.get("threshold") in (None, "auto")
        and not spec.kind.reads_private_records
    )


def needs_plan(config: dict) -> bool:
    """Whether a normalised config leaves a setting to the planner: ``mechanism = "auto"``, no
    (or "auto") ``[partition] num_teachers`` for a mechanism with teachers, ``queries = "auto"``
    or no queries with calibrated noise, or no (or "auto") Confident GNMax threshold."""
    agg = config["aggregator"]
    if agg.get("mechanism") == "auto" or agg.get("queries") == "auto":
        return True
    spec = mechanisms.REGISTRY.get(agg.get("mechanism"))
    if spec is None:
        return False  # validation names the mechanism
    if (
        not spec.kind.reads_private_records
        and (config.get("partition") or {}).get("num_teachers", "auto") == "auto"
    ):
        return True
    if spec.kind.releases_once and "features" not in (config.get("knn") or {}):
        return True  # a table's front-end is chosen from the sizes (:func:`pate.run.planner.front_end.plan_table_front_end`)
    calibrated = any(agg.get(k) == "auto" for k in spec.param_names if k != "threshold")
    return (calibrated and "queries" not in agg) or open_threshold(spec, agg)


def auto_mechanism(config: dict) -> str:
    """What ``mechanism = "auto"`` becomes with a target: the registry's choice without teachers
    when the user asked for none (teacher model "auto" and the number of teachers open), else
    its choice with teachers (``pate.mechanisms.auto_choice``; docs/plan.md,
    "What it fills in"). Reads the config only."""
    teachers = (config.get("teachers") or {}).get("model", "auto")
    count = (config.get("partition") or {}).get("num_teachers", "auto")
    return AUTO_NO_TEACHERS if teachers == "auto" and count in (None, "auto") else AUTO_MECHANISM


def probe(config: dict) -> dict:
    """``config`` with placeholders where the planner will fill in (to validate everything else
    first, with the usual messages)."""
    out = copy.deepcopy(config)
    agg = out["aggregator"]
    if agg.get("mechanism") == "auto":
        agg["mechanism"] = auto_mechanism(config) if "target_eps" in agg else AUTO_MECHANISM
        if agg["mechanism"] == AUTO_NO_TEACHERS:
            out.setdefault("partition", {}).pop("num_teachers", None)
        if "target_eps" in agg:
            for key in mechanisms.get(agg["mechanism"]).calibrated:
                agg.setdefault(key, "auto")
    spec = mechanisms.REGISTRY.get(agg["mechanism"])
    if spec is None:
        return out
    if (
        not spec.kind.reads_private_records
        and out.setdefault("partition", {}).get("num_teachers", "auto") == "auto"
    ):
        out["partition"]["num_teachers"] = 1
    if agg.get("queries") == "auto" or (
        "queries" not in agg and any(agg.get(k) == "auto" for k in spec.param_names)
    ):
        agg["queries"] = 1
    if open_threshold(spec, agg):
        agg["threshold"] = 1.0
    return out


def ledger_remaining(path, data, identity=None) -> float | None:
    """What the ledger at ``path`` (:meth:`pate.run.config.PrivacyTable.ledger_path`) has left for the private
    records of ``data`` (None: no ledger, no ledger file yet, or the records are not
    registered). Reads the ledger, writes nothing."""
    if path is None or not path.is_file():
        return None
    from pate.ledger import Ledger, private_identity

    if identity is None:
        identity = private_identity(data)
    with Ledger(path, create=False) as ledger:
        digest = ledger.dataset_id(identity)
        if not any(d["digest"] == digest for d in ledger.datasets()):
            return None
        summary = ledger.summary(digest)
    left = summary.get("remaining_effective", summary.get("remaining"))
    return None if left is None else float(left)


def write_plan(path, plan: Plan) -> None:
    """``plan.json`` of a run directory (atomic)."""
    from pate.core.io import atomic_write_json

    atomic_write_json(path, plan.to_dict())
