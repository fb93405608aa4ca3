"""The helpers of the plan step around :func:`pate.run.planner.rules.plan_config`: whether a
config needs a plan, what ``mechanism = "auto"`` becomes, the ledger's remaining budget."""

from __future__ import annotations

import logging

from pate import mechanisms
from pate.run.planner.costs import with_noise
from pate.run.planner.plan_data import AUTO_MECHANISM, AUTO_NO_TEACHERS, Plan

logger = logging.getLogger("pate")


def log_plan(plan: Plan) -> None:
    """The plan on the ``pate`` logger (one line each)."""
    for line in plan.lines():
        (logger.warning if line.startswith("WARNING") else logger.info)("plan: %s", line)


def open_threshold(spec, noise) -> bool:
    """Whether a Confident GNMax threshold is left to the planner (``noise``: the
    ``[aggregator]`` noise parameters)."""
    return (
        "threshold" in spec.param_names
        and noise.get("threshold") in (None, "auto")
        and not spec.kind.reads_private_records
    )


def needs_plan(config) -> bool:
    """Whether a parsed :class:`pate.run.config.RunConfig` leaves a setting to the planner:
    ``mechanism = "auto"``, no (or "auto") ``[partition] num_teachers`` for a mechanism with
    teachers, ``queries = "auto"`` or no queries with calibrated noise, or no (or "auto")
    Confident GNMax threshold."""
    agg = config.aggregator
    if agg.mechanism == "auto" or agg.queries == "auto":
        return True
    spec = mechanisms.REGISTRY.get(agg.mechanism)
    if spec is None:
        return False  # validation names the mechanism
    if not spec.kind.reads_private_records and config.partition.num_teachers in (None, "auto"):
        return True
    if spec.kind.releases_once and config.knn.features is None:
        return True  # a table's front-end is chosen from the sizes (:func:`pate.run.planner.front_end.plan_table_front_end`)
    calibrated = any(agg.noise.get(k) == "auto" for k in spec.param_names if k != "threshold")
    return (calibrated and agg.queries is None) or open_threshold(spec, agg.noise)


def auto_mechanism(config) -> str:
    """What ``mechanism = "auto"`` becomes with a target: the registry's choice without teachers
    when the user asked for none (teacher model "auto" and the number of teachers open), else
    its choice with teachers (``pate.mechanisms.auto_choice``; docs/plan.md,
    "What it fills in"). Reads the config only."""
    return auto_mechanism_for(config.teachers.model, config.partition.num_teachers)


def auto_mechanism_for(teacher, num_teachers) -> str:
    """:func:`auto_mechanism` of the teacher model and number of teachers asked for (before a
    config is built: :func:`pate.fit`'s keywords)."""
    open_count = num_teachers in (None, "auto")
    return (
        AUTO_NO_TEACHERS
        if isinstance(teacher, str) and teacher == "auto" and open_count
        else AUTO_MECHANISM
    )


def with_auto_mechanism(config):
    """``config`` with ``mechanism = "auto"`` and a target resolved (:func:`auto_mechanism`):
    the noise it calibrates left "auto" where not given, no teachers for a release."""
    chosen = auto_mechanism(config)
    config = config.replace("aggregator", mechanism=chosen)
    if chosen == AUTO_NO_TEACHERS:  # no teachers: nothing to split them by
        config = config.replace("partition", num_teachers=None)
    open_noise = {k: "auto" for k in mechanisms.get(chosen).calibrated}
    return with_noise(config, **dict(open_noise, **config.aggregator.noise))


def probe(config):
    """``config`` (a parsed :class:`pate.run.config.RunConfig`) with placeholders where the
    planner will fill in (to validate everything else first, with the usual messages)."""
    if config.aggregator.mechanism == "auto":
        if config.aggregator.target_eps is None:
            config = config.replace("aggregator", mechanism=AUTO_MECHANISM)
        else:
            config = with_auto_mechanism(config)
    agg = config.aggregator
    spec = mechanisms.REGISTRY.get(agg.mechanism)
    if spec is None:
        return config
    if not spec.kind.reads_private_records and config.partition.num_teachers in (None, "auto"):
        config = config.replace("partition", num_teachers=1)
    if agg.queries == "auto" or (
        agg.queries is None and any(agg.noise.get(k) == "auto" for k in spec.param_names)
    ):
        config = config.replace("aggregator", queries=1)
    if open_threshold(spec, agg.noise):
        config = with_noise(config, threshold=1.0)
    return config


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
