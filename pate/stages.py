"""The stages of a PATE run, each implemented once: a function of an open :class:`pate.rundir.Run`.

``pate run`` (:class:`pate.pipeline.Pipeline`), the stage subcommands (``pate partition``,
``pate train-teachers``, ``pate vote``, ``pate aggregate``, ``pate train-student``,
``pate analyze --run-dir``, ``pate report``) and the Python API all call :func:`run_stage`, so the
same files, the same JSON keys and the same ledger charges come out whichever path ran a stage.

=========  =====================================================================================
partition  ``partition.npz``: disjoint shards of the private split, one per teacher
teachers   ``teachers/``: one model per shard, predictions and accuracy metrics
votes      ``votes.npy``: teacher votes on the public split (sensitive: never printed)
aggregate  ``labels.npy``, ``answered.npy``, ``aggregate.json``: noisy labels within the budget,
           charged to the ledger BEFORE they are written (see :func:`aggregate`)
student    ``student.pt``, ``student_metrics.json``: the only model that is ever released
analysis   ``analysis.json``: every privacy and utility number, including the sanitized release
report     ``report.json``, ``report.md``, ``report.html``, ``plots/*.png``
=========  =====================================================================================

A Private-kNN run (a mechanism with ``samples_private_records``) trains no teachers: partition
and teachers are recorded as skipped (``stages/<stage>.json`` with ``skipped`` and ``reason``,
see :func:`skip_reason`); its votes stage writes ``knn_embeddings.npz`` (public-fitted
embeddings of the public and private splits) and its aggregate stage draws the kNN histograms
inside each ledger round, after the round's reservation (:func:`aggregate`).

Symbols
-------
``STAGE_FUNCTIONS``
    stage name -> function ``(run) -> info dict`` (the info is saved in ``stages/<stage>.json``).
``run_stage(run, stage)``
    Check the stage's prerequisite is done and it is not, run it, mark it done (a stage that
    does not apply to the run, :func:`skip_reason`, is marked skipped instead, every time).
``skip_reason(config, stage)``
    Why ``stage`` does not apply to a run of ``config`` (None when it does).
``preflight(run, stages=...)``
    Every check that needs the machine, the data or the ledger, before any work: the device of
    the stages about to run (:func:`check_device`), sizes, the dataset's identity and budget
    in the ledger (:func:`authorize`), and that the ledger can cover the run's planned worst
    case before any teacher trains (:func:`check_budget_fits`).
``authorize(run, ledger)``
    Register the private split's identity (:func:`pate.ledger.dataset_identity`) and resolve the
    run's budget against the ledger's lifetime budget: a new dataset takes ``budget_eps`` (else
    the run's ``target_eps``); a run that leaves it out takes the ledger's; a different one is
    refused, naming both and the command that changes the ledger's.
``check_budget_fits(run, ledger, dataset)``
    Reserve-and-release the planned worst case (public facts only); refused: exit 3, with what is
    left and the pasteable commands that raise the budget and resume.
``release_plan(config, ...)``
    Whether a sanitized data-dependent epsilon is released, decided from public quantities.
``knn_prior(run)``
    A later Private-kNN round (``[knn] features = "student"``): the earlier run whose released
    student embeds it, checked, and that run's privacy cost (composed into this run's guarantee).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import math
import pathlib
import time
from typing import Callable

import numpy as np

from pate import config as C
from pate import mechanisms
from pate import rundir as R
from pate.analysis.errors import BudgetExceededError, ConfigError, CorruptFileError
from pate.io import atomic_save_npy, atomic_savez, atomic_write_json, load_npy, load_npz
from pate.rundir import Run

logger = logging.getLogger("pate")

__all__ = ["STAGE_FUNCTIONS", "run_stage", "preflight", "authorize", "check_budget_fits",
           "release_plan", "config_identity", "skip_reason", "knn_prior"]


# ------------------------------------------------------------------------------ plumbing

def skip_reason(config: dict, stage: str) -> str | None:
    """Why ``stage`` does not apply to a run of ``config``, or None: a mechanism that samples
    the private records itself (Private-kNN) has no partition and no teachers."""
    spec = mechanisms.get(config["aggregator"]["mechanism"])
    if spec.samples_private_records and stage in ("partition", "teachers"):
        return (f"mechanism {spec.name!r} ({spec.title}) trains no teachers: the private records "
                "themselves vote, through their nearest neighbours in a fresh sample per query "
                "(the votes stage embeds them, the aggregate stage draws the histograms)")
    return None


def _skip(run: Run, stage: str, reason: str) -> dict:
    """Record a stage that does not apply as skipped (again: the same record)."""
    if run.done(stage):
        return run.stage_info(stage)
    run.start()
    return run.mark(stage, {"skipped": True, "reason": reason, "seconds": 0.0})


def run_stage(run: Run, stage: str) -> dict:
    """Run ``stage`` of ``run`` (its prerequisite must be done, itself not) and mark it done."""
    import time

    if stage not in STAGE_FUNCTIONS:
        raise ValueError(f"stage must be one of {', '.join(R.STAGES)}, got {stage!r}")
    # stages that do not apply to this run (and come before this one) are recorded as skipped
    for earlier in R.STAGES[:R.STAGES.index(stage) + 1]:
        reason = skip_reason(run.config, earlier)
        if reason is None:
            break
        info = _skip(run, earlier, reason)
        if earlier == stage:
            return info
    before = R.PREREQUISITES[stage]
    if before is not None and not run.done(before):
        raise ConfigError(f"{run.run_dir}: stage {stage!r} needs stage {before!r} first (run "
                          f"`pate {R.COMMANDS[before]} --run-dir {run.run_dir}`, or `pate run "
                          f"--run-dir {run.run_dir} --resume`)")
    if run.done(stage):
        raise ConfigError(f"{run.run_dir}: stage {stage!r} is already done; start a new run "
                          "directory to redo it")
    run.start()
    t0 = time.perf_counter()
    info = STAGE_FUNCTIONS[stage](run) or {}
    info["seconds"] = round(time.perf_counter() - t0, 2)
    return run.mark(stage, info)


def _is_estimator(model) -> bool:
    """A scikit-learn estimator given from Python (a student trained by ``_sklearn_student``)."""
    return hasattr(model, "fit") and hasattr(model, "get_params")


def _computes_here(config: dict, stage: str, objects: dict) -> bool:
    """Whether ``stage`` trains a torch model on this machine's ``[run] device``: the student
    (unless it is a scikit-learn estimator given from Python, in ``objects``), and the teachers
    on the local backend (a cluster's workers check their own devices)."""
    if stage == "student":
        model = config["student"].get("model", "auto")
        if isinstance(model, str) and model.startswith("python:"):
            return not _is_estimator(objects.get("student_model"))
        return True
    return (stage == "teachers" and skip_reason(config, "teachers") is None
            and (config.get("cluster") or {}).get("backend", "local") == "local")


def check_device(config: dict, stages=R.STAGES, *, objects: dict | None = None) -> None:
    """Refuse a ``[run] device`` that this machine lacks (e.g. "cuda" without a GPU) before any
    of ``stages`` runs, when one of them computes here (:func:`_computes_here`; ``objects``: the
    run's models given from Python). Otherwise a run without teachers (class-means,
    Private-kNN) would draw and charge its release and only then fail in the student stage."""
    users = [stage for stage in stages if _computes_here(config, stage, objects or {})]
    if not users:
        return
    from pate.teachers.ensemble import resolve_device

    device = config["run"]["device"]
    try:
        resolve_device(device)
    except ValueError as exc:
        raise ConfigError(f"[run] device = {device!r} (used by the {' and '.join(users)} "
                          f"stage{'s' if len(users) > 1 else ''}): {exc}; nothing was written, "
                          "drawn or charged") from None


def check_data(run: Run) -> None:
    """Checks that need the dataset's sizes (before anything is written)."""
    data, config = run.data, run.config
    queries = config["aggregator"].get("queries")
    if queries is not None and queries > len(data.public):
        raise ConfigError(f"[aggregator] queries ({queries}) exceeds the {len(data.public)} "
                          f"public items of {data.name}")
    if mechanisms.get(config["aggregator"]["mechanism"]).samples_private_records:
        _check_knn_data(run)
        return
    k = config["partition"]["num_teachers"]
    if k > len(data.private):
        raise ConfigError(f"[partition] num_teachers ({k}) exceeds the {len(data.private)} "
                          f"private records of {data.name}")
    if config["partition"]["mode"] == "unit":
        unit_ids = load_npy(config["partition"]["unit_ids"], what="[partition] unit_ids")
        if unit_ids.shape[0] != len(data.private):
            raise ConfigError(f"[partition] unit_ids has {unit_ids.shape[0]} ids but the private "
                              f"split has {len(data.private)} records")


def _knn_features(run: Run) -> tuple[str, int, int]:
    """(features, dims, feature count) of a Private-kNN run's embedding (ConfigError if the
    data cannot take them): sizes only, no record is read."""
    data = run.data
    settings = C.knn_settings(run.config, data.input_shape, sizes=(
        len(data.private), int(data.num_classes), len(data.public)))
    features, dims = settings["features"], settings["dims"]
    if features == "student":  # the earlier student's class probabilities, no PCA
        return features, int(data.num_classes), int(data.num_classes)
    if features == "kernel":
        from pate.teachers.features import KERNEL_FEATURES

        if len(data.input_shape) != 1:
            raise ConfigError(f"[knn] features = \"kernel\" maps tables; {data.name} has inputs "
                              f"of shape {tuple(data.input_shape)}: set [knn] features = "
                              "\"scatternet\" or \"none\"")
        return features, dims, KERNEL_FEATURES
    if features == "scatternet":
        from pate.teachers.features import feature_shape

        try:
            width = int(np.prod(feature_shape(data.input_shape)))
        except ValueError as exc:
            raise ConfigError(f"[knn] features: {exc}; set [knn] features = \"none\"") from None
    else:
        width = int(np.prod(data.input_shape))
    return features, dims, width


def _feature_cache(run: Run):
    """The on-disk front-end feature cache of this run (None: ``[run] feature_cache = false``
    or ``$PATE_FEATURE_CACHE=off``); docs/feature_cache.md."""
    from pate.teachers.feature_cache import FeatureCache

    root = C.feature_cache_root(run.config, run_dir=run.run_dir)
    return None if root is None else FeatureCache(root)


def _check_knn_data(run: Run) -> None:
    features, dims, width = _knn_features(run)
    limit = min(len(run.data.public), width)
    if features == "student":
        knn_prior(run)  # the earlier run is usable (ConfigError naming it otherwise)
    elif dims > limit:
        raise ConfigError(f"[knn] dims ({dims}) exceeds min(public items, {features!r} features) "
                          f"= {limit} of {run.data.name}: the principal axes are fitted on the "
                          "public split")
    k = C.aggregator_params(run.config).get("k")  # Private-kNN's neighbours per query
    if k is not None and k > len(run.data.private):
        raise ConfigError(f"[aggregator] k ({k}) exceeds the {len(run.data.private)} private "
                          f"records of {run.data.name}")


def knn_prior(run: Run) -> dict | None:
    """The earlier round of a Private-kNN run whose neighbour search is embedded by an earlier
    run's released student (``[knn] features = "student"``, ``student_run``), and its privacy
    cost: ``{"runs": [{"run_dir", "run_id", "eps"}, ...], "rdp": [...]}`` -- every event that
    run charged (its answers and any release, data-independent), plus its own earlier rounds, at
    this run's orders. None for any other run.

    Why it composes: that student is a function of the public data and of the earlier run's
    released labels only, so this run's mechanism (a fixed embedding applied to each private
    record, then Private-kNN) keeps the sensitivity of ``pate.analysis.private_knn``; but what
    this run releases depends on both rounds, so its guarantee is the composition (adaptive
    composition of RDP: the curves add). The student is usable only if that run drew fresh
    noise and was charged to this run's ledger for the same records (the ledger then holds both
    rounds against one budget), with the same orders; otherwise ConfigError, naming
    ``[knn] student_run`` and the reason, before anything is drawn."""
    from pate import analysis
    from pate.analysis import PrivacyEvent

    knn = run.config.get("knn") or {}
    if knn.get("features") != "student":
        return None
    path = pathlib.Path(knn["student_run"]).expanduser().resolve()
    where = f"[knn] student_run = {knn['student_run']!r}"
    for name in (R.STUDENT_WEIGHTS, R.AGGREGATE):
        if not (path / name).is_file():
            raise ConfigError(f"{where}: {path / name} does not exist; name the directory of a "
                              "finished run (its student trained)")
    summary = R.read_summary(path / R.AGGREGATE, R.AGGREGATE_KEYS)
    if summary["noise_seeded"]:
        raise ConfigError(f"{where}: that run's noise was seeded (not private); its student "
                          "cannot embed a private run")
    ledger = run.ledger_path
    if ledger is None or summary["ledger"] is None or \
            pathlib.Path(summary["ledger"]).resolve() != ledger.resolve():
        raise ConfigError(f"{where}: that run was charged to the ledger {summary['ledger']} and "
                          f"this run's is {ledger}; both rounds must be charged to the same "
                          "ledger, which composes them against one budget")
    digest = _identity(run).digest
    if summary["dataset"] != digest:
        raise ConfigError(f"{where}: that run's private records ({summary['dataset'][:16]}...) "
                          f"are not this run's ({digest[:16]}...)")
    config = run.config
    orders = C.orders(config)
    own = np.zeros(orders.size)
    for entry in summary["events"]:
        event = PrivacyEvent.from_dict(entry)
        if not np.array_equal(event.orders, orders):
            raise ConfigError(f"{where}: that run used other [privacy] orders; use the same "
                              "orders in every round")
        own = own + event.rdp_data_independent
    # The cost comes from the ledger (the authority), per run of the chain; the files only name
    # the runs, and what they record must agree with what the ledger charged.
    earlier = summary.get("prior") or {"runs": [], "rdp": np.zeros(orders.size).tolist()}
    chain = [r["run_id"] for r in earlier["runs"]] + [summary["run_id"]]
    with contextlib.closing(run.ledger()) as opened:
        charged = {run_id: sum((np.asarray(e.event.rdp_data_independent, dtype=float)
                                for e in opened.events(digest, run_id=run_id)),
                               np.zeros(orders.size))
                   for run_id in chain}
    recorded = (own, np.asarray(earlier["rdp"], dtype=float))
    ledgered = (charged[summary["run_id"]],
                sum((charged[r] for r in chain[:-1]), np.zeros(orders.size)))
    if not all(np.allclose(a, b, rtol=1e-9, atol=0) for a, b in zip(recorded, ledgered)):
        raise ConfigError(f"{where}: the ledger {ledger} does not hold the charges of that run "
                          "(or of its earlier rounds) as its aggregate.json records them "
                          "(modified, or from another ledger); it cannot be composed")
    eps = analysis.eps_from_rdp(ledgered[0], orders=orders, delta=config["privacy"]["delta"],
                                conversion=config["privacy"]["conversion"])[0]
    return {"runs": [*earlier["runs"], {"run_dir": str(path), "run_id": summary["run_id"],
                                        "eps": float(eps)}],
            "rdp": sum(charged.values(), np.zeros(orders.size)).tolist()}


def config_identity(config: dict):
    """The ledger identity of a config's private split (what ``pate budget digest`` prints)."""
    from pate.ledger import dataset_identity
    from pate.teachers.data import load_pate_data

    data = load_pate_data(config["data"]["name"], **C.data_settings(config))
    return dataset_identity(data.private.x, data.private.y)


def _identity(run: Run):
    """The private split's identity (hashed once per open run: preflight, the ledger and a
    later Private-kNN round all ask for it)."""
    from pate.ledger import dataset_identity

    if "identity" not in run.objects:
        run.objects["identity"] = dataset_identity(run.data.private.x, run.data.private.y)
    return run.objects["identity"]


def _caller(run: Run) -> str | None:
    """Who started the run: :data:`pate.config.PYTHON_SOURCE` for :func:`pate.fit` (messages
    name keyword arguments), None for the CLI (TOML keys and flags)."""
    caller = run.objects.get("caller") or run.objects.get("wording")
    return C.PYTHON_SOURCE if caller in (C.PYTHON_SOURCE, "python") else caller


def authorize(run: Run, ledger) -> str:
    """The private split's dataset in ``ledger``, and the run's budget resolved against it.

    The ledger holds each dataset's lifetime budget (the one authority). A new dataset is
    registered with ``[privacy] budget_eps`` (``budget_eps=``), or, left out, with the run's
    ``target_eps`` (logged: the lifetime budget is then this run's target until it is raised
    with ``pate budget set``). A known dataset keeps the ledger's budget: a run that leaves
    ``budget_eps`` out uses it; a run that asks for a different ``budget_eps`` is refused (naming
    the setting and how to change the ledger's) before anything is written -- except a started
    run resumed with the budget it last ran under (its ``config.json``'s), which goes on with the
    ledger's when ``pate budget set`` changed it since (logged). ``delta`` and ``conversion`` must always agree.
    Sets ``run.config["privacy"]["budget_eps"]`` to the ledger's budget (in memory: the aggregate
    stage stops on it)."""
    priv = run.config["privacy"]
    identity = _identity(run)
    given = priv.get("budget_eps")
    register = given if given is not None else run.config["aggregator"].get("target_eps")
    # a started run that names the budget it last ran under (its config.json's) may go on with
    # the ledger's when that was changed since; a budget asked for anew must be the ledger's
    resumed = given is not None and given == run.objects.get("recorded_budget_eps")
    known = ledger.datasets()
    for d in known:
        if d["digest"] == identity.digest and d["budget_eps"] is not None:
            _check_budget(run, ledger, d["digest"], (d["budget_eps"], d["budget_delta"],
                                                     d["conversion"]),
                          (given, priv["delta"], priv["conversion"]), resumed=resumed)
    name = priv.get("dataset")
    if name is None:  # the data's name, unless another set of records already carries it
        taken = {n: d["digest"] for d in known for n in (d["name"], *d["aliases"])}
        name = run.config["data"]["name"]
        if taken.get(name, identity.digest) != identity.digest:
            name = None
    budget = None
    if not any(d["digest"] == identity.digest and d["budget_eps"] is not None for d in known) \
            and register is None:
        caller = _caller(run)
        raise ConfigError(
            f"the ledger {ledger.path} holds no budget for this dataset ({identity.digest[:16]}"
            f"...) yet: set {C.setting('privacy', 'budget_eps', source=caller)} (its lifetime "
            f"budget) or {C.setting('aggregator', 'target_eps', source=caller)} (what this run "
            "spends, then also registered as the lifetime budget)")
    digest = ledger.register_identity(identity, name=name)
    budget = ledger.budget(digest)
    if budget is None:
        ledger.set_budget(digest, eps=register, delta=priv["delta"],
                          conversion=priv["conversion"])
        if given is None:
            caller = _caller(run)
            logger.warning(
                "the ledger %s registered this dataset (%s...) with the lifetime budget eps=%g, "
                "this run's %s (%s was not given); later runs on the same records share it. To "
                "allow more over the dataset's life, give %s the first time, or raise it with %s",
                ledger.path, digest[:16], register,
                C.setting("aggregator", "target_eps", source=caller),
                C.setting("privacy", "budget_eps", source=caller),
                C.setting("privacy", "budget_eps", source=caller),
                C.budget_command(caller, ledger=ledger.path, digest=digest, eps=register * 2,
                                 delta=priv["delta"], conversion=priv["conversion"]))
        budget = ledger.budget(digest)
    else:  # again: another process may have set it meanwhile
        _check_budget(run, ledger, digest, (budget.eps, budget.delta, budget.conversion),
                      (given, priv["delta"], priv["conversion"]), resumed=resumed)
    priv["budget_eps"] = float(budget.eps)
    return digest


def _check_budget(run: Run, ledger, digest: str, have: tuple, want: tuple, *,
                  resumed: bool) -> None:
    """ConfigError unless the ledger's budget ``have`` and the run's ``want`` -- both
    ``(eps, delta, conversion)``; ``want``'s eps None: the ledger's -- agree. A resumed run
    accepts the ledger's eps (see :func:`authorize`)."""
    (b_eps, b_delta, b_conv), (eps, delta, conversion) = have, want
    if (b_delta, b_conv) == (delta, conversion) and (eps is None or eps == b_eps):
        return
    if (b_delta, b_conv) == (delta, conversion) and resumed:
        if run.objects.get("budget_noted") == b_eps:
            return
        run.objects["budget_noted"] = b_eps
        logger.warning("the ledger %s holds the lifetime budget eps=%g for this dataset (%s...); "
                       "this run last ran under eps=%g and goes on with the ledger's",
                       ledger.path, b_eps, digest[:16], eps)
        return
    caller = _caller(run)
    asked = [(key, mine, theirs) for key, mine, theirs in (
        ("budget_eps", eps, b_eps), ("delta", delta, b_delta), ("conversion", conversion, b_conv))
        if mine is not None and mine != theirs]
    fix = "; ".join(f"set {C.assignment('privacy', key, theirs, source=caller)}" + (
        " or leave it out (the ledger's applies)" if key == "budget_eps" else "")
        for key, _, theirs in asked)
    command = C.budget_command(caller, ledger=ledger.path, digest=digest,
                               eps=b_eps if eps is None else eps, delta=delta, conversion=conversion)
    raise ConfigError(
        f"the ledger {ledger.path} holds the lifetime budget eps={b_eps:g}, delta={b_delta:g} "
        f"({b_conv} conversion) for this dataset ({digest[:16]}...), but this run asks for "
        + ", ".join(C.assignment("privacy", key, mine, source=caller) for key, mine, _ in asked)
        + f". The ledger is the one authority: {fix}; or change the ledger's budget with "
        f"`{command}` (recorded, and shown in the report)")


def _resolve_budget_without_ledger(run: Run) -> None:
    """Without a ledger the config's budget is the only one: ``budget_eps``, else the run's
    ``target_eps`` (:func:`pate.config.validate` requires one of them)."""
    priv = run.config["privacy"]
    if priv.get("budget_eps") is None:
        priv["budget_eps"] = float(run.config["aggregator"]["target_eps"])


def _planned_worst_case(run: Run) -> tuple[np.ndarray, np.ndarray, int, str] | None:
    """The data-independent RDP this run must be able to reserve before any private record is
    read, the RDP of all its planned queries (what a raised budget should cover), how many
    those are, and what the first is -- from public facts only (the
    mechanism, its noise, the number of public items and of classes): the whole planned cost
    for a run with a ``target_eps`` (its calibrated worst case: every query answered) and for a
    mechanism that releases once (class-means); else one query (a run with set noise stops when
    the budget runs out, the aggregate stage reserves as many as fit). None when the run asks
    no query."""
    config = run.config
    agg = config["aggregator"]
    spec = mechanisms.get(agg["mechanism"])
    orders = C.orders(config)
    num_public = len(run.data.public)
    queries = min(agg.get("queries", num_public), num_public)
    if queries <= 0:
        return None
    params = spec.validate(C.aggregator_params(config), prefix="[aggregator] ")
    if spec.releases_once:
        event = spec.event(np.zeros((queries, run.data.num_classes)), params,
                           answered=np.ones(queries, dtype=bool), orders=orders)
        rdp = event.rdp_data_independent
        return rdp, rdp, queries, f"the one release of {spec.title}"
    worst = spec.worst_case_query_rdp(params, orders=orders)
    if agg.get("target_eps") is not None:
        return (queries * worst, queries * worst, queries,
                f"this run's target eps={agg['target_eps']:g} ({queries} queries, all answered)")
    return worst, queries * worst, queries, f"even one query of {spec.title}"


def _raise_hint(run: Run, ledger, dataset: str, rdp) -> str:
    """"raise the dataset's lifetime budget: `<command>`[, then `pate run --run-dir DIR
    --resume`]": the command (a Python call for :func:`pate.fit`, ``pate budget set`` for the
    CLI) raises the budget by the epsilon of ``rdp`` (public arithmetic) over what is spent and
    reserved; both work when pasted."""
    from pate import analysis

    summary = ledger.summary(dataset)
    budget = summary["budget"]
    orders = C.orders(run.config)
    cost = float(analysis.eps_from_rdp(np.asarray(rdp, dtype=float), orders=orders,
                                       delta=budget["delta"],
                                       conversion=budget["conversion"])[0])
    caller = _caller(run)
    command = C.budget_command(caller, ledger=ledger.path, digest=dataset,
                               eps=math.ceil(100 * (max(budget["eps"], summary["spent_and_reserved"])
                                                    + cost)) / 100,
                               delta=budget["delta"], conversion=budget["conversion"])
    if caller == C.PYTHON_SOURCE:
        then = ""
    elif (run.run_dir / R.STATE).exists():  # a started run continues where it stopped
        then = f", then `pate run --run-dir {run.run_dir} --resume`"
    else:  # nothing was started: the same command again
        then = ", then run this command again"
    return f"raise the dataset's lifetime budget: `{command}`{then}"


def check_budget_fits(run: Run, ledger, dataset: str) -> None:
    """Refuse (``BudgetExceededError``, exit 3) a run whose planned worst case
    (:func:`_planned_worst_case`) the ledger cannot reserve now -- this dataset's budget and
    every linked one, concurrent runs included, checked by the ledger itself -- before any
    stage runs: no teacher is trained for a run that could not be answered.

    The check reserves and at once releases: no reservation is held across the teacher training
    (it may take hours; a reservation held that long would need a heartbeat and would block
    concurrent runs for that long). The aggregate stage reserves again before any noise is drawn,
    so a budget spent by another run in between stops the run there (charge-before-release is
    unchanged), and it resumes without retraining once the budget is raised."""
    planned = _planned_worst_case(run)
    if planned is None:
        return
    rdp, full, queries, what = planned
    orders = C.orders(run.config)
    try:
        ledger.reserve(dataset, orders=orders, rdp=rdp, run_id=run.run_id + ":preflight").release()
        return
    except BudgetExceededError:
        pass
    from pate import analysis

    priv = run.config["privacy"]

    def eps_of(curve):
        return float(analysis.eps_from_rdp(curve, orders=orders, delta=priv["delta"],
                                           conversion=priv["conversion"])[0])

    cost, full_cost = eps_of(rdp), eps_of(full)
    summary = ledger.summary(dataset)
    budget = summary["budget"]
    remaining = (summary["remaining"] if summary.get("remaining_effective") is None
                 else summary["remaining_effective"])
    remaining = 0.0 if remaining < 1e-9 else remaining  # rounding of a spent budget
    caller = _caller(run)
    name = functools.partial(C.setting, source=caller)
    limited = summary.get("limited_by")
    where = ("" if not limited or limited == dataset else
             f" (limited by the linked dataset {limited[:16]}...)")
    if run.config["aggregator"].get("target_eps") is not None:
        fix = f"lower {name('aggregator', 'target_eps')} to what is left, or "
    else:
        fix = f"use more noise (all {queries} queries cost eps={full_cost:.4g}), or "
    raise BudgetExceededError(
        f"the ledger {ledger.path} has no room for {what}: it costs eps={cost:.4g} at most, and "
        f"this dataset ({dataset[:16]}...) has eps={remaining:.4g} left{where} of its lifetime "
        f"budget eps={budget['eps']:g} (spent and reserved: eps="
        f"{summary['spent_and_reserved']:.4g}). Nothing was trained, drawn or charged. To go on, "
        f"{fix}{_raise_hint(run, ledger, dataset, full)}",
        requested=cost, remaining=remaining)


def preflight(run: Run, *, stages=R.STAGES) -> None:
    """The device of ``stages`` (those about to run), that a run about to aggregate is in its
    own directory (not a copy: :meth:`pate.rundir.Run.check_not_a_copy`), data sizes, then the
    ledger's dataset and budget, and -- while the aggregate stage has yet to draw anything --
    that the ledger can cover the run's planned worst case (:func:`check_budget_fits`): all of
    it before any work or any file."""
    check_device(run.config, stages, objects=run.objects)
    if "aggregate" in stages:
        run.check_not_a_copy()
    check_data(run)
    ledger = run.ledger()
    if ledger is None:
        _resolve_budget_without_ledger(run)
        return
    try:
        dataset = authorize(run, ledger)
        # nothing drawn yet: not published (aggregate.json, maybe before its stage file), no
        # pending answers (the resume charges and publishes those, whatever is left)
        drawing = not any(run.path(name).exists() for name in (
            R.AGGREGATE, R.PENDING, R.PENDING_SUMMARY)) and not run.done("aggregate")
        if drawing and any(s in stages for s in R.STAGES[:R.STAGES.index("aggregate") + 1]):
            check_budget_fits(run, ledger, dataset)
    finally:
        ledger.close()


# ------------------------------------------------------------------------------ stages

def partition(run: Run) -> dict:
    from pate import partition as P

    cfg = run.config["partition"]
    k, rng = cfg["num_teachers"], run.streams().partition
    if cfg["mode"] == "random":  # a keyed hash of each record's content key (the ledger's)
        part = P.partition_random(_identity(run).record_keys, num_teachers=k, rng=rng)
    else:
        unit_ids = load_npy(cfg["unit_ids"], what="[partition] unit_ids")
        part = P.partition_by_unit(unit_ids, num_teachers=k, rng=rng)
    part.save(run.path(R.PARTITION))
    sizes = part.shard_sizes
    return {"num_teachers": k, "mode": cfg["mode"], "relation": part.relation,
            "shard_size_min": int(sizes.min()), "shard_size_max": int(sizes.max()),
            "neighbouring_relation": part.neighbouring_relation}


def teachers(run: Run) -> dict:
    from pate.partition import Partition
    from pate.teachers.cluster import ClusterConfig
    from pate.teachers.ensemble import TeacherConfig, train_teachers

    part = Partition.load(run.path(R.PARTITION))
    if part.num_records != len(run.data.private):
        raise ConfigError(f"{run.path(R.PARTITION)} covers {part.num_records} records but the "
                          f"private split has {len(run.data.private)}; start a new run directory")
    seeds = run.streams().teacher_seeds(part.num_teachers)
    settings = C.teacher_settings(run.config)
    settings["model"] = run.python_object("teacher_model", settings["model"])
    # [cluster] says where the teachers train, never what they compute: every backend gives the
    # same predictions; the stage summary records where it ran (the report shows it)
    cluster = ClusterConfig(**C.cluster_settings(run.config))
    from pate.teachers.feature_cache import using as using_feature_cache

    cache = _feature_cache(run)
    with using_feature_cache(cache):  # [teachers] features = "scatternet": cached on disk
        result = train_teachers(run.data, part.shards, seeds, TeacherConfig(**settings),
                                out_dir=run.path(R.TEACHERS), resume=True, progress=run.progress,
                                cluster=cluster)
    summary = result.summary()
    if cache is not None and cache.summary()["entries"]:
        summary["feature_cache"] = cache.summary()
    summary["execution"] = {k: v for k, v in result.execution.items() if k != "workers"}
    logger.info("teachers: mean accuracy %.4f, plurality vote %.4f on the evaluation split",
                summary["teacher_accuracy_mean"], summary["plurality_accuracy"])
    return summary


def votes(run: Run) -> dict:
    if mechanisms.get(run.config["aggregator"]["mechanism"]).samples_private_records:
        return _knn_embeddings(run)
    from pate.votes import votes_from_predictions

    public = load_npz(run.path(R.TEACHER_PREDICTIONS), what="the teachers stage")["public"]
    counts = votes_from_predictions(public, num_classes=run.data.num_classes)
    atomic_save_npy(run.path(R.VOTES), counts)
    return {"queries": int(counts.shape[0]), "classes": int(counts.shape[1]),
            "teachers": int(counts[0].sum())}


def _knn_embeddings(run: Run) -> dict:
    """The votes stage of a run whose mechanism reads the private records (Private-kNN, noisy
    class means): embeddings of the public and private splits for its neighbour search or class
    means, fitted on PUBLIC data only (the ``[knn] features`` front-end, standardised
    with public statistics, then a PCA of the public rows), so the embedding itself reveals
    nothing about the private records. Writes ``knn_embeddings.npz``; no histogram is drawn."""
    from pate.teachers.features import PublicFrontEnd

    data = run.data
    features, dims, width = _knn_features(run)
    front_end = {}  # the front-end's seconds and feature-cache lookups (not for a student's)
    if features == "student":
        # the earlier round's released student: square roots of its class probabilities
        # (Euclidean distance between them is the Hellinger distance)
        from pate.student.train import Student

        # checked again (the directory may have changed since preflight); the last run of the
        # chain is the one whose student embeds
        path = pathlib.Path(knn_prior(run)["runs"][-1]["run_dir"])
        model = Student.load(path / R.STUDENT_WEIGHTS)
        public, private = (np.sqrt(model.predict_proba(x)).astype(np.float32)
                           for x in (data.public.x, data.private.x))
    else:
        cache, t0 = _feature_cache(run), time.perf_counter()
        front, public = PublicFrontEnd.fit_transform(data.public.x, features=features, dims=dims,
                                                     cache=cache)
        private = front.embed(data.private.x, cache=cache)
        front_end = {"front_end_seconds": round(time.perf_counter() - t0, 2),
                     "feature_cache": None if cache is None else cache.summary()}
    labels = np.asarray(data.private.y, dtype=np.int64)
    atomic_savez(run.path(R.KNN_EMBEDDINGS), public=public, private=private,
                 private_labels=labels, num_classes=np.int64(data.num_classes))
    logger.info("votes: public-fitted embeddings (%s features -> %d dims) of %d public and %d "
                "private items", features, dims, len(public), len(private))
    return {"queries": int(public.shape[0]), "classes": int(data.num_classes),
            "private_records": int(private.shape[0]), "features": features, "dims": int(dims),
            "feature_count": width, "embedding": R.KNN_EMBEDDINGS,
            **front_end}


# -- aggregate: answers are drawn inside a ledger reservation and charged before they are written

def _max_fitting(ledger, dataset: str, *, orders, worst, limit: int, run_id: str):
    """The largest n <= limit whose worst case (n x ``worst``) the ledger can reserve now, and
    that reservation (None, 0 when not even one query fits). Tries ``limit`` first, then a
    binary search of reservation attempts (each one checked by the ledger itself, linked
    datasets and concurrent runs included)."""
    def attempt(n):
        try:
            return ledger.reserve(dataset, orders=orders, rdp=n * worst, run_id=run_id)
        except BudgetExceededError:
            return None

    reservation = attempt(limit)
    if reservation is not None:
        return reservation, limit
    lo, hi = 0, limit - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        trial = attempt(mid)
        if trial is None:
            hi = mid - 1
        else:
            trial.release()
            lo = mid
    if lo == 0:
        return None, 0
    reservation = attempt(lo)
    return (reservation, lo) if reservation is not None else (None, 0)


#: Version of the pending file's ``state`` (the earlier two-file layout had none).
PENDING_FORMAT = 2


def _pending_write(run: Run, labels, answered, summary, rounds, scores=None) -> None:
    """The answers drawn so far, in ONE file written atomically (temp file, fsync, rename, fsync
    of the directory: :func:`pate.io.atomic_savez`): the arrays, and in the ``state`` member
    (UTF-8 JSON, as uint8 bytes) the summary to publish and ``rounds``, one entry per ledger
    round -- ``{"keys": [reservation ids], "events": [event dicts]}`` --, written BEFORE the round's
    reservation is committed. The ledger records each committed event with its reservation id,
    so a resume knows exactly which rounds were charged (:func:`_finish_pending`): no count, no
    second file that could be older or newer than the first."""
    state = {"format": PENDING_FORMAT, "run_id": summary["run_id"], "summary": summary,
             "rounds": rounds}
    atomic_savez(run.path(R.PENDING), labels=labels, answered=answered,
                 state=np.frombuffer(json.dumps(state, sort_keys=True).encode(), dtype=np.uint8),
                 **({} if scores is None else {"scores": scores}))


def _pending_read(run: Run, run_id: str) -> tuple[dict, dict]:
    """(arrays, state) of the pending file; an interrupted run of an earlier version (two files,
    ``aggregate.pending.npz`` + ``aggregate.pending.json``, charged by counting) is refused: what
    it published could not be checked against the ledger."""
    legacy = run.path(R.PENDING_SUMMARY).exists()
    arrays = {} if legacy else load_npz(run.path(R.PENDING), what="an interrupted aggregate stage")
    if legacy or "state" not in arrays:
        raise ConfigError(
            f"{run.run_dir} holds the answers of an aggregate stage interrupted under an earlier "
            f"version of pate-learn ({R.PENDING} + {R.PENDING_SUMMARY}), whose charge this "
            "version cannot check against the ledger: they are not published. Delete both files "
            "to discard them (never released; what the ledger charged for them stays spent), "
            "then run the aggregate stage again")
    try:
        state = json.loads(arrays.pop("state").astype(np.uint8).tobytes().decode())
        ok = (isinstance(state, dict) and state.get("format") == PENDING_FORMAT
              and isinstance(state.get("summary"), dict) and isinstance(state.get("rounds"), list)
              and all(isinstance(r, dict) and isinstance(r.get("keys"), list)
                      and isinstance(r.get("events"), list) for r in state["rounds"]))
    except (ValueError, TypeError):  # not UTF-8, not JSON, not bytes
        ok = False
    if not ok or not {"labels", "answered"} <= set(arrays):
        raise CorruptFileError(f"{run.path(R.PENDING)} is not a pending file of this version of "
                               "pate-learn (modified or damaged); its answers are not published. "
                               "Delete it to discard them, then run the aggregate stage again",
                               path=run.path(R.PENDING))
    if state.get("run_id") != run_id:
        raise ConfigError(f"{run.path(R.PENDING)} holds the answers of run {state.get('run_id')}, "
                          f"not of this run ({run_id}); they are not published. Delete it, then "
                          "run the aggregate stage again")
    return arrays, state


def _publish(run: Run, labels, answered, summary, scores=None) -> None:
    """Write the charged answers (and the labelling rule's class ``scores``, where the mechanism
    gives them) where the later stages read them, then drop the pending copy."""
    if scores is None:
        run.path(R.LABEL_SCORES).unlink(missing_ok=True)   # never a stale earlier aggregate's
    else:
        atomic_save_npy(run.path(R.LABEL_SCORES), scores)
    atomic_save_npy(run.path(R.LABELS), labels)
    atomic_save_npy(run.path(R.ANSWERED), answered)
    atomic_write_json(run.path(R.AGGREGATE), summary)
    run.path(R.PENDING).unlink(missing_ok=True)


def _aggregate_info(summary: dict) -> dict:
    return {"asked": summary["queries_asked"], "answered": summary["queries_answered"],
            "stop_reason": summary.get("stop_reason")}


@dataclasses.dataclass
class _Progress:
    """How far an aggregate stage's ledger rounds have come (its summaries read it)."""

    asked: int = 0
    reserved: int = 0
    rounds: int = 0
    stop_reason: str | None = None
    #: the pending file's rounds: ``{"keys": [reservation id], "events": [event dict]}``
    charges: list = dataclasses.field(default_factory=list)


def _ask_in_rounds(run: Run, ledger, dataset: str | None, run_id: str, *, orders, worst,
                   limit: int, first, ask, labels, answered, summary, progress: _Progress) -> None:
    """The charge-before-publish loop, the same for every mechanism.

    Asks up to ``limit`` queries in rounds. A round takes its ledger reservation -- ``first``
    (reserved before any noise existed), then the most queries whose worst case (``worst``
    each) fits now (:func:`_max_fitting`) -- and only inside it calls ``ask(start, n)``, which
    draws the answers of queries ``start .. start + n - 1`` into ``labels``/``answered`` and
    returns ``(queries asked, the round's event, stop reason)`` (it may ask fewer than ``n``);
    the answers then go to the pending file with ``summary()`` and the round's reservation id
    (``progress.charges``), and only then is the event committed (always within the
    reservation). Without a ledger: one round of ``limit`` queries. Stops at
    ``limit``, when ``ask`` stops, or when the ledger has no room for one more query."""
    while progress.asked < limit:
        reservation, n = None, limit - progress.asked
        if first[0] is not None:
            (reservation, n), first = first, (None, 0)
        elif ledger is not None:
            reservation, n = _max_fitting(ledger, dataset, orders=orders, worst=worst, limit=n,
                                          run_id=run_id)
            if reservation is None:
                progress.stop_reason = (
                    f"privacy budget: the ledger's remaining budget does not cover one more "
                    f"query after {progress.asked} asked")
                return
        if reservation is not None:
            progress.reserved += n
        with (reservation if reservation is not None else contextlib.nullcontext()):
            k, event, progress.stop_reason = ask(progress.asked, n)
            progress.asked += k
            progress.rounds += 1
            if reservation is not None:
                progress.charges.append({"keys": [reservation.id], "events": [event.to_dict()]})
                _pending_write(run, labels, answered, summary(), progress.charges)
                reservation.commit([event])
        if progress.stop_reason is not None or k < n:
            return


def _charged_keys(ledger, dataset: str, run_id: str) -> set[str]:
    """The reservation ids under which the ledger holds committed events of ``run_id``."""
    return {e.reservation for e in ledger.events(dataset, run_id=run_id) if e.reservation}


def _charge_round(run: Run, ledger, dataset: str, run_id: str, entry: dict, rewrite) -> None:
    """Charge one pending round that the ledger does not hold (its reservation was never
    committed): reserve its events' data-independent cost, add the new reservation id to the
    round's keys in the pending file (``rewrite()``), then commit. A crash anywhere leaves the
    round either uncharged (charged by the next resume) or charged under a key the pending file
    names: never charged twice, never published uncharged."""
    from pate.analysis import PrivacyEvent

    events = [PrivacyEvent.from_dict(e) for e in entry["events"]]
    if not events:
        return
    orders = events[0].orders
    worst = sum((np.asarray(e.rdp_data_independent, dtype=float) for e in events),
                np.zeros(orders.size))
    with ledger.reserve(dataset, orders=orders, rdp=worst, run_id=run_id) as reservation:
        entry["keys"].append(reservation.id)
        rewrite()
        reservation.commit(events)


def _finish_pending(run: Run, ledger, dataset: str | None, run_id: str) -> dict:
    """Resume after a crash between drawing and publishing: charge the rounds whose charge the
    ledger does not hold, then publish -- or, if they no longer fit, discard the answers (never
    released).

    Which rounds were charged is read from the ledger by key, never by counting: each round of
    the pending file names the reservation id(s) it was (or is being) committed under, and the
    ledger stores that id with every committed event. Events of another run, or of another copy
    of this run directory, carry other reservation ids and are never taken for this one's."""
    from pate.analysis import PrivacyEvent

    arrays, state = _pending_read(run, run_id)
    labels, answered = arrays["labels"], arrays["answered"]
    scores = arrays.get("scores")
    summary, rounds = state["summary"], state["rounds"]
    if ledger is None:
        raise ConfigError(f"{run.path(R.PENDING)} holds answers drawn inside ledger reservations, "
                          "but this run has no ledger; they are not published. Delete it, then "
                          "run the aggregate stage again")

    def rewrite():
        _pending_write(run, labels, answered, summary, rounds, scores)

    charged = _charged_keys(ledger, dataset, run_id)
    for entry in rounds:
        if charged.isdisjoint(entry["keys"]):
            try:
                _charge_round(run, ledger, dataset, run_id, entry, rewrite)
            except BudgetExceededError as exc:
                run.path(R.PENDING).unlink(missing_ok=True)
                raise BudgetExceededError(
                    f"the answers drawn before the interruption can no longer be charged ({exc}); "
                    "they were discarded, never released. Start a new run directory") from None
    if summary["release_plan"]["release"] and summary["release"] is None:
        # the interruption came before the planned release was drawn: draw it now inside a
        # reservation, keep it in the pending file with that reservation's id, commit, and only
        # then publish it (or, if it no longer fits, report the data-independent eps)
        config, asked = run.config, int(summary["queries_asked"])
        votes_all = load_npy(run.path(R.VOTES), what="the votes stage")
        orders = C.orders(config)
        plan = release_plan(config, num_teachers=int(votes_all[0].sum()),
                            num_classes=int(votes_all.shape[1]), orders=orders)
        event = PrivacyEvent("gnss-release", plan["params"], orders, plan["rdp"], plan["rdp"],
                             queries=0, answered=0)
        try:
            reservation = ledger.reserve(dataset, orders=orders, rdp=plan["rdp"], run_id=run_id)
        except BudgetExceededError:
            summary["release_plan"] = dict(summary["release_plan"], release=False, fallback=(
                "the run was interrupted before its sanitized release and the ledger no longer "
                "covers it; the data-independent epsilon is reported"))
        else:
            with reservation:
                summary["release"] = _release(config, votes_all[:asked], answered[:asked],
                                              run.noise_streams().release)
                summary["events"].append(event.to_dict())
                rounds.append({"keys": [reservation.id], "events": [event.to_dict()]})
                rewrite()
                reservation.commit([event])
    _publish(run, labels, answered, summary, scores)
    return _aggregate_info(summary)


def aggregate(run: Run) -> dict:
    """Noisy labels within the budget; nothing reaches ``labels.npy`` before it is charged.

    With a ledger, the queries are asked in rounds: each round reserves (in the ledger, against
    the budget of the dataset and of every dataset sharing records with it, concurrent runs
    included) the worst case of as many queries as fit, asks them, writes the answers to the
    pending file, and commits their realised cost (always within the reservation). The
    sanitized release's cost is reserved up front and committed when it is drawn. Only after
    the last commit are ``labels.npy``/``answered.npy``/``aggregate.json`` written; a crash in
    between leaves the pending file, which ``--resume`` charges and publishes (or discards).
    """
    from pate.aggregators import OnlineAggregator
    from pate.analysis import PrivacyEvent

    config = run.config
    agg, priv = config["aggregator"], config["privacy"]
    spec = mechanisms.get(agg["mechanism"])
    params = C.aggregator_params(config)
    run_id = run.run_id + ":aggregate"
    run.check_not_a_copy()  # a copied run directory never draws or charges under this run id
    ledger = run.ledger()
    release_reservation, first = None, (None, 0)
    try:
        dataset = authorize(run, ledger) if ledger is not None else None
        if run.path(R.AGGREGATE).exists():  # published: charged before it was written
            run.path(R.PENDING).unlink(missing_ok=True)  # a crash before _publish removed it
            return _aggregate_info(R.read_summary(run.path(R.AGGREGATE), R.AGGREGATE_KEYS))
        if run.path(R.PENDING).exists() or run.path(R.PENDING_SUMMARY).exists():
            return _finish_pending(run, ledger, dataset, run_id)
        if spec.samples_private_records:
            records = _aggregate_once if spec.releases_once else _aggregate_knn
            return records(run, spec, ledger, dataset, run_id)

        votes_all = load_npy(run.path(R.VOTES), what="the votes stage")
        num_queries = votes_all.shape[0]
        queries = min(agg.get("queries", num_queries), num_queries)
        orders = C.orders(config)
        budget_eps, delta = priv["budget_eps"], priv["delta"]
        num_teachers, num_classes = int(votes_all[0].sum()), int(votes_all.shape[1])
        # The sanitized release is planned before any noise is drawn (its parameters are in the
        # config, its cost is data-independent): the answers leave room for it.
        plan = release_plan(config, num_teachers=num_teachers, num_classes=num_classes,
                            orders=orders)
        if plan["release"]:
            from pate import analysis

            release_eps = float(analysis.eps_from_rdp(plan["rdp"], orders=orders, delta=delta,
                                                      conversion=priv["conversion"])[0])
            if release_eps > budget_eps / 2:  # public quantities only: no data looked at
                plan = dict(plan, release=False, fallback=(
                    f"the release alone would cost eps={release_eps:.4g}, more than half of the "
                    f"budget ({budget_eps:g}); it was skipped (raise release_sigma_ss or the "
                    "budget to release a sanitized epsilon)"))
        release_rdp = plan["rdp"] if plan["release"] else np.zeros(orders.size)
        worst = spec.worst_case_query_rdp(params, orders=orders)

        if ledger is not None and plan["release"]:
            try:
                release_reservation = ledger.reserve(dataset, orders=orders, rdp=release_rdp,
                                                     run_id=run_id)
            except BudgetExceededError:
                plan = dict(plan, release=False, fallback=(
                    "the ledger's remaining budget does not cover the sanitized release; it was "
                    "skipped and the data-independent epsilon is reported"))
                release_rdp = np.zeros(orders.size)
        prior = release_rdp.copy()
        if ledger is not None:
            # the first round's reservation, reserved before any noise exists: its prior (what
            # others spent or reserved, the planned release included) starts the aggregator
            first = _max_fitting(ledger, dataset, orders=orders, worst=worst, limit=queries,
                                 run_id=run_id)
            if first[0] is None and release_reservation is not None:
                # answers before the release: without room for one query, the release goes
                release_reservation.release()
                release_reservation = None
                plan = dict(plan, release=False, fallback=(
                    "the ledger's remaining budget does not cover the sanitized release and one "
                    "query; the release was skipped and the data-independent epsilon is reported"))
                release_rdp = np.zeros(orders.size)
                first = _max_fitting(ledger, dataset, orders=orders, worst=worst, limit=queries,
                                     run_id=run_id)
            if first[0] is None:
                summary = ledger.summary(dataset)
                raise BudgetExceededError(
                    f"the ledger {ledger.path} has no room for even one query of {spec.title} "
                    f"on this dataset ({dataset[:16]}...: spent and reserved eps="
                    f"{summary['spent_and_reserved']:.6g} of {summary['budget']['eps']:g}); "
                    "nothing was drawn or charged. Use more noise, or "
                    + _raise_hint(run, ledger, dataset, queries * worst),
                    remaining=summary["remaining"])
            prior = first[0].prior_rdp(orders)
        noise = run.noise_streams()
        aggregator = OnlineAggregator(
            spec.name, budget_eps=budget_eps, delta=delta, rng=noise.noise, orders=orders,
            budget_basis=agg["budget_basis"].replace("-", "_"), conversion=priv["conversion"],
            prior_rdp=prior, **params)

        labels = np.full(num_queries, -1, dtype=np.int64)
        answered = np.zeros(num_queries, dtype=bool)
        progress = _Progress()

        def summary_now(events=None, release=None):
            from pate import analysis

            events = list(aggregator.accountant.events) if events is None else events
            s = aggregator.summary()
            # this run's answers alone (the aggregator's own totals include the prior: other
            # runs' spend and the planned release)
            for dd, key in ((False, "eps_data_independent"), (True, "eps_data_dependent")):
                eps, order = analysis.eps_from_rdp(
                    aggregator.accountant.rdp(data_dependent=dd), orders=orders, delta=delta,
                    conversion=priv["conversion"])
                s[key] = float(eps)
                s["order_" + key[4:]] = float(order)
            return dict(
                s, run_id=run_id, dataset=dataset, ledger=None if ledger is None else str(ledger.path),
                events=[e.to_dict() for e in events], queries_offered=int(queries),
                release=release, release_plan={k: v for k, v in plan.items() if k != "rdp"},
                noise_seeded=C.noise_seeded(config), reserved_queries=int(progress.reserved),
                stop_reason=progress.stop_reason, rounds=progress.rounds)

        def ask(start, n):
            # the aggregator stops by itself on the config's budget (prior included)
            result = aggregator.answer(votes_all[start:start + n], on_exhausted="stop")
            k = result.num_asked
            labels[start:start + k] = result.labels[:k]
            answered[start:start + k] = result.answered_mask[:k]
            return k, result.event, result.stop_reason

        _ask_in_rounds(run, ledger, dataset, run_id, orders=orders, worst=worst, limit=queries,
                       first=first, ask=ask, labels=labels, answered=answered,
                       summary=summary_now, progress=progress)
        asked, stop_reason = progress.asked, progress.stop_reason
        if asked == 0 and queries > 0:
            raise BudgetExceededError(
                f"no query could be asked ({stop_reason}); nothing was released or charged. Use "
                "more noise, or " + (_raise_hint(run, ledger, dataset, queries * worst)
                                     if ledger is not None else
                                     f"raise {C.setting('privacy', 'budget_eps', source=_caller(run))}"),
                remaining=aggregator.remaining_eps)
        events = list(aggregator.accountant.events)
        release = None
        if plan["release"]:
            release = _release(config, votes_all[:asked], answered[:asked], noise.release)
            events.append(PrivacyEvent("gnss-release", plan["params"], orders, plan["rdp"],
                                       plan["rdp"], queries=0, answered=0))
            if release_reservation is not None:
                progress.charges.append({"keys": [release_reservation.id],
                                         "events": [events[-1].to_dict()]})
                _pending_write(run, labels, answered, summary_now(events, release),
                               progress.charges)
                release_reservation.commit([events[-1]])
        summary = summary_now(events, release)
        _publish(run, labels, answered, summary)
        return _aggregate_info(summary)
    finally:
        for unused in (release_reservation, first[0]):
            if unused is not None and not unused.closed:
                unused.release()  # nothing was drawn for it
        if ledger is not None:
            ledger.close()


def _records_inputs(run: Run, spec) -> tuple:
    """What the aggregate stage of a mechanism that reads the private records starts from:
    (params, public, private, private_labels, num_classes, num_queries, queries, orders,
    budget_eps, delta, conversion, plan, prior, prior_rdp) -- the validated parameters, the
    votes stage's embeddings, how many queries are offered, the privacy settings, the (no)
    release plan, and an earlier round whose student embeds this run (:func:`knn_prior`): its
    cost counts against the config's budget."""
    config = run.config
    priv = config["privacy"]
    params = spec.validate(C.aggregator_params(config), prefix="[aggregator] ")
    emb = load_npz(run.path(R.KNN_EMBEDDINGS), what="the votes stage")
    public, private = emb["public"], emb["private"]
    num_classes, num_queries = int(emb["num_classes"]), public.shape[0]
    orders = C.orders(config)
    plan = release_plan(config, num_teachers=max(1, spec.voters(
        params, private_records=int(private.shape[0]))), num_classes=num_classes, orders=orders)
    prior = knn_prior(run)
    prior_rdp = np.zeros(orders.size) if prior is None else np.asarray(prior["rdp"], dtype=float)
    return (params, public, private, emb["private_labels"], num_classes, num_queries,
            min(config["aggregator"].get("queries", num_queries), num_queries), orders,
            priv["budget_eps"], priv["delta"], priv["conversion"], plan, prior, prior_rdp)


def _records_summary(spec, params, events, *, config, orders, delta, conversion, budget_eps,
                     asked, answered, offered, stop_reason, run_id, dataset, ledger, plan,
                     reserved, rounds, prior, **mechanism_part) -> dict:
    """``aggregate.json`` of a mechanism that reads the private records: the realised cost of
    ``events`` is the data-independent one (there is no data-dependent bound), no sanitized
    release; ``prior`` the earlier rounds this run's embedding depends on (their cost is in the
    guarantee); ``mechanism_part`` the mechanism's own entry (e.g. ``knn={...}``)."""
    from pate import analysis

    rdp = sum((e.rdp_data_independent for e in events), np.zeros(orders.size))
    eps, order = analysis.eps_from_rdp(rdp, orders=orders, delta=delta, conversion=conversion)
    return {
        "mechanism": spec.name, "params": dict(params), "budget_eps": budget_eps,
        "delta": delta, "budget_basis": config["aggregator"]["budget_basis"].replace("-", "_"),
        "conversion": conversion, "queries_asked": int(asked), "queries_answered": int(answered),
        "eps_data_independent": float(eps), "order_data_independent": float(order),
        "eps_data_dependent": float(eps), "order_data_dependent": float(order),
        "prior_included": False, "stop_reason": stop_reason, "run_id": run_id,
        "dataset": dataset, "ledger": None if ledger is None else str(ledger.path),
        "events": [e.to_dict() for e in events], "queries_offered": int(offered),
        "release": None, "release_plan": {k: v for k, v in plan.items() if k != "rdp"},
        "noise_seeded": C.noise_seeded(config), "reserved_queries": int(reserved),
        "rounds": rounds, **mechanism_part, "prior": prior}


def _aggregate_knn(run: Run, spec, ledger, dataset: str | None, run_id: str) -> dict:
    """The aggregate stage of a mechanism that samples the private records (Private-kNN).

    Same protocol as :func:`aggregate`: each round first reserves in the ledger the worst case
    of as many queries as fit; only then are the round's kNN histograms drawn
    (:func:`pate.knn.knn_votes`: a fresh Poisson sample of the private records per query) and
    the noisy answers (``spec.draw``), both from the run's noise stream; the answers go to the
    pending file and the round's event is committed. Every asked query costs the same
    data-independent RDP, so how many fit is decided from public quantities only. Without a
    ledger the config's budget decides it. The histograms are never saved; nothing is released
    beyond the answers (no smooth-sensitivity release)."""
    from pate import analysis
    from pate.knn import knn_votes

    config = run.config
    (params, public, private, private_labels, num_classes, num_queries, queries, orders,
     budget_eps, delta, conversion, plan, prior, prior_rdp) = _records_inputs(run, spec)
    worst = spec.worst_case_query_rdp(params, orders=orders)

    def eps_of(rdp):
        return float(analysis.eps_from_rdp(rdp, orders=orders, delta=delta,
                                           conversion=conversion)[0])

    labels = np.full(num_queries, -1, dtype=np.int64)
    answered = np.zeros(num_queries, dtype=bool)
    events: list = []
    progress = _Progress()

    def summary_now():
        rdp = sum((e.rdp_data_independent for e in events), np.zeros(orders.size))
        eps, order = analysis.eps_from_rdp(rdp, orders=orders, delta=delta, conversion=conversion)
        return _records_summary(
            spec, params, events, config=config, orders=orders, delta=delta,
            conversion=conversion, budget_eps=budget_eps, asked=progress.asked,
            answered=int(answered[:progress.asked].sum()), offered=queries,
            stop_reason=progress.stop_reason, run_id=run_id, dataset=dataset, ledger=ledger,
            plan=plan, reserved=progress.reserved, rounds=progress.rounds, prior=prior,
            knn={"histograms": "drawn per round after its reservation; never saved",
                 "private_records": int(private.shape[0])})

    # How many queries the config's budget allows (the ledger checks its own, linked datasets
    # and concurrent runs included): earlier rounds + n x the per-query cost, public quantities.
    lo, hi = 0, queries
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if eps_of(prior_rdp + mid * worst) <= budget_eps else (lo, mid - 1)
    allowed = lo
    first = (None, 0)
    try:
        if ledger is not None:
            first = _max_fitting(ledger, dataset, orders=orders, worst=worst,
                                 limit=max(1, allowed), run_id=run_id)
        if allowed == 0 or (ledger is not None and first[0] is None):
            where = ("the config's budget" if allowed == 0 else
                     f"the ledger {ledger.path} (spent and reserved on this dataset: eps="
                     f"{ledger.summary(dataset)['spent_and_reserved']:.6g})")
            raise BudgetExceededError(
                f"{where} has no room for even one query of {spec.title} (eps={budget_eps:g} at "
                f"delta={delta:g}; one query costs eps={eps_of(worst):.6g}"
                + ("" if prior is None else f", the earlier rounds eps={eps_of(prior_rdp):.6g}")
                + "); nothing was drawn or "
                "charged. Use more noise, a lower sampling_rate, or "
                + (_raise_hint(run, ledger, dataset, max(1, queries) * worst)
                   if ledger is not None else
                   f"raise {C.setting('privacy', 'budget_eps', source=_caller(run))}"))
        noise = run.noise_streams().noise

        def ask(start, n):
            # Drawn only now, inside the round's reservation: the samples, the histograms, the
            # noise. Every query costs the same, so all n are asked.
            hist = knn_votes(public[start:start + n], private, private_labels, k=params["k"],
                             sampling_rate=params["sampling_rate"], num_classes=num_classes,
                             rng=noise)
            got, ok, _ = spec.draw(hist, params, noise)
            event = spec.event(hist, params, answered=ok, orders=orders)
            labels[start:start + n], answered[start:start + n] = got, ok
            events.append(event)
            return n, event, None

        _ask_in_rounds(run, ledger, dataset, run_id, orders=orders, worst=worst, limit=allowed,
                       first=first, ask=ask, labels=labels, answered=answered,
                       summary=summary_now, progress=progress)
        if progress.stop_reason is None and progress.asked < queries:
            progress.stop_reason = (
                f"privacy budget: budget_eps does not cover one more query after "
                f"{progress.asked} of {queries} (each costs the same data-independent RDP)")
        summary = summary_now()
        _publish(run, labels, answered, summary)
        return _aggregate_info(summary)
    finally:
        if first[0] is not None and not first[0].closed:
            first[0].release()  # nothing was drawn for it


def _aggregate_once(run: Run, spec, ledger, dataset: str | None, run_id: str) -> dict:
    """The aggregate stage of a mechanism whose one release labels every query (class-means).

    The same charge-before-publish protocol as :func:`aggregate`, in one round: the release's
    data-independent cost (public arithmetic: it depends on the noise only) is checked against
    the config's budget (earlier rounds included) and reserved in the ledger; only then are the
    private class sums computed and released with noise from the run's noise stream
    (``pate.class_means.noisy_class_means``), the queries labelled from the release (and the
    public rows: ``[knn] rule``, ``pate.class_means.labelling_rule``), the labels
    put in the pending file and the event committed. The release itself is never saved."""
    from pate import analysis
    from pate.class_means import LOGISTIC_RIDGE, labelling_rule, noisy_class_means

    config = run.config
    (params, public, private, private_labels, num_classes, num_queries, queries, orders,
     budget_eps, delta, conversion, plan, prior, prior_rdp) = _records_inputs(run, spec)
    event = spec.event(np.zeros((queries, num_classes)), params,
                       answered=np.ones(queries, dtype=bool), orders=orders)
    events = [event] if queries else []

    def eps_of(rdp):
        return float(analysis.eps_from_rdp(rdp, orders=orders, delta=delta,
                                           conversion=conversion)[0])

    labels = np.full(num_queries, -1, dtype=np.int64)
    answered = np.zeros(num_queries, dtype=bool)
    scores = np.full((num_queries, num_classes), np.nan)
    cost = eps_of(prior_rdp + event.rdp_data_independent)
    if queries and cost > budget_eps:
        raise BudgetExceededError(
            f"the config's budget (eps={budget_eps:g} at delta={delta:g}) does not cover the one "
            f"release of {spec.title} (eps={eps_of(event.rdp_data_independent):.6g}"
            + ("" if prior is None else f", with the earlier rounds eps={cost:.6g}")
            + "); nothing was drawn or charged. Use more noise (a larger sigma), or raise the "
            "budget")
    reservation = None
    if queries and ledger is not None:
        try:
            reservation = ledger.reserve(dataset, orders=orders, rdp=event.rdp_data_independent,
                                         run_id=run_id)
        except BudgetExceededError as exc:
            raise BudgetExceededError(
                f"{exc}; the one release of {spec.title} does not fit, nothing was drawn or "
                "charged. Use more noise, or "
                + _raise_hint(run, ledger, dataset, event.rdp_data_independent)) from None
    with (reservation if reservation is not None else contextlib.nullcontext()):
        geometry = None
        if queries:
            # Drawn only now, inside the reservation: the class sums and their noise.
            release = noisy_class_means(public, private, private_labels, sigma=params["sigma"],
                                        count_weight=params["count_weight"],
                                        num_classes=num_classes, rng=run.noise_streams().noise)
            # post-processing: the release and the public rows only
            rule = C.class_means_rule(config)
            scores[:queries] = labelling_rule(release, public, rule).scores(public[:queries])
            labels[:queries] = np.argmax(scores[:queries], axis=1)   # the rule's predict
            answered[:queries] = True
            geometry = {"clip_radius": release.geometry.radius,
                        "dims": int(public.shape[1]), "rule": rule,
                        **({"ridge": LOGISTIC_RIDGE} if rule == "logistic" else {})}
        summary = _records_summary(
            spec, params, events, config=config, orders=orders, delta=delta,
            conversion=conversion, budget_eps=budget_eps, asked=queries, answered=queries,
            offered=queries, stop_reason=None, run_id=run_id, dataset=dataset, ledger=ledger,
            plan=plan, reserved=queries, rounds=1 if queries else 0, prior=prior,
            records={"statistic": "the noisy class sums: drawn once after the reservation; "
                                  "never saved", "private_records": int(private.shape[0]),
                     **(geometry or {})})
        if reservation is not None:
            _pending_write(run, labels, answered, summary,
                           [{"keys": [reservation.id], "events": [e.to_dict() for e in events]}],
                           scores)
            reservation.commit(events)
    _publish(run, labels, answered, summary, scores)
    return _aggregate_info(summary)


def _release(config: dict, votes: np.ndarray, answered: np.ndarray, rng) -> dict:
    """The sanitized data-dependent RDP, drawn once with the config's fixed parameters."""
    from pate import analysis

    priv = config["privacy"]
    params = mechanisms.get(config["aggregator"]["mechanism"]).release_params(
        C.aggregator_params(config))
    return dict(analysis.release_sanitized_epsilon(
        votes, answered=answered, order=priv["release_order"], beta=priv["release_beta"],
        sigma_ss=priv["release_sigma_ss"], delta=priv["delta"], num_teachers=int(votes[0].sum()),
        rng=rng, conversion=priv["conversion"], **params))


def release_plan(config: dict, *, num_teachers: int, num_classes: int, orders) -> dict:
    """Whether this run will release a sanitized data-dependent epsilon, and its RDP cost.

    Decided from public quantities only (mechanism, noise, release parameters, number of teachers
    and classes): no release for a mechanism without a smooth-sensitivity analysis (LNMax), when
    the data-dependent bounds can never beat the data-independent ones at the release order, or
    when conditions C5/C6 fail. The cost curve is [P18] Theorem 23 at every order below
    1/(2 beta) and infinite above (only those orders can carry it).
    """
    from pate import analysis
    from pate.analysis.sensitivity import _is_data_independent_step1, _is_data_independent_step2

    agg, priv = config["aggregator"], config["privacy"]
    order, beta, sigma_ss = priv["release_order"], priv["release_beta"], priv["release_sigma_ss"]
    params = {"order": order, "beta": beta, "sigma_ss": sigma_ss}
    spec = mechanisms.get(agg["mechanism"])
    release = spec.release_params(C.aggregator_params(config))
    reason = None
    if not priv.get("release", True):
        reason = "[privacy] release = false: only the data-independent epsilon is reported"
    elif release is None:
        reason = (f"{spec.title} has no smooth-sensitivity analysis; the data-independent epsilon "
                  "is reported")
    else:
        ind1 = (release["threshold"] is None or _is_data_independent_step1(
            num_teachers, release["threshold"], release["sigma1"], order))
        if ind1 and _is_data_independent_step2(num_teachers, num_classes, release["sigma2"], order):
            reason = "the data-dependent bounds never beat the data-independent ones at this order"
        elif not all(analysis.check_conditions(sigma=release["sigma2"], num_classes=num_classes,
                                               order=order)):
            reason = "conditions C5/C6 do not hold at this order and sigma2"
    rdp = analysis.gnss_rdp_curve(beta=beta, sigma_ss=sigma_ss, orders=orders)
    return {"release": reason is None, "fallback": reason, "params": params, "rdp": rdp}


def student(run: Run) -> dict:
    import time

    from pate.student.augment import FLIP_DATASETS
    from pate.student.evaluate import evaluation_metrics
    from pate.student.train import Student

    data = run.data
    settings = C.student_settings(run.config)
    settings.setdefault("flip", run.config["data"]["name"] in FLIP_DATASETS)
    labels = load_npy(run.path(R.LABELS), what="the aggregate stage")
    if labels.ndim != 1 or labels.shape[0] != len(data.public):
        raise ConfigError(f"{run.path(R.LABELS)} holds {labels.shape} labels for "
                          f"{len(data.public)} public items; start a new run directory")
    temperature = C.student_targets(run.config)
    model = run.python_object("student_model", settings.get("model", "auto"))
    if _is_estimator(model):
        if temperature is not None:
            raise ConfigError("[student] targets = \"soft\" trains the torch student; a "
                              "scikit-learn student takes hard labels: set targets = \"hard\"")
        return _sklearn_student(run, model, labels)
    soft_targets = None if temperature is None else _soft_targets(run, labels, temperature)
    settings["model"] = model
    model = Student(**settings, num_classes=data.num_classes, random_state=run.streams().student,
                    progress=run.progress, checkpoint_dir=run.path(R.STUDENT_CHECKPOINTS),
                    resume=True)
    if not isinstance(settings["model"], str):
        run.objects["fitted_student"] = model
    # built before the training, so that a run it cannot serve fails before any work
    head = _rule_head(run, labels) if C.combine_with_rule(run.config) else None
    run.path(R.STUDENT_CHECKPOINTS).mkdir(exist_ok=True)
    # Only the public inputs and the released labels reach the student.
    t0 = time.perf_counter()
    model.fit(data.public.x, labels, soft_targets=soft_targets)
    seconds = time.perf_counter() - t0
    alone = None
    if head is not None:
        alone = float(np.mean(model.predict(data.evaluation.x) == np.asarray(data.evaluation.y)))
        model.combine_with_rule(head, temperature=temperature)
    model.save(run.path(R.STUDENT_WEIGHTS))
    metrics = evaluation_metrics(data.evaluation.y, model.predict(data.evaluation.x),
                                 num_classes=data.num_classes)
    if alone is not None:
        metrics.update(combined_with_rule=True, student_alone_accuracy=alone)
    metrics.update(method=model.settings_["method"], model=model.model_name_,
                   num_labelled=int(np.sum(labels >= 0)), num_public=int(labels.shape[0]),
                   settings=model.settings_, train_seconds=round(seconds, 2),
                   targets="hard" if temperature is None else "soft",
                   **({} if temperature is None else {"temperature": temperature}))
    atomic_write_json(run.path(R.STUDENT_METRICS), metrics)
    logger.info("student: accuracy %.4f on the evaluation split", metrics["accuracy"])
    return {"accuracy": metrics["accuracy"]}


def _rule_head(run: Run, labels: np.ndarray):
    """The labelling rule of this class-means run as a torch head (``[student]
    combine_with_rule``; :mod:`pate.student.rule_product`): its public front-end refitted on the
    public split (checked against ``knn_embeddings.npz``), the rule recovered exactly from the
    published ``label_scores.npy`` (``pate.class_means.recover_rule``), and the head checked to
    reproduce those scores. Reads public data and published files only: post-processing."""
    import torch

    from pate.class_means import recover_rule
    from pate.student.rule_product import RuleHead
    from pate.teachers.features import PublicFrontEnd

    data = run.data
    features, dims, _ = _knn_features(run)
    public_x = np.asarray(data.public.x, dtype=np.float32)
    front, public = PublicFrontEnd.fit_transform(public_x, features=features, dims=dims,
                                                 cache=_feature_cache(run))
    with np.load(run.path(R.KNN_EMBEDDINGS), allow_pickle=False) as saved:
        saved_public = saved["public"]
    if saved_public.shape != public.shape or not np.allclose(saved_public, public, atol=1e-4):
        raise ConfigError(f"the public embeddings in {run.path(R.KNN_EMBEDDINGS)} are not those of "
                          f"this run's [knn] front-end refitted now ({features}, {dims} dims); "
                          "start a new run directory")
    scores = load_npy(run.path(R.LABEL_SCORES), what="the aggregate stage")
    answered = labels >= 0
    try:
        recovered = recover_rule(public, np.where(answered[:, None], scores, np.nan),
                                 rule=C.class_means_rule(run.config))
    except ValueError as exc:
        raise ConfigError(f"[student] combine_with_rule = true: the labelling rule cannot be "
                          f"recovered from {run.path(R.LABEL_SCORES)} ({exc}); set "
                          "combine_with_rule = false") from None
    head = RuleHead.from_fitted(input_shape=data.input_shape, front=front, recovered=recovered,
                                num_classes=data.num_classes)
    # the torch head against the published scores on (up to) 1000 labelled items: enough to
    # catch a mismatch, without scattering the whole public split a second time
    rows = np.flatnonzero(answered)[:1000]
    with torch.no_grad():
        check = head(torch.from_numpy(public_x[rows])).numpy()
    gap = float(np.abs(check - scores[rows]).max())
    if gap > 1e-3 * max(float(np.abs(scores[rows]).max()), 1.0):
        raise RuntimeError(f"the rule head reproduces the published class scores only to {gap:.3g}; "
                           "this is a bug in pate-learn, please report it")
    logger.info("student: its labelling rule, to be released with it (%s, %s front-end, %d dims; "
                "published scores reproduced to %.2g)", recovered.rule, features, dims, gap)
    return head


def _soft_targets(run: Run, labels: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(temperature * scores) of the labelling rule's published class scores on the
    answered items (zeros elsewhere): the student's soft targets (``[student] targets``)."""
    from scipy.special import softmax

    path = run.path(R.LABEL_SCORES)
    if not path.exists():
        raise ConfigError(f"[student] targets = \"soft\" needs the class scores {path}, which "
                          f"this run's aggregate stage did not write (mechanism "
                          f"{run.config['aggregator']['mechanism']!r}); set targets = \"hard\"")
    scores = load_npy(path, what="the aggregate stage")
    if scores.shape != (labels.shape[0], run.data.num_classes):
        raise ConfigError(f"{path} holds {scores.shape} scores for {labels.shape[0]} public "
                          f"items and {run.data.num_classes} classes; start a new run directory")
    answered = labels >= 0
    targets = np.zeros(scores.shape)
    targets[answered] = softmax(temperature * scores[answered], axis=1)
    return targets


def _sklearn_student(run: Run, estimator, labels: np.ndarray) -> dict:
    """A scikit-learn student (given from Python): fitted on the answered public items only
    (flattened inputs), evaluated like the torch student. It is returned to the caller in
    memory and never saved (no pickles in run directories): ``student.pt`` is not written."""
    import time

    from sklearn.base import clone

    from pate.student.evaluate import evaluation_metrics

    data = run.data
    answered = labels >= 0
    if len(np.unique(labels[answered])) < 2:
        raise BudgetExceededError(f"the scikit-learn student needs labels of at least two classes; "
                                  f"the aggregator answered {int(answered.sum())} queries")
    model = clone(estimator)
    t0 = time.perf_counter()
    model.fit(data.public.x[answered].reshape(int(answered.sum()), -1), labels[answered])
    seconds = time.perf_counter() - t0
    predictions = model.predict(data.evaluation.x.reshape(len(data.evaluation), -1))
    metrics = evaluation_metrics(data.evaluation.y, np.asarray(predictions, dtype=np.int64),
                                 num_classes=data.num_classes)
    metrics.update(method="supervised (scikit-learn, answered items only)",
                   model=run.config["student"].get("model", "python"),
                   num_labelled=int(answered.sum()), num_public=int(labels.shape[0]),
                   settings={"estimator": repr(estimator)}, train_seconds=round(seconds, 2))
    atomic_write_json(run.path(R.STUDENT_METRICS), metrics)
    run.objects["fitted_student"] = model
    return {"accuracy": metrics["accuracy"]}


def analysis_stage(run: Run) -> dict:
    from pate.run_analysis import build_analysis

    doc = build_analysis(run)
    atomic_write_json(run.path(R.ANALYSIS), doc)
    p = doc["privacy"]
    if mechanisms.get(p["mechanism"]).samples_private_records:
        logger.info("analysis: eps data-independent %.4f at delta %g (a cost that does not "
                    "depend on the data; no data-dependent analysis, no sanitized release)",
                    p["eps_data_independent"], p["delta"])
    else:
        logger.info("analysis: eps data-independent %.4f, sanitized %.4f, data-dependent (not "
                    "private) %.4f at delta %g", p["eps_data_independent"], p["eps_sanitized"],
                    p["eps_data_dependent"], p["delta"])
    return {k: p[k] for k in ("eps_data_independent", "eps_sanitized", "eps_guarantee")}


def report(run: Run) -> dict:
    from pate.report import write_report

    doc = write_report(run.run_dir)
    return {"files": ["report.json", "report.md", "report.html", *doc["plots"].values()]}


STAGE_FUNCTIONS: dict[str, Callable[[Run], dict]] = {
    "partition": partition, "teachers": teachers, "votes": votes, "aggregate": aggregate,
    "student": student, "analysis": analysis_stage, "report": report}


def _check_fork_target(source: pathlib.Path, target: pathlib.Path) -> None:
    """Refuse a fork target that would overwrite or delete anything: the source itself, a folder
    inside the source, a folder the source lies in, or a path that exists and is not an empty
    folder. Checked before anything is written; fork never deletes what it did not create."""
    src, dst = source.resolve(), target.resolve()
    if dst == src:
        raise ConfigError(f"fork_run: the new run directory is the source itself ({source}); "
                          "pick a new directory for the forked run")
    if dst.is_relative_to(src):
        raise ConfigError(f"fork_run: the new run directory {target} lies inside the source run "
                          f"{source}; pick a new directory outside it")
    if src.is_relative_to(dst):
        raise ConfigError(f"fork_run: the new run directory {target} holds the source run "
                          f"{source}; pick a new directory that does not contain it")
    if target.is_symlink() and not target.exists():
        raise ConfigError(f"fork_run: the new run directory {target} is a dangling symbolic "
                          "link; pick a new directory, or remove the link yourself")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        what = "a file" if not target.is_dir() else "a folder that is not empty"
        raise ConfigError(f"fork_run: the new run directory {target} exists and is {what}; it is "
                          "never overwritten: pick a new directory, or remove it yourself")


def fork(source, config: dict) -> pathlib.Path:
    """Start a new run (``config``'s directory) from a finished run's partition, teachers and
    votes, with a NEW run id (its answers are charged to the ledger as its own).

    The new directory must not exist or be an empty folder, and must be neither the source,
    inside it, nor a folder holding it (:class:`ConfigError`, before anything is written). The
    run is assembled in a temporary folder next to it and renamed into place, so an interrupted
    fork leaves no half-copied run; nothing that existed before is ever deleted."""
    import os
    import secrets
    import shutil

    source = pathlib.Path(source)
    missing = [s for s in FORKED_STAGES if not (source / R.STAGE_DIR / f"{s}.json").exists()]
    if missing:
        raise ConfigError(f"{source} has not finished stage(s) {', '.join(missing)}; run "
                          f"`pate run --run-dir {source} --resume --until votes` there first")
    target = C.run_directory(config)
    _check_fork_target(source, target)
    parent = Run.open(source, progress=False)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.fork-{secrets.token_hex(6)}"
    staging.mkdir()  # a new, unique folder (the umask's permissions, like any run directory)
    try:
        run = Run.create(config, progress=False, run_dir=staging)
        run.state.update(stream_seed=parent.state["stream_seed"], forked_from=parent.run_id)
        run.start()
        (staging / R.STAGE_DIR).mkdir()
        for name in FORKED_FILES:
            if not (source / name).exists() and name != R.VOTES and (source / R.KNN_EMBEDDINGS).exists():
                continue  # a Private-kNN run: no partition, no teachers
            if name == R.VOTES and (source / R.KNN_EMBEDDINGS).exists():
                name = R.KNN_EMBEDDINGS
            (shutil.copytree if (source / name).is_dir() else shutil.copy2)(source / name,
                                                                             staging / name)
        for stage in FORKED_STAGES:
            shutil.copy2(source / R.STAGE_DIR / f"{stage}.json",
                         staging / R.STAGE_DIR / f"{stage}.json")
        _check_fork_target(source, target)  # again: nothing appeared there meanwhile
        try:  # onto a missing path or an empty folder only (rename refuses a non-empty one)
            os.rename(staging, target)
        except OSError as exc:
            raise ConfigError(f"fork_run: cannot move the forked run into {target} ({exc.strerror}"
                              "); pick a new directory, or remove it yourself") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)  # the folder this call created, only
        raise
    # the run now lives at the target (same inode): record that path, not the staging folder's
    atomic_write_json(target / R.STATE, dict(run.state, directory=R.directory_identity(target)))
    return target


#: What a forked run reuses: the files and the finished stages up to the vote matrix (a
#: Private-kNN run: its skipped stages and ``knn_embeddings.npz``).
FORKED_FILES = (R.PARTITION, R.TEACHERS, R.VOTES)
FORKED_STAGES = ("partition", "teachers", "votes")
