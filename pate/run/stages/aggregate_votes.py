"""The aggregate stage of a "vote" mechanism: noisy answers to the teachers' vote counts (the
online aggregator stops on the config's budget) on the round driver, then the planned sanitized
release, reserved up front and committed when it is drawn, as one more round."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from pate.core.errors import BudgetExceededError
from pate.core.io import load_npy
from pate.run import rundir
from pate.run.rundir import Run
from pate.run.stages.budget import eps_of, raise_hint
from pate.run.stages.pending import aggregate_info, publish
from pate.run.stages.release import draw_release, release_event, release_plan
from pate.run.stages.rounds import (
    Answers,
    Charging,
    Rounds,
    ask_in_rounds,
    charged_part,
    commit_round,
    max_fitting,
)


@dataclasses.dataclass
class _Reserved:
    """What a vote run reserved before any noise was drawn: the (maybe dropped) release ``plan``,
    its reservation, the first round's ``(reservation, n)``, the RDP the aggregator starts from."""

    plan: dict
    release: object = None
    first: tuple = (None, 0)
    prior: np.ndarray | None = None

    def release_unused(self) -> None:
        for unused in (self.release, self.first[0]):
            if unused is not None and not unused.closed:
                unused.release()  # nothing was drawn for it


def _dropped(plan: dict, why: str) -> dict:
    """``plan`` without its sanitized release, saying ``why`` (its ``fallback``)."""
    return dict(plan, release=False, fallback=why)


def _planned_release(config: dict, *, num_teachers: int, num_classes: int, orders) -> dict:
    """The sanitized release, planned before any noise is drawn so that the answers leave room
    for it; skipped when it alone would cost more than half the budget."""
    budget_eps = config.privacy.budget_eps
    plan = release_plan(config, num_teachers=num_teachers, num_classes=num_classes, orders=orders)
    if plan["release"]:
        release_eps = eps_of(config, plan["rdp"])
        if release_eps > budget_eps / 2:  # public quantities only: no data looked at
            plan = _dropped(
                plan,
                f"the release alone would cost eps={release_eps:.4g}, more than half of the "
                f"budget ({budget_eps:g}); it was skipped (raise release_sigma_ss or the "
                "budget to release a sanitized epsilon)",
            )
    return plan


def _reserve(run: Run, spec, charging: Charging, *, worst, queries: int, held: _Reserved) -> None:
    """Reserve the planned release and the first round in ``held`` (the release is dropped where
    it leaves no room for one query); BudgetExceededError where not even one query fits."""
    plan, ledger, dataset, orders = held.plan, charging.ledger, charging.dataset, charging.orders
    release_rdp = plan["rdp"] if plan["release"] else np.zeros(orders.size)
    if ledger is not None and plan["release"]:
        try:
            held.release = charging.reserve(release_rdp)
        except BudgetExceededError:
            held.plan = _dropped(
                plan,
                "the ledger's remaining budget does not cover the sanitized release; it was "
                "skipped and the data-independent epsilon is reported",
            )
            release_rdp = np.zeros(orders.size)
    held.prior = release_rdp.copy()
    if ledger is None:
        return
    held.first = max_fitting(charging, worst=worst, limit=queries)
    if held.first[0] is None and held.release is not None:
        # answers before the release: without room for one query, the release goes
        held.release.release()
        held.release = None
        held.plan = _dropped(
            held.plan,
            "the ledger's remaining budget does not cover the sanitized release and one "
            "query; the release was skipped and the data-independent epsilon is reported",
        )
        held.first = max_fitting(charging, worst=worst, limit=queries)
    if held.first[0] is None:
        summary = ledger.summary(dataset)
        raise BudgetExceededError(
            f"the ledger {ledger.path} has no room for even one query of {spec.title} "
            f"on the dataset {summary['name'] or 'of this run'!r} (spent and reserved eps="
            f"{summary['spent_and_reserved']:.6g} of {summary['budget']['eps']:g}); "
            "nothing was drawn or charged. Use more noise, or "
            + raise_hint(run, ledger, dataset, queries * worst),
            remaining=summary["remaining"],
        )
    held.prior = held.first[0].prior_rdp(orders)


def _summary(
    aggregator,
    *,
    config: dict,
    charging: Charging,
    queries: int,
    plan: dict,
    rounds: Rounds,
    events=None,
    release=None,
) -> dict:
    """``aggregate.json`` of a vote run: the costs of this run's answers alone."""
    from pate import analysis

    priv, orders = config.privacy, charging.orders
    events = list(aggregator.accountant.events) if events is None else events
    s = aggregator.summary()
    for dd, key in ((False, "eps_data_independent"), (True, "eps_data_dependent")):
        eps, order = analysis.eps_from_rdp(
            aggregator.accountant.rdp(data_dependent=dd),
            orders=orders,
            delta=priv.delta,
            conversion=priv.conversion,
        )
        s[key] = float(eps)
        s["order_" + key[4:]] = float(order)
    return {
        **s,
        **charged_part(config, charging, events=events, queries=queries, plan=plan, rounds=rounds),
        "release": release,
    }


