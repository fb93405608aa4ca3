"""The aggregate stage of a "sample" mechanism: each round reserves the worst case of as many
queries as fit (every query costs the same), then draws the round's histograms from a fresh
sample of the private records and the noisy answers; the histograms are never saved."""

from __future__ import annotations

from collections.abc import Callable

from pate.core.errors import BudgetExceededError
from pate.run.rundir import Run
from pate.run.stages.budget import raise_hint
from pate.run.stages.pending import aggregate_info, publish
from pate.run.stages.records import RecordsInputs, records_inputs, records_summary
from pate.run.stages.rounds import Answers, Charging, Rounds, ask_in_rounds, max_fitting


def _allowed(eps_of, *, prior_rdp, worst, queries: int, budget_eps: float) -> int:
    """How many queries the config's budget allows (earlier rounds + n x the per-query cost)."""
    lo, hi = 0, queries
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if eps_of(prior_rdp + mid * worst) <= budget_eps else (lo, mid - 1)
    return lo


def _first_round(
    run: Run, spec, charging: Charging, inputs: RecordsInputs, *, allowed: int, worst
) -> tuple:
    """The first round's ``(reservation, n)``; BudgetExceededError where not one query fits."""
    eps_of, prior = inputs.eps_of, inputs.prior
    ledger, dataset = charging.ledger, charging.dataset
    first = (None, 0)
    if ledger is not None:
        first = max_fitting(charging, worst=worst, limit=max(1, allowed))
    if allowed == 0 or (ledger is not None and first[0] is None):
        try:  # the message reads the ledger while the reservation is still held
            where = (
                "the config's budget"
                if allowed == 0
                else f"the ledger {ledger.path} (spent and reserved on this dataset: eps="
                f"{ledger.summary(dataset)['spent_and_reserved']:.6g})"
            )
            refused = BudgetExceededError(
                f"{where} has no room for even one query of {spec.title} (eps="
                f"{run.config.privacy.budget_eps:g} at delta={run.config.privacy.delta:g}; one "
                f"query costs eps={eps_of(worst):.6g}"
                + (
                    ""
                    if prior is None
                    else f", the earlier rounds eps={eps_of(inputs.prior_rdp):.6g}"
                )
                + "); nothing was drawn or "
                "charged. Use more noise, a lower sampling_rate, or "
                + (
                    raise_hint(run, ledger, dataset, max(1, inputs.queries) * worst)
                    if ledger is not None
                    else "raise [privacy] budget_eps"
                )
            )
        finally:
            if first[0] is not None:
                first[0].release()  # nothing was drawn for it
        raise refused
    return first


def _asker(spec, inputs: RecordsInputs, answers: Answers, events: list, noise) -> Callable:
    """The round driver's ``ask(start, n)`` of a sample run (its events into ``events``)."""

    def ask(start, n):
        # Drawn only now, inside the round's reservation: the samples, the histograms, the
        # noise. Every query costs the same, so all n are asked.
        hist = spec.sample_votes(
            inputs.public[start : start + n],
            inputs.private,
            inputs.private_labels,
            inputs.params,
            num_classes=inputs.num_classes,
            rng=noise,
        )
        got, ok, _ = spec.draw(hist, inputs.params, noise)
        event = spec.event(hist, inputs.params, answered=ok, orders=inputs.orders)
        answers.labels[start : start + n], answers.answered[start : start + n] = got, ok
        events.append(event)
        return n, event, None

    return ask


def aggregate_sample(run: Run, spec, ledger, dataset: str | None, run_id: str) -> dict:
    """The aggregate stage of a "sample" mechanism (see the module docstring)."""
    inputs = records_inputs(run, spec)
    queries = inputs.queries
    worst = spec.worst_case_query_rdp(inputs.params, orders=inputs.orders)
    answers, rounds, events = Answers.empty(inputs.num_queries), Rounds(), []

    def summary_now():  # aggregate.json after the rounds so far
        return records_summary(
            run,
            spec,
            inputs,
            events,
            rounds,
            answered=int(answers.answered[: rounds.asked].sum()),
            charging=charging,
            knn={
                "histograms": "drawn per round after its reservation; never saved",
                "private_records": int(inputs.private.shape[0]),
            },
        )

    allowed = _allowed(
        inputs.eps_of,
        prior_rdp=inputs.prior_rdp,
        worst=worst,
        queries=queries,
        budget_eps=run.config.privacy.budget_eps,
    )
    charging = Charging(ledger, dataset, run_id, inputs.orders)
    first = _first_round(run, spec, charging, inputs, allowed=allowed, worst=worst)
    rounds.first = first
    try:
        noise = run.noise_streams().noise
        ask_in_rounds(
            run,
            charging,
            worst=worst,
            limit=allowed,
            ask=_asker(spec, inputs, answers, events, noise),
            answers=answers,
            summary=summary_now,
            rounds=rounds,
        )
        if rounds.stop_reason is None and rounds.asked < queries:
            rounds.stop_reason = (
                f"privacy budget: budget_eps does not cover one more query after "
                f"{rounds.asked} of {queries} (each costs the same data-independent RDP)"
            )
        summary = summary_now()
        publish(run, answers.labels, answers.answered, summary)
        return aggregate_info(summary)
    finally:
        if first[0] is not None and not first[0].closed:
            first[0].release()  # nothing was drawn for it
