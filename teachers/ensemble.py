"""Train a whole teacher ensemble: chunking, checkpoints, resume, predictions and accuracy.

More: docs/teachers.md, "pate.teachers.ensemble".
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import pathlib
import sys
import time
import warnings

import numpy as np

from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.validation import check_bool, check_int, describe
from pate.teachers.chunks import (
    ChunkPlan,
    EnsembleJob,
    chunk_rows,
    chunk_size_for,
    chunk_task,
    finished_result,
    plan_chunks,
    read_back_finished,
    save_chunk,
)
from pate.teachers.cluster import ClusterConfig, RaySession, progress_name, train_chunk
from pate.teachers.devices import resolve_device
from pate.teachers.ensemble_dir import FORMAT_VERSION, PROGRESS, open_out_dir, peek_state
from pate.teachers.features import FeatureRows, feature_rows
from pate.teachers.recipe import TeacherConfig
from pate.teachers.result import EnsembleResult
from pate.teachers.scaling import scale_warning, standardized_data
from pate.teachers.sklearn_teachers import train_sklearn

__all__ = ["train_teachers"]

logger = logging.getLogger("pate.teachers.ensemble")  # shown by the pate CLI


# ----------------------------------------------------------------------------- validation


def _check_shards(shards, num_records: int) -> list[np.ndarray]:
    if isinstance(shards, (str, bytes)) or not hasattr(shards, "__len__"):
        raise InputTypeError(
            f"shards must be a list of index arrays (Partition.shards), got {describe(shards)}"
        )
    out = []
    for t, s in enumerate(shards):
        arr = np.asarray(s)
        if arr.ndim != 1 or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
            raise InputTypeError(
                f"shards[{t}] must be a 1-D integer array of record indices, got {describe(s)}"
            )
        out.append(arr.astype(np.int64))
    if not out:
        raise InputError("shards is empty: at least one teacher is needed")
    for t, arr in enumerate(out):
        if arr.size == 0:
            raise InputError(f"shards[{t}] is empty: every teacher needs at least one record")
        if arr.min() < 0 or arr.max() >= num_records:
            raise InputError(
                f"shards[{t}] holds record indices outside [0, {num_records}) of the "
                "private split; was the partition made for another dataset?"
            )
    # Disjointness is what makes one record influence one teacher only (PATE's guarantee).
    counts = np.bincount(np.concatenate(out), minlength=num_records)
    if np.any(counts > 1):
        from pate.core.errors import PartitionError

        raise PartitionError(
            f"shards overlap: record {int(np.argmax(counts > 1))} is assigned to more than one "
            "teacher; every record must go to exactly one teacher"
        )
    return out


def _check_seeds(seeds, num_teachers: int) -> list[int]:
    if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__len__"):
        raise InputTypeError(
            f"seeds must be a list of non-negative ints (Streams.teacher_seeds), got "
            f"{describe(seeds)}"
        )
    if len(seeds) != num_teachers:
        raise InputError(
            f"seeds has {len(seeds)} entries but there are {num_teachers} shards; "
            "pass one seed per teacher (Streams.teacher_seeds(num_teachers))"
        )
    return [check_int(s, f"seeds[{i}]", minimum=0) for i, s in enumerate(seeds)]


def _digest(arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a, dtype=np.int64)
        h.update(len(a).to_bytes(8, "little"))
        h.update(a.tobytes())
    return h.hexdigest()


def _fingerprint(config: TeacherConfig, data, shards, seeds) -> dict:
    """What determines the trained teachers (``state.json``; a resume must match it)."""
    return {
        "format": FORMAT_VERSION,
        "recipe": config.fingerprint(),
        "dataset": data.name,
        "input_shape": list(data.input_shape),
        "num_classes": int(data.num_classes),
        "num_teachers": len(shards),
        "shards_sha256": _digest(shards),
        "seeds_sha256": _digest([seeds]),
        "public_size": len(data.public),
        "eval_size": len(data.evaluation),
    }


# ----------------------------------------------------------------------------- training


def train_teachers(
    data,
    shards,
    seeds,
    config: TeacherConfig | None = None,
    *,
    out_dir: str | os.PathLike | None = None,
    resume: bool = False,
    progress: bool = True,
    cluster: ClusterConfig | None = None,
) -> EnsembleResult:
    """Train teacher ``t`` on ``data.private`` rows ``shards[t]`` with seed ``seeds[t]``; returns an
    :class:`EnsembleResult`.

    Same-architecture torch teachers train together in chunks on a GPU (vectorized), one after
    another on a CPU or when they cannot be vmapped (sequential), unless ``config.trainer`` names
    one; a resumed run keeps its trainer. With ``out_dir`` every epoch (or chunk) is checkpointed
    atomically and ``resume=True`` continues an interrupted run to the same teachers.
    ``cluster`` with ``backend="ray"``: every chunk is a Ray task (same predictions).
    """
    config = TeacherConfig() if config is None else config
    if not isinstance(config, TeacherConfig):
        raise InputTypeError(f"config must be a TeacherConfig, got {describe(config)}")
    if cluster is not None and not isinstance(cluster, ClusterConfig):
        raise InputTypeError(f"cluster must be a ClusterConfig, got {describe(cluster)}")
    check_bool(resume, "resume")
    shards = _check_shards(shards, len(data.private))
    config, data = _resolved(config, data, shards)
    seeds = _check_seeds(seeds, len(shards))
    num_classes = int(data.num_classes)
    y_priv = data.private.y
    if y_priv.min() < 0 or y_priv.max() >= num_classes:
        raise InputError(f"private labels must lie in [0, {num_classes})")
    fingerprint = _fingerprint(config, data, shards, seeds)

    on_ray = cluster is not None and cluster.is_ray
    if config.is_sklearn:
        if on_ray:
            logger.warning(
                "teachers: scikit-learn teachers are fitted here with joblib (n_jobs), not on Ray"
            )
        result = train_sklearn(data, shards, seeds, config, fingerprint, out_dir, resume, progress)
        return dataclasses.replace(result, execution={"backend": "local", "n_jobs": config.n_jobs})
    # under Ray each task's device (Ray gives each task its GPU, not this machine's)
    device = cluster.task_device(config.device) if on_ray else resolve_device(config.device)
    trainer = _choose_trainer(config, data, device, peek_state(out_dir) if resume else None)
    state = open_out_dir(out_dir, fingerprint, resume)
    out = pathlib.Path(out_dir) if out_dir is not None else None
    job = EnsembleJob(data, shards, seeds, config, trainer, device, out)
    if on_ray:
        return _train_on_ray(job, cluster, state, fingerprint, progress)
    plan = plan_chunks(job, state, fingerprint, chunk_size_for(job, state))
    return _train_here(job, plan, progress)


def _resolved(config: TeacherConfig, data, shards) -> tuple[TeacherConfig, object]:
    """The recipe with its "auto" fields decided, and the data the teachers learn on (fixed
    features, public standardisation: public statistics only, no privacy cost)."""
    # epochs left open are sized from the shards' mean size; a run sets them from the declared
    # number of records (pate.run.stages.teachers), as its exact count is internal
    config = config.resolved(data, shard_size=float(np.mean([len(s) for s in shards])))
    # fixed filters, public statistics: no privacy cost; the private split's features are read
    # from the feature cache a chunk of teachers at a time (FeatureRows)
    data = feature_rows(data, config.features)
    if isinstance(data.private, FeatureRows) and (
        config.is_sklearn or config.standardize == "public"
    ):
        data = dataclasses.replace(data, private=data.private.split())  # they read it whole
    if config.standardize == "public":
        data = standardized_data(data)  # public statistics: no privacy cost
    else:
        warning = scale_warning(data.public.x, config.model, role="teacher")
        if warning:
            logger.warning("teachers: %s", warning)
    return config, data


def _choose_trainer(config: TeacherConfig, data, device: str, saved_state: dict | None) -> str:
    """ "vectorized" or "sequential": a resumed run keeps its own; "auto" is vectorized when the
    model can be vmapped, except for a model with convolutions on the CPU."""
    from pate.teachers.vectorized import sequential_is_faster, vmap_support

    trainer = config.trainer
    if saved_state is not None and saved_state.get("trainer") in ("vectorized", "sequential"):
        trainer = saved_state["trainer"]  # a resumed run keeps its trainer (same float rounding)
    shape, classes = data.input_shape, int(data.num_classes)
    if trainer == "auto" and sequential_is_faster(config.model, shape, classes, device=device):
        trainer = "sequential"
    if trainer in ("auto", "vectorized"):
        reason = vmap_support(config.model, input_shape=shape, num_classes=classes)
        if reason is not None:
            if trainer == "vectorized":
                raise InputError(
                    f"model {config.model!r} cannot be trained with the vectorized "
                    f"trainer: {reason}; use trainer='sequential' (or 'auto')"
                )
            logger.warning(
                "teachers: model %r cannot be vmapped (%s); training teachers one after another",
                config.model,
                reason,
            )
            trainer = "sequential"
        else:
            trainer = "vectorized"
    return trainer


def _train_here(job: EnsembleJob, plan: ChunkPlan, progress) -> EnsembleResult:
    """The chunks in this process, one after another (finished ones of a resumed run read
    back); every chunk's ``chunk_NNNN.pt`` written as it finishes."""
    import torch
    from tqdm.auto import tqdm

    data, config, device, out, chunks = job.data, job.config, job.device, job.out, plan.chunks

    held = _held_private(data, device)  # None: a chunk's rows read when it starts
    x_pub = torch.from_numpy(data.public.x).to(device)
    x_eval = torch.from_numpy(data.evaluation.x).to(device)
    public_preds, eval_preds, todo = read_back_finished(job, plan)
    bar = tqdm(
        total=len(chunks) * config.epochs,
        initial=(len(chunks) - len(todo)) * config.epochs,
        file=sys.stderr,
        disable=not progress,
        desc="teachers",
        unit="epoch",
        dynamic_ncols=True,
    )
    started = time.perf_counter()
    try:
        for ci in todo:
            members = chunks[ci]
            lo, hi = members[0], members[-1] + 1
            bar.set_postfix_str(f"chunk {ci + 1}/{len(chunks)} ({len(members)} teachers)")
            outcome = _train_chunk_here(job, ci, members, held, x_pub, x_eval, on_epoch=bar.update)
            public_preds[lo:hi] = outcome.public_predictions
            eval_preds[lo:hi] = outcome.eval_predictions
            if out is not None:
                params = outcome.unit.stacked_params()
                save_chunk(out, plan, ci, (lo, hi), params, public_preds, eval_preds, local=True)
            del outcome
    finally:
        bar.close()
    seconds = time.perf_counter() - started
    result = finished_result(job, public_preds, eval_preds, plan.chunk_size, seconds)
    execution = {"backend": "local", "torch_threads": torch.get_num_threads()}
    if job.trainer == "sequential":  # the threads a teacher's step runs on
        from pate.teachers.schedule import init_teacher
        from pate.teachers.sequential import step_threads

        shape, classes = tuple(data.input_shape), int(data.num_classes)
        model = init_teacher(config.model, 0, input_shape=shape, num_classes=classes)
        count = step_threads(model, input_shape=shape, batch_size=config.batch_size, device=device)
        execution["step_threads"] = count or torch.get_num_threads()
    return dataclasses.replace(result, execution=execution)


