"""The chunks of a teacher ensemble trained as Ray tasks (:class:`pate.teachers.cluster.RaySession`):
planned for the cluster's task slots; the driver keeps ``state.json`` and writes every
``chunk_NNNN.pt``, in the local backend's format (:mod:`pate.teachers.ensemble`)."""

from __future__ import annotations

import dataclasses
import os
import time

from pate.teachers.chunks import (
    ChunkPlan,
    EnsembleJob,
    chunk_rows,
    chunk_size_for,
    chunk_task,
    finished_result,
    plan_chunks,
    prediction_arrays,
    read_back_chunk,
    save_chunk,
)
from pate.teachers.cluster import ClusterConfig, RaySession
from pate.teachers.ensemble_dir import PROGRESS
from pate.teachers.result import EnsembleResult

__all__ = ["train_in_ray_session"]


def train_in_ray_session(
    job: EnsembleJob, cluster: ClusterConfig, state, fingerprint, progress
) -> EnsembleResult:
    """The chunks planned for the cluster's task slots and trained as Ray tasks; the driver
    keeps ``state.json`` and writes every ``chunk_NNNN.pt``, in the local backend's format."""
    with RaySession(cluster) as session:
        where = f"on Ray ({session.slots} task slot(s))"
        plan = plan_chunks(job, state, fingerprint, chunk_size_for(job, state, session), where)
        return _train_on_ray(job, session, plan, progress)


def _train_on_ray(
    job: EnsembleJob, session: RaySession, plan: ChunkPlan, progress
) -> EnsembleResult:
    data, out, chunks = job.data, job.out, plan.chunks
    public_preds, eval_preds = prediction_arrays(data, len(job.shards))
    completed = set(plan.state["completed"]) if out is not None else set()
    todo = []
    for ci, members in enumerate(chunks):
        if ci in completed:  # finished chunks are read back, never trained again
            read_back_chunk(out, ci, members[0], members[-1] + 1, public_preds, eval_preds)
        else:
            todo.append(ci)
    workers: dict[int, dict] = {}

    def on_result(ci: int, result: dict) -> None:
        lo, hi = result["teachers"]
        public_preds[lo:hi] = result["public_predictions"]
        eval_preds[lo:hi] = result["eval_predictions"]
        if out is not None:
            params = result["params"]
            save_chunk(out, plan, ci, (lo, hi), params, public_preds, eval_preds, local=False)
        workers[ci] = result["worker"]

    started = time.perf_counter()
    session.run(
        _ray_jobs(job, session, chunks, todo),
        data.public.x,
        data.evaluation.x,
        on_result,
        progress=progress,
        done=len(chunks) - len(todo),
        total=len(chunks),
    )
    seconds = time.perf_counter() - started
    if out is not None and (out / PROGRESS).exists():
        os.unlink(out / PROGRESS)  # a local run's, for a chunk finished above
    result = finished_result(job, public_preds, eval_preds, plan.chunk_size, seconds)
    execution = dict(
        session.resources(),
        teachers_per_task=plan.chunk_size,
        num_chunks=len(chunks),
        chunks_trained=len(todo),
        chunks_reused=len(chunks) - len(todo),
        workers={str(k): v for k, v in sorted(workers.items())},
    )
    return dataclasses.replace(result, execution=execution)


def _ray_jobs(job: EnsembleJob, session: RaySession, chunks, todo):
    """``(chunk, spec, x_rows, y_rows)`` of every chunk in ``todo``, built one at a time as the
    session submits it: the driver holds the private rows of the chunks in flight only (the
    task receives only its chunk's rows, the shards re-indexed into them)."""
    data, out = job.data, job.out
    for ci in todo:
        members = chunks[ci]
        x_c, y_c, local = chunk_rows(data.private, [job.shards[t] for t in members])
        spec = {
            "task": chunk_task(job, ci, members, local),
            "teachers": [members[0], members[-1] + 1],
            "threads": session.cluster.cpus_per_task,
            "out_dir": None if out is None else str(out.resolve()),
        }
        yield ci, spec, x_c, y_c
