"""The private split's identity in the ledger, the run's budget resolved against the ledger's,
and the check that the ledger can cover the run's planned worst case before any work."""

from __future__ import annotations

import logging
import math

import numpy as np

from pate.core.errors import BudgetExceededError
from pate.run import rundir
from pate.run.config import assignment, budget_command
from pate.run.rundir import Run
from pate.teachers.errors import ConfigError

logger = logging.getLogger("pate")


def register_config(config: dict, ledger) -> tuple[str, str | None, object]:
    """Register the private split of ``config`` in ``ledger`` under the name a run gives it, no
    budget (``pate budget digest --config``): ``(its id in the ledger, its name, its identity)``."""
    from pate.ledger import private_identity

    identity = private_identity(config.load_data())  # its people's with an id column
    digest = ledger.dataset_id(identity)
    name = _dataset_name(config.privacy.dataset, config.data.name, ledger.datasets(), digest)
    ledger.register_identity(identity, name=name)
    return digest, dataset_ref(ledger, digest), identity


def eps_of(config, rdp) -> float:
    """The epsilon of ``rdp`` (at the config's orders) at the config's delta and conversion."""
    from pate import analysis

    priv = config.privacy
    curve = np.asarray(rdp, dtype=float)
    orders = priv.order_grid()
    return float(
        analysis.eps_from_rdp(curve, orders=orders, delta=priv.delta, conversion=priv.conversion)[0]
    )


def run_identity(run: Run):
    """The private split's identity (:func:`pate.ledger.private_identity`), hashed once per
    open run."""
    from pate.ledger import private_identity

    if run.context.identity is None:
        run.context.identity = private_identity(run.data)
    return run.context.identity


def authorize(run: Run, ledger) -> str:
    """The private split's dataset in ``ledger``; sets ``run.config``'s ``budget_eps`` (in
    memory) to the ledger's lifetime budget, the one authority: a different budget, delta or
    conversion is refused before anything is written (docs/ledger.md, "One authority")."""
    priv = run.config.privacy
    identity = run_identity(run)
    given = priv.budget_eps
    register = given if given is not None else run.config.aggregator.target_eps
    # a started run that names the budget it last ran under (its config.json's) may go on with
    # the ledger's when that was changed since; a budget asked for anew must be the ledger's
    resumed = given is not None and given == run.context.recorded_budget_eps
    digest = ledger.dataset_id(identity)
    _check_same_records(run, digest)
    known = ledger.datasets()
    budgeted = [d for d in known if d["digest"] == digest and d["budget_eps"] is not None]
    for d in budgeted:
        have = (d["budget_eps"], d["budget_delta"], d["conversion"])
        _check_budget(
            run, ledger, digest, have, (given, priv.delta, priv.conversion), resumed=resumed
        )
    data_name = run.config.data.name.removeprefix("memory:")  # pate.fit's arrays: the user's name
    name = _dataset_name(priv.dataset, data_name, known, digest)
    if not budgeted and register is None:
        raise ConfigError(
            f"the ledger {ledger.path} holds no budget for this dataset ({name or data_name}) "
            "yet: set [privacy] budget_eps (its lifetime budget) or [aggregator] target_eps "
            "(what this run spends, then also registered as the lifetime budget)"
        )
    ledger.register_identity(identity, name=name)
    run.context.dataset_id = digest  # run.json keeps it (Run.start): a resume checks it
    budget = ledger.budget(digest)
    if budget is None:
        _register_budget(run, ledger, digest, eps=register, given=given)
        budget = ledger.budget(digest)
    else:  # again: another process may have set it meanwhile
        _check_budget(
            run,
            ledger,
            digest,
            (budget.eps, budget.delta, budget.conversion),
            (given, priv.delta, priv.conversion),
            resumed=resumed,
        )
    run.config = run.config.with_budget_eps(budget.eps)
    return digest


def _check_same_records(run: Run, digest: str) -> None:
    """ConfigError when the run was started on other private records (``run.json``'s keyed id)."""
    started_on = run.state.get("dataset_id")
    if started_on is not None and started_on != digest:
        raise ConfigError(
            f"{run.run_dir} was started on other private records: the data differs from the "
            "records this run was started with (its teachers were trained on those); use a "
            "new run directory"
        )


