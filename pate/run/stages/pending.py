"""The pending file: answers drawn inside ledger reservations, kept until they are charged, then
published (the resume after a crash: :mod:`pate.run.stages.resume`)."""

from __future__ import annotations

import json

import numpy as np

from pate.analysis.errors import CorruptFileError
from pate.core.io import atomic_save_npy, atomic_savez, atomic_write_json, load_npz
from pate.run import rundir
from pate.run.rundir import Run
from pate.teachers.errors import ConfigError

#: Version of the pending file's ``state``; a file of any other version is refused.
PENDING_FORMAT = 2


def write_pending(run: Run, labels, answered, summary, rounds, scores=None) -> None:
    """The answers drawn so far, in ONE file written atomically, with the summary to publish and
    ``rounds`` (``{"keys": [reservation ids], "events": [event dicts]}`` per ledger round) in its
    ``state`` member; written BEFORE the round's reservation is committed."""
    state = {
        "format": PENDING_FORMAT,
        "run_id": summary["run_id"],
        "summary": summary,
        "rounds": rounds,
    }
    atomic_savez(
        run.path(rundir.PENDING),
        labels=labels,
        answered=answered,
        state=np.frombuffer(json.dumps(state, sort_keys=True).encode(), dtype=np.uint8),
        **({} if scores is None else {"scores": scores}),
    )


def read_pending(run: Run, run_id: str) -> tuple[dict, dict]:
    """(arrays, state) of the pending file; one of another format version is refused with the
    version named (its charge could not be checked against the ledger)."""
    arrays = load_npz(run.path(rundir.PENDING), what="an interrupted aggregate stage")
    try:
        state = json.loads(arrays.pop("state").astype(np.uint8).tobytes().decode())
        version = state.get("format") if isinstance(state, dict) else None
    except (KeyError, ValueError, TypeError, AttributeError):  # no state, not UTF-8 JSON bytes
        state, version = None, None
    if isinstance(version, int) and version != PENDING_FORMAT:
        raise ConfigError(
            f"{run.path(rundir.PENDING)} is a pending file of format {version}, written by another "
            f"version of pate-learn (this one reads format {PENDING_FORMAT}); its answers are "
            "not published. Delete it (do not share its answers; what the ledger charged for "
            "them stays spent), then run the aggregate stage again"
        )
    ok = (
        isinstance(state, dict)
        and version == PENDING_FORMAT
        and isinstance(state.get("summary"), dict)
        and isinstance(state.get("rounds"), list)
        and all(
            isinstance(r, dict)
            and isinstance(r.get("keys"), list)
            and isinstance(r.get("events"), list)
            for r in state["rounds"]
        )
    )
    if not ok or not {"labels", "answered"} <= set(arrays):
        raise CorruptFileError(
            f"{run.path(rundir.PENDING)} is not a pending file of this version of "
            "pate-learn (modified or damaged); its answers are not published. "
            "Delete it to discard them, then run the aggregate stage again",
            path=run.path(rundir.PENDING),
        )
    if state.get("run_id") != run_id:
        raise ConfigError(
            f"{run.path(rundir.PENDING)} holds the answers of run {state.get('run_id')}, "
            f"not of this run ({run_id}); they are not published. Delete it, then "
            "run the aggregate stage again"
        )
    return arrays, state


def publish(run: Run, labels, answered, summary, scores=None) -> None:
    """Write the charged answers (and the labelling rule's class ``scores``, where the mechanism
    gives them) where the later stages read them, then drop the pending copy."""
    if scores is None:
        run.path(rundir.LABEL_SCORES).unlink(missing_ok=True)  # never a stale earlier aggregate's
    else:
        atomic_save_npy(run.path(rundir.LABEL_SCORES), scores)
    atomic_save_npy(run.path(rundir.LABELS), labels)
    atomic_save_npy(run.path(rundir.ANSWERED), answered)
    atomic_write_json(run.path(rundir.AGGREGATE), summary)
    run.path(rundir.PENDING).unlink(missing_ok=True)


def aggregate_info(summary: dict) -> dict:
    return {
        "asked": summary["queries_asked"],
        "answered": summary["queries_answered"],
        "stop_reason": summary.get("stop_reason"),
    }
