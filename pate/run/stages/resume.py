"""The resume of an interrupted aggregate stage: commit each pending round whose reservation
the ledger holds as drawn (by reservation id, never by counting), forfeit a drawn reservation
whose answers never reached the pending file (``lost-drawn-answers``: its bound stays spent),
publish, and draw the planned sanitized release if the interruption came before it
(docs/pipeline.md)."""

from __future__ import annotations

import logging

from pate.core.errors import BudgetExceededError
from pate.core.io import load_npy
from pate.run import rundir
from pate.run.rundir import Run
from pate.run.stages.pending import aggregate_info, publish, read_pending
from pate.run.stages.release import draw_release, release_event, release_plan
from pate.run.stages.rounds import Answers, Rounds, commit_round
from pate.teachers.errors import ConfigError

logger = logging.getLogger("pate")


def _reservations_of(ledger, dataset: str, run_id: str) -> tuple[set[str], set[str]]:
    """(ids of the reservations under which the ledger holds committed events of ``run_id``, ids
    of its drawn reservations)."""
    charged = {e.reservation for e in ledger.events(dataset, run_id=run_id) if e.reservation}
    drawn = {
        r.id
        for r in ledger.reservations(dataset, live_only=False)
        if r.status == "drawn" and r.run_id == run_id
    }
    return charged, drawn


def forfeit_lost_draws(ledger, dataset: str, run_id: str, drawn: set[str]) -> None:
    """Forfeit the drawn reservations ``drawn`` (whose answers never reached a pending file):
    their bound stays spent."""
    for rid in sorted(drawn):
        ledger.forfeit(rid)
        logger.warning(
            "the aggregate stage of run %s was interrupted after drawing noise inside ledger "
            "reservation %s and before keeping its answers in its pending file: that "
            "reservation's whole bound stays spent (budget lost, recorded as a "
            "'lost-drawn-answers' event); this run does not publish those answers",
            run_id,
            rid,
        )


def settle_lost_draws(ledger, dataset: str | None, run_id: str) -> None:
    """Before a fresh aggregate stage: forfeit every drawn reservation of ``run_id``."""
    if ledger is not None:
        forfeit_lost_draws(ledger, dataset, run_id, _reservations_of(ledger, dataset, run_id)[1])


def finish_pending(run: Run, ledger, dataset: str | None, run_id: str) -> dict:
    """Resume after a crash between drawing and publishing (the module docstring): commit, forfeit,
    draw the release if it was not, then publish."""
    arrays, state = read_pending(run, run_id)
    labels, answered = arrays["labels"], arrays["answered"]
    scores = arrays.get("scores")
    summary, rounds = state["summary"], state["rounds"]
    if ledger is None:
        raise ConfigError(
            f"{run.path(rundir.PENDING)} holds answers drawn inside ledger reservations, "
            "but this run has no ledger; they are not published. Delete it (its answers were "
            "never charged here: do not share them), then run the aggregate stage again"
        )
    _commit_drawn_rounds(run, ledger, dataset, run_id, rounds)
    if summary["release_plan"]["release"] and summary["release"] is None:
        _draw_release(run, ledger, dataset, run_id, state, Answers(labels, answered, scores))
    publish(run, labels, answered, summary, scores)
    return aggregate_info(summary)


def _commit_drawn_rounds(run: Run, ledger, dataset: str, run_id: str, rounds: list) -> None:
    """Commit the pending ``rounds`` the ledger holds as drawn, forfeit the other drawn
    reservations, refuse a round whose reservation the ledger holds neither as drawn nor charged."""
    from pate.analysis import PrivacyEvent

    charged, drawn = _reservations_of(ledger, dataset, run_id)
    for entry in rounds:
        if not charged.isdisjoint(entry["keys"]):
            continue
        held = [key for key in entry["keys"] if key in drawn]
        if not held:
            raise ConfigError(
                f"{run.path(rundir.PENDING)} holds answers drawn under ledger reservation(s) "
                f"{', '.join(entry['keys'])}, which the ledger {ledger.path} holds neither as "
                "charged nor as drawn (a pending file of another ledger): they were never charged, so they are not published. "
                "Delete the file (do not share its answers), then run the aggregate stage again"
            )
        ledger.commit(held[0], [PrivacyEvent.from_dict(e) for e in entry["events"]])
        drawn -= set(entry["keys"])
    forfeit_lost_draws(ledger, dataset, run_id, drawn)


def _draw_release(
    run: Run, ledger, dataset: str, run_id: str, state: dict, answers: Answers
) -> None:
    """Draw the planned release inside a reservation marked drawn, keep and commit it (if it no
    longer fits, the data-independent eps is reported); updates ``state["summary"]``."""
    summary, rounds = state["summary"], state["rounds"]
    config, asked = run.config, int(summary["queries_asked"])
    votes_all = load_npy(run.path(rundir.VOTES), what="the votes stage")
    orders = config.privacy.order_grid()
    plan = release_plan(
        config,
        num_teachers=int(votes_all[0].sum()),
        num_classes=int(votes_all.shape[1]),
        orders=orders,
    )
    event = release_event(plan, orders)
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
            reservation.mark_drawn()  # spent before the release's noise is drawn
            summary["release"] = draw_release(
                config, votes_all[:asked], answers.answered[:asked], run.noise_streams().release
            )
            summary["events"].append(event.to_dict())
            commit_round(run, reservation, [event], answers, summary, Rounds(charges=rounds))