def dataset_ref(ledger, digest: str) -> str:
    """How messages name the dataset ``digest``: its first name, else its keyed id."""
    names = [d["name"] for d in ledger.datasets() if d["digest"] == digest]
    return names[0] if names and names[0] else digest


def _dataset_name(name: str | None, data_name: str, known: list, digest: str) -> str | None:
    """The name a dataset is registered under: ``[privacy] dataset``, else the data's name, made
    ``"NAME (2)"`` when other records in the ledger carry it; None: it keeps its first name."""
    if name is not None:
        return name
    taken = {n: d["digest"] for d in known for n in (d["name"], *d["aliases"]) if n}
    if taken.get(data_name, digest) == digest:
        return data_name
    if any(d["digest"] == digest and d["name"] for d in known):
        return None
    number = 2
    while f"{data_name} ({number})" in taken:
        number += 1
    return f"{data_name} ({number})"


def _register_budget(run: Run, ledger, digest: str, *, eps: float, given: float | None) -> None:
    """Register ``eps`` as the lifetime budget of a dataset that has none (logged unless
    ``given``, the run's ``budget_eps``)."""
    priv = run.config.privacy
    ledger.set_budget(digest, eps=eps, delta=priv.delta, conversion=priv.conversion)
    if given is None:
        label = dataset_ref(ledger, digest)
        logger.warning(
            "the ledger %s registered the dataset %r with the lifetime budget eps=%g, "
            "this run's [aggregator] target_eps ([privacy] budget_eps was not given); later "
            "runs on the same records share it. To allow more over the dataset's life, give "
            "[privacy] budget_eps the first time, or raise it with %s",
            ledger.path,
            label,
            eps,
            budget_command(
                ledger=ledger.path,
                digest=label,
                eps=eps * 2,
                delta=priv.delta,
                conversion=priv.conversion,
            ),
        )


def _check_budget(
    run: Run, ledger, digest: str, have: tuple, want: tuple, *, resumed: bool
) -> None:
    """ConfigError unless the ledger's budget ``have`` and the run's ``want`` -- both
    ``(eps, delta, conversion)``; ``want``'s eps None: the ledger's -- agree. A resumed run
    accepts the ledger's eps (see :func:`authorize`)."""
    (b_eps, b_delta, b_conv), (eps, delta, conversion) = have, want
    if (b_delta, b_conv) == (delta, conversion) and (eps is None or eps == b_eps):
        return
    if (b_delta, b_conv) == (delta, conversion) and resumed:
        if run.context.budget_noted == b_eps:
            return
        run.context.budget_noted = b_eps
        logger.warning(
            "the ledger %s holds the lifetime budget eps=%g for the dataset %r; "
            "this run last ran under eps=%g and goes on with the ledger's",
            ledger.path,
            b_eps,
            dataset_ref(ledger, digest),
            eps,
        )
        return
    asked = [
        (key, mine, theirs)
        for key, mine, theirs in (
            ("budget_eps", eps, b_eps),
            ("delta", delta, b_delta),
            ("conversion", conversion, b_conv),
        )
        if mine is not None and mine != theirs
    ]
    fix = "; ".join(
        f"set {assignment('privacy', key, theirs)}"
        + (" or leave it out (the ledger's applies)" if key == "budget_eps" else "")
        for key, _, theirs in asked
    )
    command = budget_command(
        ledger=ledger.path,
        digest=dataset_ref(ledger, digest),
        eps=b_eps if eps is None else eps,
        delta=delta,
        conversion=conversion,
    )
    raise ConfigError(
        f"the ledger {ledger.path} holds the lifetime budget eps={b_eps:g}, delta={b_delta:g} "
        f"({b_conv} conversion) for the dataset {dataset_ref(ledger, digest)!r}, but this run "
        "asks for "
        + ", ".join(assignment("privacy", key, mine) for key, mine, _ in asked)
        + f". The ledger is the one authority: {fix}; or change the ledger's budget with "
        f"`{command}` (recorded, and shown in the report)"
    )


def resolve_budget_without_ledger(run: Run) -> None:
    """Without a ledger the config's budget is the only one: ``budget_eps``, else ``target_eps``."""
    if run.config.privacy.budget_eps is None:
        run.config = run.config.with_budget_eps(run.config.aggregator.target_eps)


