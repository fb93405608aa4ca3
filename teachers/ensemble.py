"""Train a whole teacher ensemble: chunking, checkpoints, resume, predictions and accuracy.

Symbols
-------
``TeacherConfig``
    The training recipe (frozen dataclass; :mod:`pate.teachers.recipe` describes every field
    and how ``TeacherConfig.resolved(data)`` decides the "auto" ones), with :func:`auto_epochs`,
    ``MIN_TEACHER_STEPS``, ``AUTO_EPOCHS_RANGE`` and ``TRAINERS``.
``train_teachers(data, shards, seeds, config, *, out_dir=None, resume=False, progress=True,
cluster=None)``
    Train teacher ``t`` on ``data.private`` rows ``shards[t]`` with seed ``seeds[t]`` and return
    an :class:`EnsembleResult`. Same-architecture torch teachers are trained together in chunks
    on a GPU (:mod:`pate.teachers.vectorized`); on CPU, and for models that cannot be vmapped,
    teachers are trained one after another (:mod:`pate.teachers.sequential`), unless ``trainer``
    names one. A resumed run keeps the trainer it started with. With
    ``out_dir`` every epoch (or chunk) is checkpointed atomically and ``resume=True`` continues
    an interrupted run to the same teachers as an uninterrupted one. ``cluster`` (a
    :class:`pate.teachers.cluster.ClusterConfig`; None = local): with ``backend="ray"`` every
    chunk is a Ray task (same predictions, bit for bit on CPU at the same thread count; the
    chunk files are written here, by the driver, in the same format).
``EnsembleResult``, ``plurality_accuracy``
    What training gives (predictions, accuracies, where it ran): :mod:`pate.teachers.result`.
``PRIVATE_CHUNK_BYTES``
    With ScatterNet features read from the feature cache, the private rows of a chunk of
    teachers are read (and standardised) when the chunk starts and dropped when it ends, and
    the chunk holds at most about this many bytes of them (128 MiB; at least one teacher): the
    teachers' memory does not grow with the private split. Teachers train alike in any chunk.
``load_teacher_models(out_dir)``
    The trained torch teachers of an ``out_dir`` as a list of ``nn.Module`` (eval mode).

Files in ``out_dir`` (normally ``<run_dir>/teachers``): ``state.json`` (recipe fingerprint,
seeds, chunking, completed chunks), ``progress.pt`` (the chunk in training, removed when it is
done; ``progress_NNNN.pt`` under Ray, one per chunk in training), ``chunk_NNNN.pt`` (torch:
trained weights and predictions of a chunk, read back with ``weights_only=True``), ``chunk_NNNN.npz`` (scikit-learn:
:mod:`pate.teachers.sklearn_teachers`), ``predictions.npz``
(``public``, ``evaluation``, ``evaluation_labels``) and ``metrics.json``. No file in a run
directory is ever a pickle, and none is read in a way that can run code.

Messages (the trainer chosen, a fallback from vmap, ignored pickles) go to the ``logging``
logger ``"pate.teachers.ensemble"``, a child of ``"pate"`` (the CLI shows it on stderr);
progress bars are tqdm's, on stderr, off with ``progress=False``.

The recipe is :mod:`pate.teachers.recipe`, the devices :mod:`pate.teachers.devices`, the
result and its files :mod:`pate.teachers.result`, the output directory
:mod:`pate.teachers.ensemble_dir`, scikit-learn teachers (their chunk checkpoints, never
pickles) :mod:`pate.teachers.sklearn_teachers`; every name above is importable from here.
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
from typing import Any

import numpy as np

from pate.analysis.validation import check_int, describe
from pate.teachers.checkpoint import atomic_torch_save, atomic_write_json, load_torch
from pate.teachers.cluster import ChunkTask, ClusterConfig, RaySession, progress_name, train_chunk
from pate.teachers.devices import available_bytes, choose_chunk_size, resolve_device
from pate.teachers.ensemble_dir import (
    FORMAT_VERSION,
    PROGRESS,
    STATE,
    load_teacher_models,
    open_out_dir,
    peek_state,
)
from pate.teachers.errors import ConfigError
from pate.teachers.features import FeatureRows, feature_rows
from pate.teachers.recipe import (
    AUTO_EPOCHS_RANGE,
    MIN_TEACHER_STEPS,
    TRAINERS,
    TeacherConfig,
    auto_epochs,
)
from pate.teachers.result import EnsembleResult, ensemble_result, plurality_accuracy, write_result
from pate.teachers.scaling import scale_warning, standardized_data
from pate.teachers.sklearn_teachers import train_sklearn

__all__ = [
    "TeacherConfig",
    "EnsembleResult",
    "train_teachers",
    "plurality_accuracy",
    "load_teacher_models",
    "resolve_device",
    "choose_chunk_size",
    "TRAINERS",
    "auto_epochs",
    "MIN_TEACHER_STEPS",
    "AUTO_EPOCHS_RANGE",
]

logger = logging.getLogger("pate.teachers.ensemble")  # shown by the pate CLI
PRIVATE_CHUNK_BYTES = 128 * 2**20


# ----------------------------------------------------------------------------- validation


def _check_shards(shards, num_records: int) -> list[np.ndarray]:
    from pate.core.partition import check_partition

    if isinstance(shards, (str, bytes)) or not hasattr(shards, "__len__"):
        raise TypeError(
            f"shards must be a list of index arrays (Partition.shards), got {describe(shards)}"
        )
    out = []
    for t, s in enumerate(shards):
        arr = np.asarray(s)
        if arr.ndim != 1 or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
            raise TypeError(
                f"shards[{t}] must be a 1-D integer array of record indices, got {describe(s)}"
            )
        out.append(arr.astype(np.int64))
    if not out:
        raise ValueError("shards is empty: at least one teacher is needed")
    for t, arr in enumerate(out):
        if arr.size == 0:
            raise ValueError(f"shards[{t}] is empty: every teacher needs at least one record")
        if arr.min() < 0 or arr.max() >= num_records:
            raise ValueError(
                f"shards[{t}] holds record indices outside [0, {num_records}) of the "
                "private split; was the partition made for another dataset?"
            )
    # Disjointness is what makes one record influence one teacher only (PATE's guarantee).
    counts = np.bincount(np.concatenate(out), minlength=num_records)
    if np.any(counts > 1):
        check_partition(out, num_records)  # raises PartitionError naming the overlap
        from pate.core.errors import PartitionError

        raise PartitionError("shards overlap: a record is assigned to more than one teacher")
    return out


def _check_seeds(seeds, num_teachers: int) -> list[int]:
    if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__len__"):
        raise TypeError(
            f"seeds must be a list of non-negative ints (Streams.teacher_seeds), got "
            f"{describe(seeds)}"
        )
    if len(seeds) != num_teachers:
        raise ValueError(
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
    """Train one teacher per shard (see the module docstring); returns an :class:`EnsembleResult`."""
    config = _checked_arguments(config, cluster, resume)
    shards = _check_shards(shards, len(data.private))
    config, data = _resolved(config, data, shards)
    seeds = _check_seeds(seeds, len(shards))
    num_classes = int(data.num_classes)
    y_priv = data.private.y
    if y_priv.min() < 0 or y_priv.max() >= num_classes:
        raise ValueError(f"private labels must lie in [0, {num_classes})")
    fingerprint = _fingerprint(config, data, shards, seeds)

    on_ray = cluster is not None and cluster.is_ray
    if config.is_sklearn:
        if on_ray:
            logger.warning(
                "teachers: scikit-learn teachers are fitted here with joblib (n_jobs), not on Ray"
            )
        result = train_sklearn(data, shards, seeds, config, fingerprint, out_dir, resume, progress)
        return dataclasses.replace(result, execution={"backend": "local", "n_jobs": config.n_jobs})
    device = _training_device(config, cluster if on_ray else None)
    trainer = _choose_trainer(config, data, device, peek_state(out_dir) if resume else None)
    state = open_out_dir(out_dir, fingerprint, resume)
    out = pathlib.Path(out_dir) if out_dir is not None else None
    job = EnsembleJob(data, shards, seeds, config, trainer, device, out)
    if on_ray:
        return _train_in_ray_session(job, cluster, state, fingerprint, progress)
    chunk_size = _chunk_size(state, config, data, len(shards), num_classes, device, None, None)
    return _train_here(job, _plan(job, state, fingerprint, chunk_size, ""), progress)


def _checked_arguments(config, cluster, resume) -> TeacherConfig:
    """The recipe (default :class:`TeacherConfig`), after the types of ``config``, ``cluster``
    and ``resume`` were checked."""
    config = TeacherConfig() if config is None else config
    if not isinstance(config, TeacherConfig):
        raise TypeError(f"config must be a TeacherConfig, got {describe(config)}")
    if cluster is not None and not isinstance(cluster, ClusterConfig):
        raise TypeError(f"cluster must be a ClusterConfig, got {describe(cluster)}")
    if not isinstance(resume, bool):
        raise TypeError(f"resume must be True or False, got {describe(resume)}")
    return config


def _training_device(config: TeacherConfig, ray_cluster: ClusterConfig | None) -> str:
    """The device the teachers train on: under Ray each task's (Ray gives each task its GPU,
    not this machine's), else this machine's."""
    if ray_cluster is None:
        return resolve_device(config.device)
    try:
        return ray_cluster.task_device(config.device)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"[cluster] {exc}") from None


def _train_in_ray_session(
    job: EnsembleJob, cluster: ClusterConfig, state, fingerprint, progress
) -> EnsembleResult:
    """The chunks planned for the cluster's task slots and trained on Ray."""
    with RaySession(cluster) as session:
        data = job.data
        chunk_size = _chunk_size(
            state,
            job.config,
            data,
            len(job.shards),
            int(data.num_classes),
            job.device,
            session,
            cluster,
        )
        where = f"on Ray ({session.slots} task slot(s))"
        return _train_on_ray(
            job, session, _plan(job, state, fingerprint, chunk_size, where), progress
        )


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
                raise ValueError(
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
    public_preds, eval_preds = _prediction_arrays(data, len(job.shards))
    completed = set(plan.state["completed"]) if out is not None else set()
    bar = tqdm(
        total=len(chunks) * config.epochs,
        file=sys.stderr,
        disable=not progress,
        desc="teachers",
        unit="epoch",
        dynamic_ncols=True,
    )
    started = time.perf_counter()
    try:
        for ci, members in enumerate(chunks):
            lo, hi = members[0], members[-1] + 1
            if ci in completed:
                _read_back_chunk(out, ci, lo, hi, public_preds, eval_preds)
                bar.update(config.epochs)
                continue
            bar.set_postfix_str(f"chunk {ci + 1}/{len(chunks)} ({len(members)} teachers)")
            outcome = _train_chunk_here(job, ci, members, held, x_pub, x_eval, on_epoch=bar.update)
            public_preds[lo:hi] = outcome.public_predictions
            eval_preds[lo:hi] = outcome.eval_predictions
            if out is not None:
                params = outcome.unit.stacked_params()
                _save_chunk(
                    out,
                    plan.state,
                    ci,
                    (lo, hi),
                    params,
                    public_preds[lo:hi],
                    eval_preds[lo:hi],
                    local=True,
                )
            del outcome
    finally:
        bar.close()
    seconds = time.perf_counter() - started
    result = _finished(job, public_preds, eval_preds, plan.chunk_size, seconds)
    execution = {"backend": "local", "torch_threads": torch.get_num_threads()}
    if job.trainer == "sequential":
        execution["step_threads"] = _sequential_step_threads(data, config, device)
    return dataclasses.replace(result, execution=execution)


def _finished(job: EnsembleJob, public_preds, eval_preds, chunk_size, seconds) -> EnsembleResult:
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


def _sequential_step_threads(data, config, device) -> int:
    """The threads a sequential teacher's step runs on (:func:`sequential.step_threads`)."""
    import torch

    from pate.teachers.schedule import init_teacher
    from pate.teachers.sequential import step_threads

    shape = tuple(data.input_shape)
    model = init_teacher(config.model, 0, input_shape=shape, num_classes=int(data.num_classes))
    count = step_threads(model, input_shape=shape, batch_size=config.batch_size, device=device)
    return count or torch.get_num_threads()


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


def _prediction_arrays(data, num_teachers: int) -> tuple[np.ndarray, np.ndarray]:
    """Empty (teachers, public) and (teachers, evaluation) int64 prediction arrays."""
    return (
        np.empty((num_teachers, len(data.public)), dtype=np.int64),
        np.empty((num_teachers, len(data.evaluation)), dtype=np.int64),
    )


def _read_back_chunk(out, ci, lo, hi, public_preds, eval_preds) -> None:
    """A finished chunk of a resumed run: its predictions read from ``chunk_NNNN.pt``."""
    saved = load_torch(out / f"chunk_{ci:04d}.pt")
    public_preds[lo:hi] = saved["public_predictions"].numpy()
    eval_preds[lo:hi] = saved["eval_predictions"].numpy()


def _train_chunk_here(job: EnsembleJob, ci, members, held, x_pub, x_eval, *, on_epoch):
    """Train chunk ``ci`` (teachers ``members``) here: on the held private split, or on its
    shards' rows read for it (dropped when it returns)."""
    import torch

    data, device, out = job.data, job.device, job.out
    member_shards = [job.shards[t] for t in members]
    if held is None:
        x_c, y_c, member_shards = _chunk_rows(data.private, member_shards)
        x_priv, y_priv = (torch.from_numpy(a).to(device) for a in (x_c, y_c))
        del x_c, y_c
    else:
        x_priv, y_priv = held
    task = ChunkTask(
        trainer=job.trainer,
        config=job.config,
        chunk=ci,
        seeds=[job.seeds[t] for t in members],
        shards=member_shards,
        input_shape=data.input_shape,
        num_classes=int(data.num_classes),
        device=device,
        resume_from=() if out is None else (out / PROGRESS, out / progress_name(ci)),
        checkpoint_path=None if out is None else out / PROGRESS,
    )
    return train_chunk(task, x_priv, y_priv, x_pub, x_eval, on_epoch=on_epoch)


def _chunk_rows(private, member_shards) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """(x, y) of the rows of a chunk's shards, one shard after another, and the shards
    re-indexed into them: each teacher sees the same records in the same order as in the whole
    split. ``private``: an :class:`~pate.teachers.data.ArraySplit` or :class:`FeatureRows`."""
    rows = np.concatenate(member_shards)
    bounds = np.cumsum([0] + [len(s) for s in member_shards])
    local = [np.arange(bounds[i], bounds[i + 1], dtype=np.int64) for i in range(len(member_shards))]
    x = private.take(rows) if isinstance(private, FeatureRows) else private.x[rows]
    return x, private.y[rows], local


def _chunk_size(state, config, data, num_teachers, num_classes, device, session, cluster) -> int:
    """Teachers per chunk: a resumed run keeps its own; under Ray ``teachers_per_task``, else
    ``chunk_size``, else from the cluster's task slots; locally ``chunk_size``, else from the
    free memory."""
    from pate.teachers.vectorized import per_teacher_bytes

    if state is not None and "chunk_size" in state:
        return int(state["chunk_size"])
    if session is not None:
        if cluster.teachers_per_task is not None:
            return min(cluster.teachers_per_task, num_teachers)
        return session.default_chunk_size(num_teachers, config.chunk_size)
    if config.chunk_size is not None:
        return choose_chunk_size(num_teachers, 1, config.chunk_size)
    per_teacher = per_teacher_bytes(
        config.model,
        input_shape=data.input_shape,
        num_classes=num_classes,
        batch_size=config.batch_size,
    )
    budget = (
        int(config.memory_budget_mb * 2**20)
        if config.memory_budget_mb is not None
        else available_bytes(device)
    )
    size = choose_chunk_size(num_teachers, per_teacher, budget)
    if isinstance(data.private, FeatureRows):  # the chunk's private rows are read for it
        shard_bytes = data.private.row_bytes * -(-len(data.private) // num_teachers)
        size = min(size, max(1, PRIVATE_CHUNK_BYTES // shard_bytes))
    return size


def _plan(job: EnsembleJob, state, fingerprint, chunk_size: int, where: str) -> ChunkPlan:
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


def _save_chunk(out, state, ci, teachers, params, public, evaluation, *, local: bool) -> None:
    """A finished chunk: ``chunk_NNNN.pt``, then ``state.json``, then its progress checkpoint
    goes (the same files and order whichever backend trained it). ``progress.pt`` is the chunk
    in training locally; under Ray it may be another chunk's (a run started locally): it goes
    when the stage ends."""
    import torch

    atomic_torch_save(
        out / f"chunk_{ci:04d}.pt",
        {
            "teachers": list(teachers),
            "params": params,
            "public_predictions": torch.from_numpy(np.ascontiguousarray(public)),
            "eval_predictions": torch.from_numpy(np.ascontiguousarray(evaluation)),
        },
    )
    state["completed"] = sorted(set(state["completed"]) | {ci})
    atomic_write_json(out / STATE, state)
    for name in ((PROGRESS,) if local else ()) + (progress_name(ci),):
        if (out / name).exists():
            os.unlink(out / name)


def _train_on_ray(
    job: EnsembleJob, session: RaySession, plan: ChunkPlan, progress
) -> EnsembleResult:
    """The chunks as Ray tasks (:class:`pate.teachers.cluster.RaySession`); the driver keeps
    ``state.json`` and writes every ``chunk_NNNN.pt``, in the local backend's format."""
    data, out, chunks = job.data, job.out, plan.chunks
    public_preds, eval_preds = _prediction_arrays(data, len(job.shards))
    completed = set(plan.state["completed"]) if out is not None else set()
    todo = []
    for ci, members in enumerate(chunks):
        if ci in completed:  # finished chunks are read back, never trained again
            _read_back_chunk(out, ci, members[0], members[-1] + 1, public_preds, eval_preds)
        else:
            todo.append(ci)
    workers: dict[int, dict] = {}

    def on_result(ci: int, result: dict) -> None:
        lo, hi = result["teachers"]
        public_preds[lo:hi] = result["public_predictions"]
        eval_preds[lo:hi] = result["eval_predictions"]
        if out is not None:
            params = result["params"]
            _save_chunk(
                out,
                plan.state,
                ci,
                (lo, hi),
                params,
                public_preds[lo:hi],
                eval_preds[lo:hi],
                local=False,
            )
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
    result = _finished(job, public_preds, eval_preds, plan.chunk_size, seconds)
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
        x_c, y_c, local = _chunk_rows(data.private, [job.shards[t] for t in members])
        spec = {
            "chunk": ci,
            "teachers": [members[0], members[-1] + 1],
            "seeds": [job.seeds[t] for t in members],
            "shards": local,
            "config": job.config,
            "trainer": job.trainer,
            "device": job.device,
            "threads": session.cluster.cpus_per_task,
            "input_shape": tuple(data.input_shape),
            "num_classes": int(data.num_classes),
            "out_dir": None if out is None else str(out.resolve()),
        }
        yield ci, spec, x_c, y_c
