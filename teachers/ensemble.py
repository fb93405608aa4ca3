"""Train a whole teacher ensemble: chunking, checkpoints, resume, predictions and accuracy.

Symbols
-------
``TeacherConfig``
    The training recipe (frozen dataclass): ``model`` ("auto", a zoo name, "module:factory",
    "sklearn:package.module.Class" or a scikit-learn estimator instance), ``epochs``,
    ``batch_size``, ``lr``, ``optimizer`` ("adam" | "adamw" | "sgd"), ``weight_decay``,
    ``momentum`` (SGD), ``augment`` ("auto" | "none" | "shift" | "flip" | "shift+flip"),
    ``label_smoothing``, ``trainer`` ("auto" | "vectorized" | "sequential"; "auto" = sequential
    on CPU, where it is the faster one, vectorized on CUDA when the model can be vmapped), ``device``
    ("auto" | "cpu" | "cuda" | "cuda:N"), ``chunk_size`` (teachers trained together; None =
    chosen from available memory), ``memory_budget_mb``, ``checkpoint`` ("epoch" | "chunk"),
    ``checkpoint_every_s`` (with "epoch": write a mid-chunk checkpoint only once this many seconds
    have passed since the chunk's last one; 0 = after every epoch. A GPU epoch of 250 teachers
    takes a fraction of a second while their checkpoint -- weights and optimiser moments, about
    0.6 GB for cnn28 -- takes longer to write), ``amp`` (bfloat16 autocast on CUDA), ``n_jobs`` (joblib workers for scikit-learn
    teachers), ``model_params`` (keyword arguments of a scikit-learn estimator), ``features``
    ("none" | "scatternet": the teachers learn on fixed ScatterNet features of the images,
    normalised with public statistics, :mod:`pate.teachers.features`; the model "auto" is then
    ``linear`` and there is no augmentation).
    ``TeacherConfig.resolved(data)`` fills the "auto" fields for a dataset: model ``cnn28`` /
    ``cnn32`` / ``cnn8`` for 28x28 / 32x32 / 8x8 images, ``mlp`` otherwise; augmentation
    ``none`` for Fashion-MNIST (measured best at 20 epochs, see the README), ``shift+flip`` for
    CIFAR-10, ``shift`` for MNIST / KMNIST / SVHN / digits, ``none`` for user data; ``epochs``
    None from the shard size (:func:`auto_epochs`: at least ``MIN_TEACHER_STEPS`` = 200 steps,
    20 to 200 epochs); ``standardize`` ("auto" | "public" | "none"): "auto" standardises the
    tabular inputs of zoo models with the public split's statistics
    (:mod:`pate.teachers.scaling`; a user's raw model on wildly scaled inputs is warned about
    instead). Default optimiser: Adam, lr 2e-3, batch 32.
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
``EnsembleResult``
    ``public_predictions`` (T, N_public), ``eval_predictions`` (T, N_eval), ``eval_labels``,
    ``teacher_accuracy`` (T,), ``plurality_accuracy``, ``num_classes`` and how it was trained;
    ``execution``: where (``backend`` and its resources; not in ``summary()`` nor metrics.json).
``plurality_accuracy(predictions, labels, *, num_classes)``
    Accuracy of the noiseless plurality vote (ties go to the lowest class index).
``load_teacher_models(out_dir)``
    The trained torch teachers of an ``out_dir`` as a list of ``nn.Module`` (eval mode).

Files in ``out_dir`` (normally ``<run_dir>/teachers``): ``state.json`` (recipe fingerprint,
seeds, chunking, completed chunks), ``progress.pt`` (the chunk in training, removed when it is
done; ``progress_NNNN.pt`` under Ray, one per chunk in training), ``chunk_NNNN.pt`` (torch: trained weights and predictions of a chunk, read back with
``weights_only=True``), ``chunk_NNNN.npz`` (scikit-learn, see below), ``predictions.npz``
(``public``, ``evaluation``, ``evaluation_labels``) and ``metrics.json``. No file in a run
directory is ever a pickle, and none is read in a way that can run code.

Messages (the trainer chosen, a fallback from vmap, ignored pickles) go to the ``logging``
logger ``"pate.teachers.ensemble"``, a child of ``"pate"`` (the CLI shows it on stderr);
progress bars are tqdm's, on stderr, off with ``progress=False``.

scikit-learn chunk checkpoints
------------------------------
A finished chunk of scikit-learn teachers is saved as ``chunk_NNNN.npz``: plain int64 arrays
``format`` (1), ``teachers`` ([lo, hi): the teacher indices of the chunk), ``seeds``,
``random_states`` (what each estimator was given; -1 when it has none), ``shard_sizes``,
``public_predictions`` (hi-lo, N_public) and ``eval_predictions`` (hi-lo, N_eval). A resumed run
reads it with ``np.load(..., allow_pickle=False)`` and checks every array against the run
(teacher range, seeds, shard sizes, shapes, labels in [0, num_classes)); a missing, damaged or
foreign chunk raises :class:`pate.teachers.checkpoint.CheckpointError` naming the file.

Why predictions and not the fitted estimators: a fitted scikit-learn estimator can only be
saved as a pickle (or joblib, also a pickle), and unpickling a file planted in a run directory
runs its payload; formats like skops still have to be told which types to trust. Nothing after
this stage needs the estimators: voting reads ``predictions.npz``, the student learns from the
released labels, and :func:`load_teacher_models` serves torch teachers only. An unfinished
chunk is simply fitted again on resume (each estimator's ``random_state`` comes from its
teacher's seed, so the resumed run equals an uninterrupted one). ``*.pkl`` files found in
``out_dir`` (planted, or left by a version that pickled its chunks) are never opened: a resume
logs a warning, and a chunk that exists only as ``.pkl`` raises :class:`CheckpointError`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import pathlib
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pate.analysis.errors import ConfigError
from pate.analysis.validation import (check_choice, check_int, check_nonnegative, check_positive,
                                      describe)
from pate.teachers.checkpoint import (CheckpointError, atomic_savez, atomic_torch_save,
                                      atomic_write_json, load_plain_npz, load_torch)
from pate.teachers.cluster import ClusterConfig, RaySession, progress_name, train_chunk
from pate.teachers.models import MODEL_NAMES, STUDENT_ONLY_MODELS, is_model_name
from pate.teachers.features import FEATURES, feature_data
from pate.teachers.optim import OPTIMIZERS
from pate.teachers.scaling import STANDARDIZE, scale_warning, standardized_data
from pate.teachers.schedule import AUGMENTATIONS

__all__ = ["TeacherConfig", "EnsembleResult", "train_teachers", "plurality_accuracy",
           "load_teacher_models", "resolve_device", "choose_chunk_size", "TRAINERS",
           "auto_epochs", "MIN_TEACHER_STEPS", "AUTO_EPOCHS_RANGE"]

TRAINERS = ("auto", "vectorized", "sequential")
_STATE, _PROGRESS = "state.json", "progress.pt"
_FORMAT_VERSION = 1
_SKLEARN_CHUNK_FORMAT = 1
_SKLEARN_CHUNK_KEYS = ("format", "teachers", "seeds", "random_states", "shard_sizes",
                       "public_predictions", "eval_predictions")
logger = logging.getLogger("pate.teachers.ensemble")  # shown by the pate CLI
# Fashion-MNIST: measured in the README (augmentation did not beat a higher learning rate there;
# horizontal flips hurt: shoes face one way in the test set). The others: common practice.
_AUTO_AUGMENT = {"fashion-mnist": "none", "cifar10": "shift+flip", "mnist": "shift",
                 "kmnist": "shift", "svhn": "shift", "digits": "shift"}


def _is_sklearn(model) -> bool:
    return (isinstance(model, str) and model.startswith("sklearn:")) or (
        not isinstance(model, str) and hasattr(model, "fit") and hasattr(model, "get_params"))


#: ``epochs=None``: at least this many optimiser steps per teacher (a teacher on 20 records and
#: batch 32 would otherwise train 20 steps) ...
MIN_TEACHER_STEPS = 200
#: ... and between these many epochs (20: the former fixed default, measured on Fashion-MNIST;
#: 200: a cap on the cost for tiny shards).
AUTO_EPOCHS_RANGE = (20, 200)


def auto_epochs(shard_size: float | None, *, batch_size: int = 32) -> int:
    """Epochs of ``epochs=None``: ``ceil(MIN_TEACHER_STEPS / steps per epoch)`` clipped to
    :data:`AUTO_EPOCHS_RANGE`, where a step is one batch of ``batch_size`` shard records
    (docs/teachers.md, "Training length"). ``shard_size`` None: the lower end (20)."""
    lo, hi = AUTO_EPOCHS_RANGE
    if shard_size is None:
        return lo
    steps = max(1, math.ceil(float(shard_size) / batch_size))
    return int(min(hi, max(lo, math.ceil(MIN_TEACHER_STEPS / steps))))


@dataclass(frozen=True)
class TeacherConfig:
    """Training recipe of the teachers (see the module docstring)."""

    model: Any = "auto"
    epochs: int | None = None
    batch_size: int = 32
    lr: float = 2e-3
    optimizer: str = "adam"
    weight_decay: float = 0.0
    momentum: float = 0.9
    augment: str = "auto"
    label_smoothing: float = 0.0
    trainer: str = "auto"
    device: str = "auto"
    chunk_size: int | None = None
    memory_budget_mb: float | None = None
    checkpoint: str = "epoch"
    checkpoint_every_s: float = 0.0
    amp: bool = True
    n_jobs: int = 1
    model_params: dict = field(default_factory=dict)
    features: str = "none"
    standardize: str = "auto"

    def __post_init__(self) -> None:
        m = self.model
        if isinstance(m, str):
            if not is_model_name(m):
                raise ValueError(f"model must be 'auto', one of {', '.join(MODEL_NAMES)}, "
                                 f"'module:factory' or 'sklearn:package.module.Class'; got {m!r}")
            if m in STUDENT_ONLY_MODELS:
                raise ValueError(f"model {m!r} is a student model: its ScatterNet front-end "
                                 "cannot be vectorized over teachers; for teachers set features "
                                 "= \"scatternet\" with model = \"scatter_cnn\" or \"linear\"")
        elif not _is_sklearn(m) and not callable(m):
            raise TypeError(f"model must be a name, a scikit-learn estimator or a factory "
                            f"returning a torch.nn.Module, got {describe(m)}")
        if self.epochs is not None:
            check_int(self.epochs, "epochs", minimum=1)
        check_choice(self.standardize, "standardize", STANDARDIZE)
        check_int(self.batch_size, "batch_size", minimum=1)
        check_positive(self.lr, "lr")
        check_choice(self.optimizer, "optimizer", OPTIMIZERS)
        check_nonnegative(self.weight_decay, "weight_decay")
        check_nonnegative(self.momentum, "momentum")
        check_choice(self.augment, "augment", ("auto",) + AUGMENTATIONS)
        ls = check_nonnegative(self.label_smoothing, "label_smoothing")
        if ls >= 1:
            raise ValueError(f"label_smoothing must be < 1, got {ls!r}")
        check_choice(self.trainer, "trainer", TRAINERS)
        _check_device_spelling(self.device)
        if self.chunk_size is not None:
            check_int(self.chunk_size, "chunk_size", minimum=1)
        if self.memory_budget_mb is not None:
            check_positive(self.memory_budget_mb, "memory_budget_mb")
        check_choice(self.checkpoint, "checkpoint", ("epoch", "chunk"))
        every = check_nonnegative(self.checkpoint_every_s, "checkpoint_every_s")
        if not math.isfinite(every):
            raise ValueError(f"checkpoint_every_s must be finite (0 = after every epoch), got {every!r}")
        if not isinstance(self.amp, bool):
            raise TypeError(f"amp must be True or False, got {describe(self.amp)}")
        check_int(self.n_jobs, "n_jobs")
        if self.n_jobs == 0:
            raise ValueError("n_jobs must be a positive number of workers or -1 (all cores), got 0")
        if not isinstance(self.model_params, dict):
            raise TypeError(f"model_params must be a dict, got {describe(self.model_params)}")
        check_choice(self.features, "features", FEATURES)
        if self.model_params and not _is_sklearn(m):
            raise ValueError("model_params only apply to scikit-learn models "
                             "(model='sklearn:package.module.Class')")

    @property
    def is_sklearn(self) -> bool:
        return _is_sklearn(self.model)

    def resolved(self, data, *, shard_size: float | None = None) -> "TeacherConfig":
        """A copy with ``model="auto"``, ``augment="auto"``, ``epochs=None`` (from
        ``shard_size``, the mean number of records per teacher: :func:`auto_epochs`) and
        ``standardize="auto"`` decided for ``data`` (public facts only: the input shape, the
        dataset's name, the shard size)."""
        shape = tuple(data.input_shape)
        model = self.model
        if model == "auto" and self.features != "none":
            model = "linear"  # on fixed features (Tramer & Boneh 2021): see pate.teachers.features
        elif model == "auto":
            if len(shape) == 3 and shape[1:] == (28, 28):
                model = "cnn28"
            elif len(shape) == 3 and shape[1:] == (32, 32):
                model = "cnn32"
            elif len(shape) == 3 and shape[1:] == (8, 8):
                model = "cnn8"
            else:
                model = "mlp"
        augment = self.augment
        if augment == "auto":
            augment = _AUTO_AUGMENT.get(data.name, "none") if len(shape) == 3 else "none"
        if _is_sklearn(model) or self.features != "none":
            augment = "none"  # image augmentations do not apply to features
        epochs = self.epochs
        if epochs is None:
            epochs = auto_epochs(shard_size, batch_size=self.batch_size)
        standardize = self.standardize
        if standardize == "auto":
            # zoo models on tabular inputs; a user's own model keeps its inputs (it may scale
            # them itself; pate.teachers.scaling.scale_warning says when it should)
            zoo = isinstance(model, str) and model in MODEL_NAMES
            standardize = "public" if zoo and len(shape) == 1 and self.features == "none" else "none"
        if standardize == "public" and (_is_sklearn(model) or len(shape) != 1):
            standardize = "none"  # images are in [0, 1]; a scikit-learn model has its Pipeline
        return dataclasses.replace(self, model=model, augment=augment, epochs=epochs,
                                   standardize=standardize)

    def fingerprint(self) -> dict:
        """The fields that determine the trained teachers (not device, chunking or I/O)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
             if f.name not in ("device", "chunk_size", "memory_budget_mb", "checkpoint",
                               "checkpoint_every_s", "n_jobs", "trainer")}
        if _is_sklearn(d["model"]) and not isinstance(d["model"], str):
            d["model"] = f"{type(d['model']).__module__}.{type(d['model']).__qualname__}"
            d["model_params"] = {k: repr(v) for k, v in sorted(self.model.get_params().items())}
        elif callable(d["model"]):  # a torch model factory given from Python
            from pate.teachers.models import factory_name

            d["model"] = factory_name(d["model"])
        if d.get("standardize") in ("none", "auto"):
            del d["standardize"]  # raw inputs: the fingerprint of runs made before the setting
        return json.loads(json.dumps(d, default=repr))


@dataclass(frozen=True)
class EnsembleResult:
    public_predictions: np.ndarray
    eval_predictions: np.ndarray
    eval_labels: np.ndarray
    teacher_accuracy: np.ndarray
    plurality_accuracy: float
    num_classes: int
    trainer: str
    device: str
    chunk_size: int
    train_seconds: float
    #: where it ran: ``backend`` ("local" | "ray") and its resources (not part of summary())
    execution: dict = field(default_factory=dict, compare=False)

    @property
    def num_teachers(self) -> int:
        return int(self.public_predictions.shape[0])

    def summary(self) -> dict:
        acc = self.teacher_accuracy
        return {"num_teachers": self.num_teachers, "num_classes": self.num_classes,
                "teacher_accuracy_mean": float(acc.mean()),
                "teacher_accuracy_std": float(acc.std()),
                "teacher_accuracy_min": float(acc.min()),
                "teacher_accuracy_max": float(acc.max()),
                "plurality_accuracy": float(self.plurality_accuracy),
                "trainer": self.trainer, "device": self.device, "chunk_size": self.chunk_size,
                "train_seconds": round(self.train_seconds, 2),
                "evaluation_size": int(self.eval_labels.shape[0]),
                "public_size": int(self.public_predictions.shape[1])}


def plurality_accuracy(predictions, labels, *, num_classes: int) -> float:
    """Accuracy of the (noiseless) plurality vote of ``predictions`` (T, N) against ``labels``."""
    from pate.votes import votes_from_predictions

    labels = np.asarray(labels)
    votes = votes_from_predictions(predictions, num_classes=num_classes)
    if labels.shape != (votes.shape[0],):
        raise ValueError(f"labels must have shape ({votes.shape[0]},), got {labels.shape}")
    return float(np.mean(votes.argmax(axis=1) == labels))


# ----------------------------------------------------------------------------- devices, memory

def _check_device_spelling(device) -> None:
    if not isinstance(device, str):
        raise TypeError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {describe(device)}")
    if device in ("auto", "cpu", "cuda"):
        return
    if device.startswith("cuda:") and device[5:].isdigit():
        return
    raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when a GPU is visible, else 'cpu'; a named GPU must exist."""
    import torch

    _check_device_spelling(device)
    if device == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return "cpu"
    if not torch.cuda.is_available():
        raise ValueError(f"device {device!r} was asked for but no CUDA GPU is available; "
                         "use --device cpu (or auto)")
    index = int(device[5:]) if ":" in device else 0
    count = torch.cuda.device_count()
    if index >= count:
        raise ValueError(f"device {device!r} does not exist: {count} CUDA device(s) visible")
    return f"cuda:{index}"


def _available_bytes(device: str) -> int:
    if device.startswith("cuda"):
        import torch

        free, _total = torch.cuda.mem_get_info(device)
        return int(free * 0.6)
    try:
        with open("/proc/meminfo") as fh:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in fh}
        avail = info.get("MemAvailable", 8 << 30)
    except OSError:  # not Linux
        avail = 8 << 30
    # CPU: at most half of what is free and at most 2 GiB, so that 250 Fashion-MNIST teachers
    # stay well under 4 GB of peak RSS (data included), on a machine shared with other jobs.
    return int(min(avail * 0.5, 2 << 30))