def _planned_worst_case(run: Run) -> tuple[np.ndarray, np.ndarray, int, str] | None:
    """``(rdp to reserve now, rdp of all planned queries, their number, what the first is)`` from
    public facts only: the whole planned cost with a ``target_eps`` or a one-release mechanism,
    else one query; None when the run asks no query."""
    config = run.config
    agg = config.aggregator
    spec = agg.spec
    orders = config.privacy.order_grid()
    num_public = len(run.data.public)
    queries = min(num_public if agg.queries is None else agg.queries, num_public)
    if queries <= 0:
        return None
    params = spec.validate(config.aggregator_params(), prefix="[aggregator] ")
    if spec.kind.releases_once:
        event = spec.event(
            np.zeros((queries, run.data.num_classes)),
            params,
            answered=np.ones(queries, dtype=bool),
            orders=orders,
        )
        rdp = event.rdp_data_independent
        return rdp, rdp, queries, f"the one release of {spec.title}"
    worst = spec.worst_case_query_rdp(params, orders=orders)
    if agg.target_eps is not None:
        return (
            queries * worst,
            queries * worst,
            queries,
            f"this run's target eps={agg.target_eps:g} ({queries} queries, all answered)",
        )
    return worst, queries * worst, queries, f"even one query of {spec.title}"


def raise_hint(run: Run, ledger, dataset: str, rdp) -> str:
    """ "raise the dataset's lifetime budget: `<command>`[, then ...]": a pasteable command that
    raises the budget by the epsilon of ``rdp`` over what is spent and reserved (the run was
    authorized: its delta and conversion are the ledger's)."""
    summary = ledger.summary(dataset)
    budget = summary["budget"]
    cost = eps_of(run.config, rdp)
    command = budget_command(
        ledger=ledger.path,
        digest=dataset_ref(ledger, dataset),
        eps=math.ceil(100 * (max(budget["eps"], summary["spent_and_reserved"]) + cost)) / 100,
        delta=budget["delta"],
        conversion=budget["conversion"],
    )
    if (run.run_dir / rundir.STATE).exists():  # a started run continues where it stopped
        then = f", then `pate run --run-dir {run.run_dir} --resume`"
    else:  # nothing was started: the same command again
        then = ", then run this command again"
    return f"raise the dataset's lifetime budget: `{command}`{then}"


def check_budget_fits(run: Run, ledger, dataset: str) -> None:
    """``BudgetExceededError`` before any stage runs when the ledger cannot reserve the planned
    worst case now (it reserves and at once releases: docs/ledger.md, "Checked before any
    teacher trains")."""
    planned = _planned_worst_case(run)
    if planned is None:
        return
    rdp, full, queries, what = planned
    orders = run.config.privacy.order_grid()
    try:
        ledger.reserve(dataset, orders=orders, rdp=rdp, run_id=run.run_id + ":preflight").release()
        return
    except BudgetExceededError:
        pass
    cost, full_cost = eps_of(run.config, rdp), eps_of(run.config, full)
    summary = ledger.summary(dataset)
    budget = summary["budget"]
    remaining = (
        summary["remaining"]
        if summary.get("remaining_effective") is None
        else summary["remaining_effective"]
    )
    remaining = 0.0 if remaining < 1e-9 else remaining  # rounding of a spent budget
    limited = summary.get("limited_by")
    where = (
        ""
        if not limited or limited == dataset
        else f" (limited by the linked dataset {dataset_ref(ledger, limited)!r})"
    )
    if run.config.aggregator.target_eps is not None:
        fix = "lower [aggregator] target_eps to what is left, or "
    else:
        fix = f"use more noise (all {queries} queries cost eps={full_cost:.4g}), or "
    raise BudgetExceededError(
        f"the ledger {ledger.path} has no room for {what}: it costs eps={cost:.4g} at most, and "
        f"the dataset {dataset_ref(ledger, dataset)!r} has eps={remaining:.4g} left{where} of its "
        "lifetime "
        f"budget eps={budget['eps']:g} (spent and reserved: eps="
        f"{summary['spent_and_reserved']:.4g}). Nothing was trained, drawn or charged. To go on, "
        f"{fix}{raise_hint(run, ledger, dataset, full)}",
        requested=cost,
        remaining=remaining,
    )