def aggregate_votes(run: Run, spec, ledger, dataset: str | None, run_id: str) -> dict:
    """The aggregate stage of a "vote" mechanism (see the module docstring)."""
    config = run.config
    params = config.aggregator_params()
    votes_all = load_npy(run.path(rundir.VOTES), what="the votes stage")
    num_queries = votes_all.shape[0]
    queries_setting = config.aggregator.queries
    queries = min(num_queries if queries_setting is None else queries_setting, num_queries)
    orders = config.privacy.order_grid()
    plan = _planned_release(
        config,
        num_teachers=int(votes_all[0].sum()),
        num_classes=int(votes_all.shape[1]),
        orders=orders,
    )
    worst = spec.worst_case_query_rdp(params, orders=orders)
    held = _Reserved(plan)
    charging = Charging(ledger, dataset, run_id, orders)
    try:
        _reserve(run, spec, charging, worst=worst, queries=queries, held=held)
        noise = run.noise_streams()
        aggregator = _online_aggregator(spec, config, params, rng=noise.noise, prior=held.prior)
        answers, rounds = Answers.empty(num_queries), Rounds(first=held.first)

        def summary_now(events=None, release=None):
            return _summary(
                aggregator,
                config=config,
                charging=charging,
                queries=queries,
                plan=held.plan,
                rounds=rounds,
                events=events,
                release=release,
            )

        ask_in_rounds(
            run,
            charging,
            worst=worst,
            limit=queries,
            ask=_asker(aggregator, votes_all, answers),
            answers=answers,
            summary=summary_now,
            rounds=rounds,
        )
        if rounds.asked == 0 and queries > 0:
            raise BudgetExceededError(
                f"no query could be asked ({rounds.stop_reason}); nothing was released or "
                "charged. Use more noise, or "
                + (
                    raise_hint(run, ledger, dataset, queries * worst)
                    if ledger is not None
                    else "raise [privacy] budget_eps"
                ),
                remaining=aggregator.remaining_eps,
            )
        summary = _release_round(
            run,
            held,
            votes_all,
            answers,
            rounds,
            aggregator,
            summary_now,
            noise=noise,
        )
        publish(run, answers.labels, answers.answered, summary)
        return aggregate_info(summary)
    finally:
        held.release_unused()


def _online_aggregator(spec, config: dict, params: dict, *, rng, prior):
    """The online aggregator of a vote run, from the RDP ``prior`` (what others spent or
    reserved, the planned release included)."""
    from pate.core.online_aggregator import OnlineAggregator

    agg, priv = config.aggregator, config.privacy
    return OnlineAggregator(
        spec.name,
        budget_eps=priv.budget_eps,
        delta=priv.delta,
        rng=rng,
        orders=config.privacy.order_grid(),
        budget_basis=agg.budget_basis.replace("-", "_"),
        conversion=priv.conversion,
        prior_rdp=prior,
        **params,
    )


def _asker(aggregator, votes_all, answers: Answers) -> Callable:
    """The round driver's ``ask(start, n)`` of a vote run."""

    def ask(start, n):
        # the aggregator stops by itself on the config's budget (prior included)
        result = aggregator.answer(votes_all[start : start + n], on_exhausted="stop")
        k = result.num_asked
        answers.labels[start : start + k] = result.labels[:k]
        answers.answered[start : start + k] = result.answered_mask[:k]
        return k, result.event, result.stop_reason

    return ask


def _release_round(
    run: Run,
    held: _Reserved,
    votes_all,
    answers: Answers,
    rounds: Rounds,
    aggregator,
    summary_now,
    *,
    noise,
) -> dict:
    """The planned sanitized release, drawn after the answers inside its own reservation, and
    the summary to publish."""
    events, release, plan = list(aggregator.accountant.events), None, held.plan
    orders = run.config.privacy.order_grid()  # the grid the plan's rdp was computed on
    if plan["release"]:
        asked = rounds.asked
        if held.release is not None:
            held.release.mark_drawn()  # spent before the release's noise is drawn
        release = draw_release(
            run.config, votes_all[:asked], answers.answered[:asked], noise.release
        )
        events.append(release_event(plan, orders))
        if held.release is not None:
            commit_round(
                run, held.release, [events[-1]], answers, summary_now(events, release), rounds
            )
    return summary_now(events, release)
