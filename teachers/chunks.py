"""The chunks of one teacher ensemble, whichever backend trains them: what every chunk shares
(:class:`EnsembleJob`), how the ensemble is cut (:func:`plan_chunks`, :func:`chunk_size_for`),
the rows a chunk reads (:func:`chunk_rows`), the files a finished chunk leaves
(:func:`save_chunk`, :func:`read_back_finished`) and the result (:func:`finished_result`). The
files' layout: :mod:`pate.teachers.ensemble`."""

from __future__ import annotations

import dataclasses
import logging
import os
import pathlib
from typing import Any

import numpy as np

from pate.core.io import atomic_write_json
from pate.teachers.checkpoint import atomic_torch_save, load_torch
from pate.teachers.cluster import ChunkTask, progress_name
from pate.teachers.devices import available_bytes, choose_chunk_size
from pate.teachers.ensemble_dir import PROGRESS, STATE
from pate.teachers.features import FeatureRows
from pate.teachers.recipe import TeacherConfig
from pate.teachers.result import EnsembleResult, ensemble_result, write_result

__all__ = [
    "PRIVATE_CHUNK_BYTES",
    "EnsembleJob",
    "ChunkPlan",
    "plan_chunks",
    "chunk_size_for",
    "chunk_rows",
    "chunk_task",
    "prediction_arrays",
    "read_back_finished",
    "save_chunk",
    "finished_result",
]

logger = logging.getLogger("pate.teachers.ensemble")  # the ensemble's messages (the CLI shows them)
#: With ScatterNet features read from the feature cache, the private rows of a chunk of teachers
#: are read (and standardised) when the chunk starts and dropped when it ends, and the chunk
#: holds at most about this many bytes of them (at least one teacher): the teachers' memory does
#: not grow with the private split. Teachers train alike in any chunk.
PRIVATE_CHUNK_BYTES = 128 * 2**20


@dataclasses.dataclass(frozen=True)
class EnsembleJob:
    """What every chunk of one ensemble shares: the ``data`` the teachers learn on (features and
    public standardisation applied), their ``shards`` and ``seeds``, the resolved recipe
    ``config``, the ``trainer`` and ``device``, and the output directory ``out`` (None: nothing
    is written)."""

    data: Any
    shards: list
    seeds: list
    config: TeacherConfig
    trainer: str
    device: str
    out: pathlib.Path | None


@dataclasses.dataclass(frozen=True)
class ChunkPlan:
    """How the ensemble is cut: teachers per chunk (``chunk_size``), the ``chunks`` (lists of
    teacher indices) and the saved ``state`` (``state.json``'s dict, updated as chunks finish;
    None without an output directory)."""

    chunk_size: int
    chunks: list
    state: dict | None


def finished_result(
    job: EnsembleJob, public_preds, eval_preds, chunk_size, seconds
) -> EnsembleResult:
    """The ensemble's result, also written to ``job.out`` (when there is one)."""
    result = ensemble_result(
        job.data,
        public_preds,
        eval_preds,
        trainer=job.trainer,
        device=job.device,
        chunk_size=chunk_size,
        seconds=seconds,
    )
    if job.out is not None:
        write_result(job.out, result, job.config, job.data.name)
    return result


def prediction_arrays(data, num_teachers: int) -> tuple[np.ndarray, np.ndarray]:
    """Empty (teachers, public) and (teachers, evaluation) int64 prediction arrays."""
    return (
        np.empty((num_teachers, len(data.public)), dtype=np.int64),
        np.empty((num_teachers, len(data.evaluation)), dtype=np.int64),
    )


def read_back_finished(job: EnsembleJob, plan: ChunkPlan) -> tuple[np.ndarray, np.ndarray, list]:
    """The (teachers, public) and (teachers, evaluation) prediction arrays, the rows of the
    chunks a resumed run finished read back from their ``chunk_NNNN.pt``, and the chunks left
    to train."""
    public_preds, eval_preds = prediction_arrays(job.data, len(job.shards))
    completed = set(plan.state["completed"]) if job.out is not None else set()
    todo = []
    for ci, members in enumerate(plan.chunks):
        if ci not in completed:
            todo.append(ci)
            continue
        saved = load_torch(job.out / f"chunk_{ci:04d}.pt")  # never trained again
        public_preds[members[0] : members[-1] + 1] = saved["public_predictions"].numpy()
        eval_preds[members[0] : members[-1] + 1] = saved["eval_predictions"].numpy()
    return public_preds, eval_preds, todo


