"""The aggregate stage: noisy labels within the budget; nothing reaches ``labels.npy`` before it
is charged. The loop of each mechanism kind runs on :mod:`pate.run.stages.rounds`."""

from __future__ import annotations

from pate.run import rundir
from pate.run.rundir import Run
from pate.run.stages.budget import authorize
from pate.run.stages.pending import aggregate_info
from pate.run.stages.resume import finish_pending, settle_lost_draws


def aggregate(run: Run) -> dict:
    """The published answers, else the interrupted stage resumed (a crash before the pending
    write forfeits its drawn reservation: the budget is lost, never freed), else the kind's loop."""
    spec = run.config.aggregator.spec
    run_id = run.run_id + ":aggregate"
    run.check_not_a_copy()  # a copied run directory never draws or charges under this run id
    ledger = run.ledger()
    try:
        dataset = authorize(run, ledger) if ledger is not None else None
        if run.path(rundir.AGGREGATE).exists():  # published: charged before it was written
            run.path(rundir.PENDING).unlink(missing_ok=True)  # a crash before publish removed it
            return aggregate_info(
                rundir.read_summary(run.path(rundir.AGGREGATE), rundir.AGGREGATE_KEYS)
            )
        if run.path(rundir.PENDING).exists():
            return finish_pending(run, ledger, dataset, run_id)
        settle_lost_draws(ledger, dataset, run_id)  # a crash after a draw, before its pending file
        return spec.kind.step("aggregate_loop")(run, spec, ledger, dataset, run_id)
    finally:
        if ledger is not None:
            ledger.close()
