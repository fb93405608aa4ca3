"""The aggregate stage: noisy labels within the budget; nothing reaches ``labels.npy`` before it
is charged. It resolves the run's dataset and budget in the ledger, then returns the published
answers, or resumes an interrupted stage (:func:`pate.run.stages.resume.finish_pending`), or runs
the loop of the mechanism's kind (its ``aggregate_loop``) on the round driver
(:func:`pate.run.stages.rounds.ask_in_rounds`); ``aggregate.json`` is written last."""

from __future__ import annotations

from pate.run import rundir
from pate.run.rundir import Run
from pate.run.stages.budget import authorize
from pate.run.stages.pending import aggregate_info
from pate.run.stages.resume import finish_pending, settle_lost_draws


def aggregate(run: Run) -> dict:
    """Noisy labels within the budget; nothing reaches ``labels.npy`` before it is charged (see
    the module docstring). A crash between drawing and publishing leaves the pending file, which
    ``--resume`` charges and publishes; a crash after a draw and before the pending write leaves
    a drawn reservation, which the resume forfeits (the budget is lost, never freed)."""
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