def chunk_rows(private, member_shards) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """(x, y) of the rows of a chunk's shards, one shard after another, and the shards
    re-indexed into them: each teacher sees the same records in the same order as in the whole
    split. ``private``: an :class:`~pate.teachers.data.ArraySplit` or :class:`FeatureRows`."""
    rows = np.concatenate(member_shards)
    bounds = np.cumsum([0] + [len(s) for s in member_shards])
    local = [np.arange(bounds[i], bounds[i + 1], dtype=np.int64) for i in range(len(member_shards))]
    x = private.take(rows) if isinstance(private, FeatureRows) else private.x[rows]
    return x, private.y[rows], local


def chunk_task(job: EnsembleJob, ci: int, members: list, shards: list, **files) -> ChunkTask:
    """The :class:`ChunkTask` of chunk ``ci`` (teachers ``members``), their ``shards`` indexing
    the rows the chunk is given; ``files``: its ``resume_from`` and ``checkpoint_path``."""
    return ChunkTask(
        trainer=job.trainer,
        config=job.config,
        chunk=ci,
        seeds=[job.seeds[t] for t in members],
        shards=shards,
        input_shape=tuple(job.data.input_shape),
        num_classes=int(job.data.num_classes),
        device=job.device,
        **files,
    )


def chunk_size_for(job: EnsembleJob, state, session=None) -> int:
    """Teachers per chunk: a resumed run keeps its own; on the Ray ``session``
    ``teachers_per_task``, else ``chunk_size``, else from the cluster's task slots; locally
    ``chunk_size``, else from the free memory."""
    from pate.teachers.vectorized import per_teacher_bytes

    config, data, num_teachers = job.config, job.data, len(job.shards)
    if state is not None and "chunk_size" in state:
        return int(state["chunk_size"])
    if session is not None:
        if session.cluster.teachers_per_task is not None:
            return min(session.cluster.teachers_per_task, num_teachers)
        return session.default_chunk_size(num_teachers, config.chunk_size)
    if config.chunk_size is not None:
        return choose_chunk_size(num_teachers, 1, config.chunk_size)
    per_teacher = per_teacher_bytes(
        config.model,
        input_shape=data.input_shape,
        num_classes=int(data.num_classes),
        batch_size=config.batch_size,
    )
    budget = (
        int(config.memory_budget_mb * 2**20)
        if config.memory_budget_mb is not None
        else available_bytes(job.device)
    )
    size = choose_chunk_size(num_teachers, per_teacher, budget)
    if isinstance(data.private, FeatureRows):  # the chunk's private rows are read for it
        shard_bytes = data.private.row_bytes * -(-len(data.private) // num_teachers)
        size = min(size, max(1, PRIVATE_CHUNK_BYTES // shard_bytes))
    return size


def plan_chunks(
    job: EnsembleJob, state, fingerprint, chunk_size: int, where: str = ""
) -> ChunkPlan:
    """The chunks (lists of teacher indices) and the saved state (``state.json`` written)."""
    out, trainer, seeds = job.out, job.trainer, job.seeds
    num_teachers = len(seeds)
    chunks = [
        list(range(i, min(i + chunk_size, num_teachers)))
        for i in range(0, num_teachers, chunk_size)
    ]
    if out is not None:
        state = dict(
            state or {},
            fingerprint=fingerprint,
            chunk_size=chunk_size,
            num_chunks=len(chunks),
            trainer=trainer,
            seeds=seeds,
            completed=(state or {}).get("completed", []),
        )
        atomic_write_json(out / STATE, state)
    done = len((state or {}).get("completed", []))
    logger.info(
        "teachers: %d %s teachers on %s, %s trainer, %d chunk(s) of up to %d%s%s",
        num_teachers,
        job.config.model,
        job.device,
        trainer,
        len(chunks),
        chunk_size,
        f" {where}" if where else "",
        f" ({done} already done)" if done else "",
    )
    return ChunkPlan(chunk_size, chunks, state)


def save_chunk(out, plan: ChunkPlan, ci, teachers, params, public, evaluation, *, local) -> None:
    """A finished chunk (``teachers`` = (lo, hi), its rows of the prediction arrays ``public``
    and ``evaluation``): ``chunk_NNNN.pt``, then ``state.json``, then its progress checkpoint
    goes (the same files and order whichever backend trained it). ``progress.pt`` is the chunk
    in training locally; under Ray it may be another chunk's (a run started locally): it goes
    when the stage ends."""
    import torch

    lo, hi = teachers
    atomic_torch_save(
        out / f"chunk_{ci:04d}.pt",
        {
            "teachers": [lo, hi],
            "params": params,
            "public_predictions": torch.from_numpy(np.ascontiguousarray(public[lo:hi])),
            "eval_predictions": torch.from_numpy(np.ascontiguousarray(evaluation[lo:hi])),
        },
    )
    plan.state["completed"] = sorted(set(plan.state["completed"]) | {ci})
    atomic_write_json(out / STATE, plan.state)
    for name in ((PROGRESS,) if local else ()) + (progress_name(ci),):
        if (out / name).exists():
            os.unlink(out / name)