def _held_private(data, device):
    """The private split as (x, y) tensors on ``device`` when the teachers read it whole, or
    None when it is streamed (:class:`FeatureRows`: each chunk reads its shards' rows). A
    memory-mapped split (read-only) is handed to torch as it is: training only reads it."""
    import torch

    if isinstance(data.private, FeatureRows):
        return None
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        x = torch.from_numpy(data.private.x).to(device)
    return x, torch.from_numpy(data.private.y).to(device)


def _train_chunk_here(job: EnsembleJob, ci, members, held, x_pub, x_eval, *, on_epoch):
    """Train chunk ``ci`` (teachers ``members``) here: on the held private split, or on its
    shards' rows read for it (dropped when it returns)."""
    import torch

    device, out = job.device, job.out
    member_shards = [job.shards[t] for t in members]
    if held is None:
        x_c, y_c, member_shards = chunk_rows(job.data.private, member_shards)
        x_priv, y_priv = (torch.from_numpy(a).to(device) for a in (x_c, y_c))
        del x_c, y_c
    else:
        x_priv, y_priv = held
    task = chunk_task(
        job,
        ci,
        members,
        member_shards,
        resume_from=() if out is None else (out / PROGRESS, out / progress_name(ci)),
        checkpoint_path=None if out is None else out / PROGRESS,
    )
    return train_chunk(task, x_priv, y_priv, x_pub, x_eval, on_epoch=on_epoch)


def _train_on_ray(
    job: EnsembleJob, cluster: ClusterConfig, state, fingerprint, progress
) -> EnsembleResult:
    """The chunks planned for the cluster's task slots and trained as Ray tasks; the driver
    keeps ``state.json`` and writes every ``chunk_NNNN.pt``, in the local backend's format."""
    with RaySession(cluster) as session:
        where = f"on Ray ({session.slots} task slot(s))"
        plan = plan_chunks(job, state, fingerprint, chunk_size_for(job, state, session), where)
        data, out, chunks = job.data, job.out, plan.chunks
        public_preds, eval_preds, todo = read_back_finished(job, plan)
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
