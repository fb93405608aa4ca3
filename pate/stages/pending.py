"""The pending file: answers drawn inside ledger reservations, kept until they are charged,
then published; and the resume that charges and publishes them after a crash."""

from __future__ import annotations

import json

import numpy as np

from pate import config as C
from pate import rundir as R
from pate.analysis.errors import BudgetExceededError, ConfigError, CorruptFileError
from pate.io import atomic_save_npy, atomic_savez, atomic_write_json, load_npy, load_npz
from pate.rundir import Run
from pate.stages.release import draw_release, release_plan


#: Version of the pending file's ``state`` (the earlier two-file layout had none).
PENDING_FORMAT = 2


def write_pending(run: Run, labels, answered, summary, rounds, scores=None) -> None:
    """The answers drawn so far, in ONE file written atomically (temp file, fsync, rename, fsync
    of the directory: :func:`pate.io.atomic_savez`): the arrays, and in the ``state`` member
    (UTF-8 JSON, as uint8 bytes) the summary to publish and ``rounds``, one entry per ledger
    round -- ``{"keys": [reservation ids], "events": [event dicts]}`` --, written BEFORE the round's
    reservation is committed. The ledger records each committed event with its reservation id,
    so a resume knows exactly which rounds were charged (:func:`finish_pending`): no count, no
    second file that could be older or newer than the first."""
    state = {"format": PENDING_FORMAT, "run_id": summary["run_id"], "summary": summary,
             "rounds": rounds}
    atomic_savez(run.path(R.PENDING), labels=labels, answered=answered,
                 state=np.frombuffer(json.dumps(state, sort_keys=True).encode(), dtype=np.uint8),
                 **({} if scores is None else {"scores": scores}))


def read_pending(run: Run, run_id: str) -> tuple[dict, dict]:
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


def publish(run: Run, labels, answered, summary, scores=None) -> None:
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


def aggregate_info(summary: dict) -> dict:
    return {"asked": summary["queries_asked"], "answered": summary["queries_answered"],
            "stop_reason": summary.get("stop_reason")}


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
        raise ConfigError(f"{run.path(R.PENDING)} holds answers drawn inside ledger reservations, "
                          "but this run has no ledger; they are not published. Delete it, then "
                          "run the aggregate stage again")

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
                summary["release"] = draw_release(config, votes_all[:asked], answered[:asked],
                                                  run.noise_streams().release)
                summary["events"].append(event.to_dict())
                rounds.append({"keys": [reservation.id], "events": [event.to_dict()]})
                rewrite()
                reservation.commit([event])
    publish(run, labels, answered, summary, scores)
    return aggregate_info(summary)
