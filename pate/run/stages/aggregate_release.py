"""The aggregate stage of a "release" mechanism: its cost checked against the config's budget and
reserved, then one noisy release of the private records drawn and every query scored from it by
the labelling rule, in one round; the release is never saved, the scores are published."""

from __future__ import annotations

import logging

import numpy as np

from pate.core.errors import BudgetExceededError
from pate.core.release_check import ClassSeparation
from pate.run.rundir import Run
from pate.run.stages.budget import raise_hint
from pate.run.stages.pending import aggregate_info, publish
from pate.run.stages.records import RecordsInputs, records_inputs, records_summary
from pate.run.stages.rounds import Answers, Charging, Rounds, ask_in_rounds

logger = logging.getLogger(__name__)


def _reserve_release(run: Run, spec, inputs: RecordsInputs, event, charging: Charging):
    """The release's reservation (None without a ledger or a query); BudgetExceededError where
    it does not fit the config's budget or the ledger."""
    ledger, dataset = charging.ledger, charging.dataset
    eps_of, queries, prior = inputs.eps_of, inputs.queries, inputs.prior
    budget_eps, delta = run.config.privacy.budget_eps, run.config.privacy.delta
    cost = eps_of(inputs.prior_rdp + event.rdp_data_independent)
    if queries and cost > budget_eps:
        raise BudgetExceededError(
            f"the config's budget (eps={budget_eps:g} at delta={delta:g}) does not cover the one "
            f"release of {spec.title} (eps={eps_of(event.rdp_data_independent):.6g}"
            + ("" if prior is None else f", with the earlier rounds eps={cost:.6g}")
            + "); nothing was drawn or charged. Use more noise (a larger sigma), or raise the "
            "budget"
        )
    if not queries or ledger is None:
        return None
    try:
        return charging.reserve(event.rdp_data_independent)
    except BudgetExceededError as exc:
        raise BudgetExceededError(
            f"{exc}; the one release of {spec.title} does not fit, nothing was drawn or "
            "charged. Use more noise, or "
            + raise_hint(run, ledger, dataset, event.rdp_data_independent)
        ) from None


def aggregate_release(run: Run, spec, ledger, dataset: str | None, run_id: str) -> dict:
    """The aggregate stage of a "release" mechanism (see the module docstring)."""
    inputs = records_inputs(run, spec)
    queries, num_classes, orders = inputs.queries, inputs.num_classes, inputs.orders
    event = spec.event(
        np.zeros((queries, num_classes)),
        inputs.params,
        answered=np.ones(queries, dtype=bool),
        orders=orders,
    )
    events = [event] if queries else []
    answers, rounds = Answers.empty(inputs.num_queries, num_classes=num_classes), Rounds()
    records = {
        "statistic": spec.released_statistic,
        "private_records": int(inputs.private.shape[0]),
    }
    charging = Charging(ledger, dataset, run_id, orders)
    reservation = _reserve_release(run, spec, inputs, event, charging)
    ask = _release_asker(run, spec, inputs, event, answers, records)

    def summary_now():  # the one release: every query asked, reserved and answered at once
        progress = Rounds(asked=queries, reserved=queries, rounds=rounds.rounds)
        return records_summary(
            run,
            spec,
            inputs,
            events,
            progress,
            answered=queries,
            charging=charging,
            records=records,
        )

    rounds.first = (reservation, queries)
    ask_in_rounds(
        run,
        charging,
        worst=event.rdp_data_independent,
        limit=queries,
        ask=ask,
        answers=answers,
        summary=summary_now,
        rounds=rounds,
    )
    summary = summary_now()
    publish(run, answers.labels, answers.answered, summary, answers.scores)
    return aggregate_info(summary)


def _release_asker(run: Run, spec, inputs: RecordsInputs, event, answers, records):
    """The round driver's ``ask``: the one release, drawn inside the reservation (its details
    into ``records``)."""
    num_classes, queries = int(answers.scores.shape[1]), inputs.queries
    public, private, private_labels = inputs.public, inputs.private, inputs.private_labels
    params = inputs.params

    def ask(start, n):
        # Drawn only now, inside the reservation: the release and its noise; the scores are
        # post-processing of the release and the public rows.
        scores, details = spec.release_scores(
            public,
            private,
            private_labels,
            params,
            queries=queries,
            num_classes=num_classes,
            rng=run.noise_streams().noise,
            rule=run.config.knn.labelling_rule,
        )
        answers.scores[:queries] = scores
        answers.labels[:queries] = np.argmax(scores, axis=1)  # the rule's predict
        answers.answered[:queries] = True
        records.update(details)
        if "class_separation" in details:  # said now, before any student trains on the labels
            separation = ClassSeparation.from_dict(details["class_separation"])
            if separation.unplaced:
                logger.warning("%s", separation.warning_text(run.data.class_names))
        return queries, event, None

    return ask
