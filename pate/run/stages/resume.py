"""The resume of an interrupted aggregate stage: the rounds of its pending file that the ledger
does not hold are charged (by reservation id, never by counting), the planned sanitized release is
drawn if the interruption came before it, and the answers are published -- or discarded, never
released, when they can no longer be charged."""

from __future__ import annotations

import numpy as np

from pate.core.errors import BudgetExceededError
from pate.core.io import load_npy
from pate.run import config as C
from pate.run import rundir as R
from pate.run.rundir import Run
from pate.run.stages.pending import aggregate_info, publish, read_pending, write_pending
from pate.run.stages.release import draw_release, release_plan
from pate.run.stages.rounds import Answers, Rounds, commit_round
from pate.teachers.errors import ConfigError


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
    worst = sum(
        (np.asarray(e.rdp_data_independent, dtype=float) for e in events), np.zeros(orders.size)
    )
    with ledger.reserve(dataset, orders=orders, rdp=worst, run_id=run_id) as reservation:
        entry["keys"].append(reservation.id)
        rewrite()
        reservation.commit(events)


def finish_pending(run: Run, ledger, dataset: str | None, run_id: str) -> dict:
    """Resume after a crash between drawing and publishing: charge the rounds whose charge the
    ledger does not hold, then publish -- or, if they no longer fit, discard the answers (never
    released).

    Which rounds were charged is read from the ledger by key, never by counting: each round of
    the pending file names the reservation id(s) it was (or is being) committed under, and the
    ledger stores that id with every committed event. Events of another run, or of another copy
    of this run directory, carry other reservation ids and are never taken for this one's."""
    from pate.analysis import PrivacyEvent

    arrays, state = read_pending(run, run_id)
    labels, answered = arrays["labels"], arrays["answered"]
    scores = arrays.get("scores")
    summary, rounds = state["summary"], state["rounds"]
    if ledger is None:
        raise ConfigError(
            f"{run.path(R.PENDING)} holds answers drawn inside ledger reservations, "
            "but this run has no ledger; they are not published. Delete it, then "
            "run the aggregate stage again"
        )

    def rewrite():
        write_pending(run, labels, answered, summary, rounds, scores)

    charged = _charged_keys(ledger, dataset, run_id)
    for entry in rounds:
        if charged.isdisjoint(entry["keys"]):
            try:
                _charge_round(run, ledger, dataset, run_id, entry, rewrite)
            except BudgetExceededError as exc:
                run.path(R.PENDING).unlink(missing_ok=True)
                raise BudgetExceededError(
                    f"the answers drawn before the interruption can no longer be charged ({exc}); "
                    "they were discarded, never released. Start a new run directory"
                ) from None
    if summary["release_plan"]["release"] and summary["release"] is None:
        # the interruption came before the planned release was drawn: draw it now inside a
        # reservation, keep it in the pending file with that reservation's id, commit, and only
        # then publish it (or, if it no longer fits, report the data-independent eps)
        config, asked = run.config, int(summary["queries_asked"])
        votes_all = load_npy(run.path(R.VOTES), what="the votes stage")
        orders = C.orders(config)
        plan = release_plan(
            config,
            num_teachers=int(votes_all[0].sum()),
            num_classes=int(votes_all.shape[1]),
            orders=orders,
        )
        event = PrivacyEvent(
            "gnss-release", plan["params"], orders, plan["rdp"], plan["rdp"], queries=0, answered=0
        )
        try:
            reservation = ledger.reserve(dataset, orders=orders, rdp=plan["rdp"], run_id=run_id)
        except BudgetExceededError:
            summary["release_plan"] = dict(
                summary["release_plan"],
                release=False,
                fallback=(
                    "the run was interrupted before its sanitized release and the ledger no longer "
                    "covers it; the data-independent epsilon is reported"
                ),
            )
        else:
            with reservation:
                summary["release"] = draw_release(
                    config, votes_all[:asked], answered[:asked], run.noise_streams().release
                )
                summary["events"].append(event.to_dict())
                commit_round(
                    run,
                    reservation,
                    [event],
                    Answers(labels, answered, scores),
                    summary,
                    Rounds(charges=rounds),
                )
    publish(run, labels, answered, summary, scores)
    return aggregate_info(summary)