def choose_chunk_size(num_teachers: int, per_teacher: int, budget: int) -> int:
    """Teachers per chunk: as many as ``budget`` bytes hold, balanced across chunks."""
    fit = max(1, min(num_teachers, budget // max(per_teacher, 1)))
    chunks = math.ceil(num_teachers / fit)
    return math.ceil(num_teachers / chunks)


# ----------------------------------------------------------------------------- validation

def _check_shards(shards, num_records: int) -> list[np.ndarray]:
    from pate.partition import check_partition

    if isinstance(shards, (str, bytes)) or not hasattr(shards, "__len__"):
        raise TypeError(f"shards must be a list of index arrays (Partition.shards), got "
                        f"{describe(shards)}")
    out = []
    for t, s in enumerate(shards):
        arr = np.asarray(s)
        if arr.ndim != 1 or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
            raise TypeError(f"shards[{t}] must be a 1-D integer array of record indices, got "
                            f"{describe(s)}")
        out.append(arr.astype(np.int64))
    if not out:
        raise ValueError("shards is empty: at least one teacher is needed")
    for t, arr in enumerate(out):
        if arr.size == 0:
            raise ValueError(f"shards[{t}] is empty: every teacher needs at least one record")
        if arr.min() < 0 or arr.max() >= num_records:
            raise ValueError(f"shards[{t}] holds record indices outside [0, {num_records}) of the "
                             "private split; was the partition made for another dataset?")
    # Disjointness is what makes one record influence one teacher only (PATE's guarantee).
    counts = np.bincount(np.concatenate(out), minlength=num_records)
    if np.any(counts > 1):
        check_partition(out, num_records)  # raises PartitionError naming the overlap
        from pate.analysis.errors import PartitionError
        raise PartitionError("shards overlap: a record is assigned to more than one teacher")
    return out


def _check_seeds(seeds, num_teachers: int) -> list[int]:
    if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__len__"):
        raise TypeError(f"seeds must be a list of non-negative ints (Streams.teacher_seeds), got "
                        f"{describe(seeds)}")
    if len(seeds) != num_teachers:
        raise ValueError(f"seeds has {len(seeds)} entries but there are {num_teachers} shards; "
                         "pass one seed per teacher (Streams.teacher_seeds(num_teachers))")
    return [check_int(s, f"seeds[{i}]", minimum=0) for i, s in enumerate(seeds)]


def _digest(arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a, dtype=np.int64)
        h.update(len(a).to_bytes(8, "little"))
        h.update(a.tobytes())
    return h.hexdigest()


# ----------------------------------------------------------------------------- training

def train_teachers(data, shards, seeds, config: TeacherConfig | None = None, *,
                   out_dir: str | os.PathLike | None = None, resume: bool = False,
                   progress: bool = True, cluster: ClusterConfig | None = None) -> EnsembleResult:
    """Train one teacher per shard (see the module docstring); returns an :class:`EnsembleResult`."""
    config = TeacherConfig() if config is None else config
    if not isinstance(config, TeacherConfig):
        raise TypeError(f"config must be a TeacherConfig, got {describe(config)}")
    if cluster is not None and not isinstance(cluster, ClusterConfig):
        raise TypeError(f"cluster must be a ClusterConfig, got {describe(cluster)}")
    if not isinstance(resume, bool):
        raise TypeError(f"resume must be True or False, got {describe(resume)}")
    shards = _check_shards(shards, len(data.private))
    # the shard sizes are public facts of the partition (counts, not values)
    config = config.resolved(data, shard_size=float(np.mean([len(s) for s in shards])))
    data = feature_data(data, config.features)  # fixed filters, public statistics: no privacy cost
    if config.standardize == "public":
        data = standardized_data(data)  # public statistics: no privacy cost
    else:
        warning = scale_warning(data.public.x, config.model, role="teacher")
        if warning:
            logger.warning("teachers: %s", warning)
    seeds = _check_seeds(seeds, len(shards))
    num_teachers = len(shards)
    y_priv = data.private.y
    num_classes = int(data.num_classes)
    if y_priv.min() < 0 or y_priv.max() >= num_classes:
        raise ValueError(f"private labels must lie in [0, {num_classes})")

    fingerprint = {"format": _FORMAT_VERSION, "recipe": config.fingerprint(),
                   "dataset": data.name, "input_shape": list(data.input_shape),
                   "num_classes": num_classes, "num_teachers": num_teachers,
                   "shards_sha256": _digest(shards), "seeds_sha256": _digest([seeds]),
                   "public_size": len(data.public), "eval_size": len(data.evaluation)}

    if config.is_sklearn:
        if cluster is not None and cluster.is_ray:
            logger.warning("teachers: scikit-learn teachers are fitted here with joblib "
                           "(n_jobs), not on Ray")
        result = _train_sklearn(data, shards, seeds, config, fingerprint, out_dir, resume,
                                progress)
        return dataclasses.replace(result, execution={"backend": "local",
                                                      "n_jobs": config.n_jobs})

    import torch

    on_ray = cluster is not None and cluster.is_ray
    if on_ray:
        try:  # Ray gives each task its GPU: the device is the task's, not this machine's
            device = cluster.task_device(config.device)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"[cluster] {exc}") from None
    else:
        device = resolve_device(config.device)
    from pate.teachers.vectorized import vmap_support

    trainer = config.trainer
    saved_state = _peek_state(out_dir) if resume else None
    if saved_state is not None and saved_state.get("trainer") in ("vectorized", "sequential"):
        trainer = saved_state["trainer"]  # a resumed run keeps its trainer (same float rounding)
    if trainer == "auto" and torch.device(device).type == "cpu":
        # Measured on CPU (benchmarks/teachers_vmap.py): vmap's grouped-convolution backward is
        # slow there, and one nn.Module + torch.optim per teacher is faster.
        trainer = "sequential"
    if trainer in ("auto", "vectorized"):
        reason = vmap_support(config.model, input_shape=data.input_shape, num_classes=num_classes)
        if reason is not None:
            if trainer == "vectorized":
                raise ValueError(f"model {config.model!r} cannot be trained with the vectorized "
                                 f"trainer: {reason}; use trainer='sequential' (or 'auto')")
            logger.warning("teachers: model %r cannot be vmapped (%s); training teachers one "
                           "after another", config.model, reason)
            trainer = "sequential"
        else:
            trainer = "vectorized"

    state = _open_out_dir(out_dir, fingerprint, resume)
    out = pathlib.Path(out_dir) if out_dir is not None else None
    if on_ray:
        with RaySession(cluster) as session:
            chunk_size = _chunk_size(state, config, data, num_teachers, num_classes, device,
                                     session, cluster)
            chunks, state = _plan(out, state, fingerprint, chunk_size, trainer, seeds, config,
                                  device, f"on Ray ({session.slots} task slot(s))")
            return _train_on_ray(data, shards, seeds, config, session, trainer, device,
                                 chunk_size, chunks, state, out, progress)
    chunk_size = _chunk_size(state, config, data, num_teachers, num_classes, device, None, None)
    chunks, state = _plan(out, state, fingerprint, chunk_size, trainer, seeds, config, device,
                          "")

    x_priv = torch.from_numpy(data.private.x).to(device)
    y_priv_t = torch.from_numpy(y_priv).to(device)
    x_pub = torch.from_numpy(data.public.x).to(device)
    x_eval = torch.from_numpy(data.evaluation.x).to(device)
    public_preds = np.empty((num_teachers, len(data.public)), dtype=np.int64)
    eval_preds = np.empty((num_teachers, len(data.evaluation)), dtype=np.int64)
    completed = set(state["completed"]) if out is not None else set()
    from tqdm.auto import tqdm

    bar = tqdm(total=len(chunks) * config.epochs, file=sys.stderr, disable=not progress,
               desc="teachers", unit="epoch", dynamic_ncols=True)
    started = time.perf_counter()
    try:
        for ci, members in enumerate(chunks):
            lo, hi = members[0], members[-1] + 1
            if ci in completed:
                saved = load_torch(out / f"chunk_{ci:04d}.pt")
                public_preds[lo:hi] = saved["public_predictions"].numpy()
                eval_preds[lo:hi] = saved["eval_predictions"].numpy()
                bar.update(config.epochs)
                continue
            bar.set_postfix_str(f"chunk {ci + 1}/{len(chunks)} ({len(members)} teachers)")
            outcome = train_chunk(
                trainer, config, ci, [seeds[t] for t in members], [shards[t] for t in members],
                x_priv, y_priv_t, x_pub, x_eval, input_shape=data.input_shape,
                num_classes=num_classes, device=device,
                resume_from=[] if out is None else [out / _PROGRESS, out / progress_name(ci)],
                checkpoint_path=None if out is None else out / _PROGRESS, on_epoch=bar.update,
                save=atomic_torch_save)
            public_preds[lo:hi] = outcome.public_predictions
            eval_preds[lo:hi] = outcome.eval_predictions
            if out is not None:
                _save_chunk(out, state, ci, lo, hi, outcome.unit.stacked_params(),
                            public_preds[lo:hi], eval_preds[lo:hi], local=True)
            del outcome
    finally:
        bar.close()
    seconds = time.perf_counter() - started
    result = _finish(data, public_preds, eval_preds, num_classes, trainer, device, chunk_size,
                     seconds, out, config)
    return dataclasses.replace(result, execution={"backend": "local",
                                                  "torch_threads": torch.get_num_threads()})


def _chunk_size(state, config, data, num_teachers, num_classes, device, session,
                cluster) -> int:
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
    per_teacher = per_teacher_bytes(config.model, input_shape=data.input_shape,
                                    num_classes=num_classes, batch_size=config.batch_size)
    budget = (int(config.memory_budget_mb * 2 ** 20) if config.memory_budget_mb is not None
              else _available_bytes(device))
    return choose_chunk_size(num_teachers, per_teacher, budget)


def _plan(out, state, fingerprint, chunk_size, trainer, seeds, config, device, where):
    """The chunks (lists of teacher indices) and the saved state (``state.json`` written)."""
    num_teachers = len(seeds)
    chunks = [list(range(i, min(i + chunk_size, num_teachers)))
              for i in range(0, num_teachers, chunk_size)]
    if out is not None:
        state = dict(state or {}, fingerprint=fingerprint, chunk_size=chunk_size,
                     num_chunks=len(chunks), trainer=trainer, seeds=seeds,
                     completed=(state or {}).get("completed", []))
        atomic_write_json(out / _STATE, state)
    done = len((state or {}).get("completed", []))
    logger.info("teachers: %d %s teachers on %s, %s trainer, %d chunk(s) of up to %d%s%s",
                num_teachers, config.model, device, trainer, len(chunks), chunk_size,
                f" {where}" if where else "", f" ({done} already done)" if done else "")
    return chunks, state


def _save_chunk(out, state, ci, lo, hi, params, public, evaluation, *, local: bool) -> None:
    """A finished chunk: ``chunk_NNNN.pt``, then ``state.json``, then its progress checkpoint
    goes (the same files and order whichever backend trained it). ``progress.pt`` is the chunk
    in training locally; under Ray it may be another chunk's (a run started locally): it goes
    when the stage ends."""
    import torch

    atomic_torch_save(out / f"chunk_{ci:04d}.pt", {
        "teachers": [lo, hi], "params": params,
        "public_predictions": torch.from_numpy(np.ascontiguousarray(public)),
        "eval_predictions": torch.from_numpy(np.ascontiguousarray(evaluation))})
    state["completed"] = sorted(set(state["completed"]) | {ci})
    atomic_write_json(out / _STATE, state)
    for name in ((_PROGRESS,) if local else ()) + (progress_name(ci),):
        if (out / name).exists():
            os.unlink(out / name)


def _train_on_ray(data, shards, seeds, config, session, trainer, device, chunk_size, chunks,
                  state, out, progress) -> EnsembleResult:
    """The chunks as Ray tasks (:class:`pate.teachers.cluster.RaySession`); the driver keeps
    ``state.json`` and writes every ``chunk_NNNN.pt``, in the local backend's format."""
    num_teachers = len(shards)
    num_classes = int(data.num_classes)
    public_preds = np.empty((num_teachers, len(data.public)), dtype=np.int64)
    eval_preds = np.empty((num_teachers, len(data.evaluation)), dtype=np.int64)
    completed = set(state["completed"]) if out is not None else set()
    jobs = []
    for ci, members in enumerate(chunks):
        lo, hi = members[0], members[-1] + 1
        if ci in completed:  # finished chunks are read back, never trained again
            saved = load_torch(out / f"chunk_{ci:04d}.pt")
            public_preds[lo:hi] = saved["public_predictions"].numpy()
            eval_preds[lo:hi] = saved["eval_predictions"].numpy()
            continue
        # the task receives only its chunk's private rows (the shards re-indexed into them)
        rows = np.concatenate([shards[t] for t in members])
        bounds = np.cumsum([0] + [len(shards[t]) for t in members])
        local = [np.arange(bounds[i], bounds[i + 1], dtype=np.int64) for i in range(len(members))]
        spec = {"chunk": ci, "teachers": [lo, hi], "seeds": [seeds[t] for t in members],
                "shards": local, "config": config, "trainer": trainer, "device": device,
                "threads": session.cluster.cpus_per_task, "input_shape": tuple(data.input_shape),
                "num_classes": num_classes, "out_dir": None if out is None else str(out.resolve())}
        jobs.append((ci, spec, data.private.x[rows], data.private.y[rows]))
    workers: dict[int, dict] = {}

    def on_result(ci: int, result: dict) -> None:
        lo, hi = result["teachers"]
        public_preds[lo:hi] = result["public_predictions"]
        eval_preds[lo:hi] = result["eval_predictions"]
        if out is not None:
            _save_chunk(out, state, ci, lo, hi, result["params"], public_preds[lo:hi],
                        eval_preds[lo:hi], local=False)
        workers[ci] = result["worker"]

    started = time.perf_counter()
    session.run(jobs, data.public.x, data.evaluation.x, on_result, progress=progress,
                done=len(chunks) - len(jobs), total=len(chunks))
    seconds = time.perf_counter() - started
    if out is not None and (out / _PROGRESS).exists():
        os.unlink(out / _PROGRESS)  # a local run's, for a chunk finished above
    result = _finish(data, public_preds, eval_preds, num_classes, trainer, device, chunk_size,
                     seconds, out, config)
    execution = dict(session.resources(), teachers_per_task=chunk_size, num_chunks=len(chunks),
                     chunks_trained=len(jobs), chunks_reused=len(chunks) - len(jobs),
                     workers={str(k): v for k, v in sorted(workers.items())})
    return dataclasses.replace(result, execution=execution)


def _peek_state(out_dir):
    if out_dir is None:
        return None
    try:
        return json.loads((pathlib.Path(out_dir) / _STATE).read_text())
    except (OSError, ValueError):
        return None


def _open_out_dir(out_dir, fingerprint, resume):
    """Create ``out_dir`` or check it for a resume; returns the saved state (or None)."""
    if out_dir is None:
        if resume:
            raise ValueError("resume=True needs out_dir (the directory with the checkpoints)")
        return None
    out = pathlib.Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out_dir {str(out)!r} exists and is not a directory")
    state_path = out / _STATE
    if state_path.exists():
        if not resume:
            raise ConfigError(f"{str(out)!r} already holds teachers (or a run in progress); pass "
                              "--resume (resume=True) to continue it, or use a new --run-dir")
        try:
            state = json.loads(state_path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{str(state_path)!r} is unreadable ({exc}); delete {str(out)!r} "
                              "to train from scratch") from None
        saved = state.get("fingerprint", {})
        if saved != fingerprint:
            diff = sorted(k for k in set(saved) | set(fingerprint) if saved.get(k) != fingerprint.get(k))
            if "recipe" in diff:
                a, b = saved.get("recipe", {}), fingerprint["recipe"]
                diff += [f"recipe.{k}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
            raise ConfigError(f"cannot resume {str(out)!r}: it was trained with different "
                              f"settings ({', '.join(diff)}); rerun with the original settings, "
                              "or use a new --run-dir")
        return state
    out.mkdir(parents=True, exist_ok=True)
    return None


def _finish(data, public_preds, eval_preds, num_classes, trainer, device, chunk_size, seconds,
            out, config) -> EnsembleResult:
    y_eval = data.evaluation.y
    acc = (eval_preds == y_eval[None, :]).mean(axis=1)
    result = EnsembleResult(public_predictions=public_preds, eval_predictions=eval_preds,
                            eval_labels=y_eval.copy(), teacher_accuracy=acc,
                            plurality_accuracy=plurality_accuracy(eval_preds, y_eval,
                                                                  num_classes=num_classes),
                            num_classes=num_classes, trainer=trainer, device=device,
                            chunk_size=chunk_size, train_seconds=seconds)
    if out is not None:
        atomic_savez(out / "predictions.npz", public=public_preds, evaluation=eval_preds,
                     evaluation_labels=y_eval)
        metrics = dict(result.summary(), teacher_accuracy=[round(float(a), 6) for a in acc],
                       recipe=config.fingerprint(), dataset=data.name)
        atomic_write_json(out / "metrics.json", metrics)
    return result


def _train_sklearn(data, shards, seeds, config, fingerprint, out_dir, resume, progress):
    from tqdm.auto import tqdm

    from pate.teachers.sequential import (fit_sklearn_teachers, make_sklearn_estimator,
                                          sklearn_predict, sklearn_random_states)

    estimator = (make_sklearn_estimator(config.model, config.model_params)
                 if isinstance(config.model, str) else config.model)
    num_teachers = len(shards)
    y = data.private.y
    for t, shard in enumerate(shards):  # checked before any fitting
        if len(np.unique(y[shard])) < 2:
            raise ValueError(f"teacher {t}'s shard has a single class ({int(y[shard][0])}); "
                             "scikit-learn classifiers need at least two. Use a stratified "
                             "partition or fewer teachers")
    state = _open_out_dir(out_dir, fingerprint, resume)
    chunk_size = int(state["chunk_size"]) if state and "chunk_size" in state else (
        min(config.chunk_size or 25, num_teachers))
    chunks = [list(range(i, min(i + chunk_size, num_teachers)))
              for i in range(0, num_teachers, chunk_size)]
    out = pathlib.Path(out_dir) if out_dir is not None else None
    if out is not None:
        state = dict(state or {}, fingerprint=fingerprint, chunk_size=chunk_size,
                     num_chunks=len(chunks), trainer="sklearn", seeds=seeds,
                     completed=(state or {}).get("completed", []))
        atomic_write_json(out / _STATE, state)
        _warn_about_pickles(out)
    public_preds = np.empty((num_teachers, len(data.public)), dtype=np.int64)
    eval_preds = np.empty((num_teachers, len(data.evaluation)), dtype=np.int64)
    started = time.perf_counter()
    with tqdm(total=num_teachers, file=sys.stderr, disable=not progress, desc="teachers",
              unit="teacher", dynamic_ncols=True) as bar:
        for ci, members in enumerate(chunks):
            lo, hi = members[0], members[-1] + 1
            expected = {"teachers": np.array([lo, hi], dtype=np.int64),
                        "seeds": np.asarray(seeds[lo:hi], dtype=np.int64),
                        "shard_sizes": np.array([len(shards[t]) for t in members], dtype=np.int64)}
            path = out / f"chunk_{ci:04d}.npz" if out is not None else None
            if out is not None and ci in state["completed"]:
                saved = _load_sklearn_chunk(path, expected, num_classes=int(data.num_classes),
                                            n_public=len(data.public),
                                            n_eval=len(data.evaluation))
            else:
                fitted = fit_sklearn_teachers(estimator, data.private.x, y,
                                              [shards[t] for t in members],
                                              [seeds[t] for t in members], n_jobs=config.n_jobs)
                saved = dict(expected, format=np.array(_SKLEARN_CHUNK_FORMAT, dtype=np.int64),
                             random_states=sklearn_random_states(fitted),
                             public_predictions=sklearn_predict(fitted, data.public.x),
                             eval_predictions=sklearn_predict(fitted, data.evaluation.x))
                del fitted  # kept in memory only: estimators are never written (no pickles)
                if out is not None:
                    atomic_savez(path, **{k: np.asarray(saved[k], dtype=np.int64)
                                          for k in _SKLEARN_CHUNK_KEYS})
                    state["completed"] = sorted(set(state["completed"]) | {ci})
                    atomic_write_json(out / _STATE, state)
            public_preds[lo:hi] = saved["public_predictions"]
            eval_preds[lo:hi] = saved["eval_predictions"]
            bar.update(hi - lo)
    bad = (public_preds < 0) | (public_preds >= data.num_classes)
    if np.any(bad):
        raise ValueError(f"a scikit-learn teacher predicted labels outside [0, {data.num_classes})")
    return _finish(data, public_preds, eval_preds, int(data.num_classes), "sklearn", "cpu",
                   chunk_size, time.perf_counter() - started, out, config)


def _warn_about_pickles(out: pathlib.Path) -> None:
    """Log ``*.pkl`` files in ``out`` (never opened: unpickling can run code)."""
    stray = sorted(p.name for p in out.glob("*.pkl"))
    if stray:
        logger.warning("ignoring %s in %s: pate-learn never reads pickles from a run directory "
                       "(they can run code); delete them if you did not put them there",
                       ", ".join(stray), out)


def _load_sklearn_chunk(path: pathlib.Path, expected: dict, *, num_classes: int, n_public: int,
                        n_eval: int) -> dict:
    """Read a finished scikit-learn chunk (plain arrays, no pickles) and check it fits the run."""
    remedy = (f"delete {str(path.parent)!r} (or use a new --run-dir) and train the teachers "
              "again")
    legacy = path.with_suffix(".pkl")
    if not path.exists() and legacy.exists():
        raise CheckpointError(
            f"checkpoint {str(path)!r} is missing; {legacy.name} next to it is a pickle (written "
            "by an older pate-learn, or planted) and is never loaded, because unpickling can run "
            f"code; {remedy}", path=path)
    arrays = load_plain_npz(path, keys=_SKLEARN_CHUNK_KEYS, remedy=remedy)

    def fail(why: str) -> CheckpointError:
        return CheckpointError(f"checkpoint {str(path)!r} does not belong to this run ({why}); "
                               f"{remedy}", path=path)

    for k, a in arrays.items():
        if a.dtype.kind not in "iu":
            raise fail(f"array {k!r} has dtype {a.dtype}, expected integers")
    if arrays["format"].shape != () or int(arrays["format"]) != _SKLEARN_CHUNK_FORMAT:
        raise fail(f"format {arrays['format'].tolist()!r}, expected {_SKLEARN_CHUNK_FORMAT}")
    for k, want in expected.items():
        if not np.array_equal(arrays[k], want):
            raise fail(f"{k} {arrays[k].tolist()!r}, expected {want.tolist()!r}")
    size = int(expected["seeds"].shape[0])
    shapes = {"random_states": (size,), "public_predictions": (size, n_public),
              "eval_predictions": (size, n_eval)}
    for k, shape in shapes.items():
        if arrays[k].shape != shape:
            raise fail(f"{k} has shape {arrays[k].shape}, expected {shape}")
    for k in ("public_predictions", "eval_predictions"):
        a = arrays[k]
        if a.size and (a.min() < 0 or a.max() >= num_classes):
            raise fail(f"{k} holds labels outside [0, {num_classes})")
    return {k: a.astype(np.int64) for k, a in arrays.items()}


def load_teacher_models(out_dir) -> list:
    """The trained torch teachers saved in ``out_dir``, in teacher order, in eval mode."""
    from pate.teachers.schedule import init_teacher

    out = pathlib.Path(out_dir)
    try:
        state = json.loads((out / _STATE).read_text())
    except (OSError, ValueError) as exc:
        raise FileNotFoundError(f"no trained teachers in {str(out)!r} ({exc}); run "
                                "`pate train-teachers` first") from None
    fp = state["fingerprint"]
    if state.get("trainer") == "sklearn" or len(state.get("completed", [])) != state["num_chunks"]:
        raise ValueError(f"{str(out)!r} does not hold a finished torch ensemble")
    models = []
    for ci in range(state["num_chunks"]):
        saved = load_torch(out / f"chunk_{ci:04d}.pt")
        lo, hi = saved["teachers"]
        for i in range(hi - lo):
            net = init_teacher(fp["recipe"]["model"], 0, input_shape=tuple(fp["input_shape"]),
                               num_classes=fp["num_classes"])
            net.load_state_dict({k: v[i] for k, v in saved["params"].items()})
            models.append(net.eval())
    return models
