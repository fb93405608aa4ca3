"""The aggregate stage of a "sample" mechanism (Private-kNN): every query's histogram is drawn
from a fresh sample of the private records inside its round's reservation, on the round driver
(:func:`pate.run.stages.rounds.ask_in_rounds`).

Each round first reserves in the ledger the worst case of as many queries as fit; only then are
the round's histograms drawn (``spec.sample_votes``: for Private-kNN, ``pate.core.knn.knn_votes``, a
fresh Poisson sample of the private records per query) and the noisy answers (``spec.draw``),
both from the run's noise stream; the answers go to the pending file and the round's event is
committed. Every asked query costs the same data-independent RDP, so how many fit is decided from
public quantities only. Without a ledger the config's budget decides it. The histograms are never
saved; nothing is released beyond the answers (no smooth-sensitivity release).
"""

from __future__ import annotations

from pate.analysis.errors import BudgetExceededError
from pate.run import config as C
from pate.run.rundir import Run
from pate.run.stages.budget import caller_of, raise_hint
from pate.run.stages.pending import aggregate_info, publish
from pate.run.stages.records import records_inputs, records_summary
from pate.run.stages.rounds import Answers, Rounds, ask_in_rounds, max_fitting


def _allowed(eps_of, *, prior_rdp, worst, queries: int, budget_eps: float) -> int:
    """How many queries the config's budget allows (the ledger checks its own, linked datasets
    and concurrent runs included): earlier rounds + n x the per-query cost, public quantities."""
    lo, hi = 0, queries
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if eps_of(prior_rdp + mid * worst) <= budget_eps else (lo, mid - 1)
    return lo


def _first_round(
    run: Run,
    spec,
    ledger,
    dataset,
    run_id: str,
    eps_of,
    *,
    allowed: int,
    queries: int,
    worst,
    orders,
    budget_eps: float,
    delta: float,
    prior,
    prior_rdp,
) -> tuple:
    """The first round's ``(reservation, n)`` (``(None, 0)`` without a ledger); BudgetExceededError
    where not even one query fits the config's budget or the ledger."""
    first = (None, 0)
    if ledger is not None:
        first = max_fitting(
            ledger, dataset, orders=orders, worst=worst, limit=max(1, allowed), run_id=run_id
        )
    if allowed == 0 or (ledger is not None and first[0] is None):
        try:  # the message reads the ledger while the reservation is still held
            where = (
                "the config's budget"
                if allowed == 0
                else f"the ledger {ledger.path} (spent and reserved on this dataset: eps="
                f"{ledger.summary(dataset)['spent_and_reserved']:.6g})"
            )
            refused = BudgetExceededError(
                f"{where} has no room for even one query of {spec.title} (eps={budget_eps:g} at "
                f"delta={delta:g}; one query costs eps={eps_of(worst):.6g}"
                + ("" if prior is None else f", the earlier rounds eps={eps_of(prior_rdp):.6g}")
                + "); nothing was drawn or "
                "charged. Use more noise, a lower sampling_rate, or "
                + (
                    raise_hint(run, ledger, dataset, max(1, queries) * worst)
                    if ledger is not None
                    else f"raise {C.setting('privacy', 'budget_eps', source=caller_of(run))}"
                )
            )
        finally:
            if first[0] is not None:
                first[0].release()  # nothing was drawn for it
        raise refused
    return first


def aggregate_sample(run: Run, spec, ledger, dataset: str | None, run_id: str) -> dict:
    """The aggregate stage of a "sample" mechanism (see the module docstring)."""
    from pate import analysis

    config = run.config
    (
        params,
        public,
        private,
        private_labels,
        num_classes,
        num_queries,
        queries,
        orders,
        budget_eps,
        delta,
        conversion,
        plan,
        prior,
        prior_rdp,
    ) = records_inputs(run, spec)
    worst = spec.worst_case_query_rdp(params, orders=orders)

    def eps_of(rdp):
        return float(
            analysis.eps_from_rdp(rdp, orders=orders, delta=delta, conversion=conversion)[0]
        )

    answers, rounds, events = Answers.empty(num_queries), Rounds(), []

    def summary_now():
        return records_summary(
            spec,
            params,
            events,
            config=config,
            orders=orders,
            delta=delta,
            conversion=conversion,
            budget_eps=budget_eps,
            asked=rounds.asked,
            answered=int(answers.answered[: rounds.asked].sum()),
            offered=queries,
            stop_reason=rounds.stop_reason,
            run_id=run_id,
            dataset=dataset,
            ledger=ledger,
            plan=plan,
            reserved=rounds.reserved,
            rounds=rounds.rounds,
            prior=prior,
            knn={
                "histograms": "drawn per round after its reservation; never saved",
                "private_records": int(private.shape[0]),
            },
        )

    allowed = _allowed(
        eps_of, prior_rdp=prior_rdp, worst=worst, queries=queries, budget_eps=budget_eps
    )
    first = _first_round(
        run,
        spec,
        ledger,
        dataset,
        run_id,
        eps_of,
        allowed=allowed,
        queries=queries,
        worst=worst,
        orders=orders,
        budget_eps=budget_eps,
        delta=delta,
        prior=prior,
        prior_rdp=prior_rdp,
    )
    try:
        noise = run.noise_streams().noise

        def ask(start, n):
            # Drawn only now, inside the round's reservation: the samples, the histograms, the
            # noise. Every query costs the same, so all n are asked.
            hist = spec.sample_votes(
                public[start : start + n],
                private,
                private_labels,
                params,
                num_classes=num_classes,
                rng=noise,
            )
            got, ok, _ = spec.draw(hist, params, noise)
            event = spec.event(hist, params, answered=ok, orders=orders)
            answers.labels[start : start + n], answers.answered[start : start + n] = got, ok
            events.append(event)
            return n, event, None

        ask_in_rounds(
            run,
            ledger,
            dataset,
            run_id,
            orders=orders,
            worst=worst,
            limit=allowed,
            first=first,
            ask=ask,
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
