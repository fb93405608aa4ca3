"""Where the teachers are trained: the work of one chunk, and the backends that run the chunks.

More: docs/cluster.md, "pate.teachers.cluster".
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import pathlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.validation import check_choice, check_int, check_nonnegative, describe
from pate.teachers.ensemble_dir import PROGRESS
from pate.teachers.errors import ConfigError

__all__ = [
    "ClusterConfig",
    "BACKENDS",
    "ChunkTask",
    "train_chunk",
    "ChunkOutcome",
    "RaySession",
    "progress_name",
]

BACKENDS = ("local", "ray")
TASK_NAME = "pate-teachers-chunk"  # a running task's process title is "ray::pate-teachers-chunk"


def progress_name(chunk: int) -> str:
    """The mid-chunk checkpoint of ``chunk`` written by a Ray task."""
    return f"progress_{chunk:04d}.pt"


@dataclass(frozen=True)
class ClusterConfig:
    """Where the teachers' chunks run (docs/cluster.md)."""

    backend: str = "local"
    address: str | None = None
    num_cpus: int | None = None
    cpus_per_task: int = 1
    gpus_per_task: float = 0.0
    teachers_per_task: int | None = None
    max_retries: int = 3

    def __post_init__(self) -> None:
        check_choice(self.backend, "backend", BACKENDS)
        if self.address is not None and (not isinstance(self.address, str) or not self.address):
            raise InputError(
                f'address must be "auto" or "HOST:PORT" of a running Ray cluster '
                f"(or unset: start a local Ray), got {self.address!r}"
            )
        if self.num_cpus is not None:
            check_int(self.num_cpus, "num_cpus", minimum=1)
            if self.address is not None:
                raise InputError(
                    "num_cpus sizes a local Ray started by pate-learn; it does not "
                    f"apply with address = {self.address!r} (the cluster's nodes "
                    "declare their own CPUs)"
                )
        check_int(self.cpus_per_task, "cpus_per_task", minimum=1)
        gpus = check_nonnegative(self.gpus_per_task, "gpus_per_task")
        if not math.isfinite(gpus) or (gpus > 1 and gpus != int(gpus)):
            raise InputError(
                f"gpus_per_task must be a fraction of one GPU or a whole number of "
                f"GPUs, got {self.gpus_per_task!r}"
            )
        if self.teachers_per_task is not None:
            check_int(self.teachers_per_task, "teachers_per_task", minimum=1)
        check_int(self.max_retries, "max_retries", minimum=0)
        if self.num_cpus is not None and self.cpus_per_task > self.num_cpus:
            raise InputError(
                f"cpus_per_task ({self.cpus_per_task}) exceeds num_cpus "
                f"({self.num_cpus}): no task could ever run"
            )

    @property
    def is_ray(self) -> bool:
        return self.backend == "ray"

    def task_device(self, device: str) -> str:
        """The torch device of a Ray task for the teachers' ``device`` setting."""
        if not isinstance(device, str):
            raise InputTypeError(f"device must be a string, got {describe(device)}")
        if device == "auto":
            return "cuda" if self.gpus_per_task > 0 else "cpu"
        if device == "cpu":
            if self.gpus_per_task > 0:
                raise InputError(
                    f"gpus_per_task = {self.gpus_per_task:g} reserves GPUs for "
                    'every task but device = "cpu"; set gpus_per_task = 0 or '
                    'device = "auto"'
                )
            return "cpu"
        if self.gpus_per_task <= 0:
            raise InputError(
                f"device = {device!r} under Ray needs gpus_per_task > 0 (Ray gives "
                'each task its GPU); set gpus_per_task, or device = "auto"'
            )
        return "cuda"  # Ray makes the task's GPU(s) the visible ones


# ----------------------------------------------------------------------------- one chunk


@dataclass
class ChunkOutcome:
    unit: Any  # the trained SequentialChunk / VectorizedChunk
    public_predictions: np.ndarray
    eval_predictions: np.ndarray
    start_epoch: int  # > 0: continued from a checkpoint


@dataclass(frozen=True)
class ChunkTask:
    """What one chunk of teachers trains, whichever backend runs it: the ``trainer``
    ("vectorized" | "sequential"), the recipe ``config``, the ``chunk``'s index, its teachers'
    ``seeds`` and ``shards`` (indices into the rows the chunk is given), ``input_shape``,
    ``num_classes`` and ``device``; the checkpoints it may continue from (``resume_from``, the
    first that belongs to the chunk) and the one it writes (``checkpoint_path``; None: none)."""

    trainer: str
    config: Any
    chunk: int
    seeds: list
    shards: list
    input_shape: tuple
    num_classes: int
    device: str
    resume_from: tuple = ()
    checkpoint_path: pathlib.Path | None = None


def train_chunk(
    task: ChunkTask, x, y, x_public, x_eval, *, on_epoch: Callable[[int], None] | None = None
) -> ChunkOutcome:
    """Train one chunk of teachers (docs/cluster.md); ``on_epoch(n)`` counts epochs;
    checkpoints are written atomically."""
    from pate.teachers.checkpoint import atomic_torch_save, load_torch

    config, checkpoint_path = task.config, task.checkpoint_path
    if task.trainer == "vectorized":
        from pate.teachers.vectorized import VectorizedChunk as cls
    else:
        from pate.teachers.sequential import SequentialChunk as cls
    unit = cls(
        config,
        list(task.seeds),
        list(task.shards),
        x,
        y,
        input_shape=task.input_shape,
        num_classes=task.num_classes,
        device=task.device,
    )
    start_epoch = 0
    for path in task.resume_from:
        if path is not None and pathlib.Path(path).exists():
            prog = load_torch(path)
            if int(prog["chunk"]) == task.chunk:
                unit.load_state_dict(prog["state"])
                start_epoch = int(prog["epochs_done"])
                if on_epoch is not None:
                    on_epoch(start_epoch)
                break
    last_saved = time.perf_counter()
    for epoch in range(start_epoch, config.epochs):
        unit.train_epoch(epoch)
        if on_epoch is not None:
            on_epoch(1)
        if (
            checkpoint_path is not None
            and config.checkpoint == "epoch"
            and epoch + 1 < config.epochs
            and time.perf_counter() - last_saved >= config.checkpoint_every_s
        ):
            atomic_torch_save(
                checkpoint_path,
                {"chunk": task.chunk, "epochs_done": epoch + 1, "state": unit.state_dict()},
            )
            last_saved = time.perf_counter()
    return ChunkOutcome(unit, unit.predict(x_public), unit.predict(x_eval), start_epoch)


# ----------------------------------------------------------------------------- Ray


def _chunk_task(spec: dict, x, y, x_public, x_eval) -> dict:
    """One Ray task: train ``spec["task"]`` (a :class:`ChunkTask`) and return its weights and
    predictions."""
    import socket
    import warnings

    import torch

    torch.set_num_threads(int(spec["threads"]))  # the task's CPUs (as the local run's threads)
    started = time.perf_counter()
    with warnings.catch_warnings():  # arrays from the object store are read-only; never written
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        tensors = [torch.from_numpy(a).to(spec["task"].device) for a in (x, y, x_public, x_eval)]
    out = pathlib.Path(spec["out_dir"]) if spec["out_dir"] is not None else None
    shared = out is not None and out.is_dir()  # the run directory is on shared storage
    ckpt = out / progress_name(spec["task"].chunk) if shared else None
    # a run started locally may have left this chunk half-trained in progress.pt
    resume_from = (ckpt, out / PROGRESS) if shared else ()
    task = dataclasses.replace(spec["task"], resume_from=resume_from, checkpoint_path=ckpt)
    outcome = train_chunk(task, *tensors)
    return {
        "teachers": list(spec["teachers"]),
        "params": outcome.unit.stacked_params(),
        "public_predictions": outcome.public_predictions,
        "eval_predictions": outcome.eval_predictions,
        "worker": {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "resumed_from_epoch": outcome.start_epoch,
            "checkpoints": "shared" if shared else "none",
            "seconds": round(time.perf_counter() - started, 3),
        },
    }


class RaySession:
    """Ray for one teachers stage (docs/cluster.md)."""

    def __init__(self, cluster: ClusterConfig) -> None:
        if not cluster.is_ray:
            raise InputError('RaySession needs a ClusterConfig with backend = "ray"')
        self.cluster = cluster
        self.started = False
        self._ray = None

    def __enter__(self) -> RaySession:
        try:
            import ray
        except ImportError as exc:
            raise ConfigError(
                f'[cluster] backend = "ray" needs Ray ({exc}); install it with '
                "pip install 'pate-learn[ray]'"
            ) from None
        self._ray = ray
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if self.cluster.address is not None:
                ray.init(address=self.cluster.address, **kwargs)
            else:
                ray.init(num_cpus=self.cluster.num_cpus, **kwargs)
            self.started = True
        total = ray.cluster_resources()
        cpus, gpus = float(total.get("CPU", 0)), float(total.get("GPU", 0))
        c = self.cluster
        if c.cpus_per_task > cpus or c.gpus_per_task > gpus:
            self.__exit__(None, None, None)
            raise ConfigError(
                f"[cluster] a task asks for cpus_per_task = {c.cpus_per_task} and gpus_per_task "
                f"= {c.gpus_per_task:g}, but the Ray cluster has {cpus:g} CPUs and {gpus:g} "
                "GPUs: no task could run; lower them or add nodes"
            )
        by_cpu = cpus // c.cpus_per_task
        self.slots = int(min(by_cpu, gpus // c.gpus_per_task) if c.gpus_per_task > 0 else by_cpu)
        self.slots = max(self.slots, 1)
        self._total = {
            "CPU": cpus,
            "GPU": gpus,
            "nodes": sum(1 for n in ray.nodes() if n.get("Alive")),
        }
        return self

    def __exit__(self, *exc) -> None:
        if self.started and self._ray is not None:
            self._ray.shutdown()
            self.started = False

    def default_chunk_size(self, num_teachers: int, cap: int | None) -> int:
        """``teachers_per_task`` when unset: about four chunks per slot on CPUs (balance, short
        retries), one per slot on GPUs (the vectorized trainer wants many teachers at once)."""
        per_slot = 1 if self.cluster.gpus_per_task > 0 else 4
        size = math.ceil(num_teachers / (per_slot * self.slots))
        return max(1, min(size, cap) if cap is not None else size)

    def resources(self) -> dict:
        c = self.cluster
        return {
            "backend": "ray",
            "address": c.address or "local",
            "cluster": dict(self._total),
            "slots": self.slots,
            "cpus_per_task": c.cpus_per_task,
            "gpus_per_task": c.gpus_per_task,
            "max_retries": c.max_retries,
        }

    def run(
        self,
        jobs,
        x_public,
        x_eval,
        on_result: Callable[[int, dict], None],
        *,
        progress: bool,
        done: int,
        total: int,
    ) -> None:
        """Submit ``jobs`` (an iterable of ``(chunk, spec, x_rows, y_rows)``, read one at a
        time: at most two tasks per slot are submitted and not finished, so the driver and
        the object store hold the private rows of those chunks only), hand each finished
        chunk's result to ``on_result(chunk, result)`` (on the driver, as they finish); the
        progress bar counts ``done`` of ``total`` chunks."""
        from tqdm.auto import tqdm

        ray = self._ray
        c = self.cluster
        remote = ray.remote(_chunk_task).options(
            name=TASK_NAME,
            num_cpus=c.cpus_per_task,
            num_gpus=c.gpus_per_task,
            max_retries=c.max_retries,
            retry_exceptions=False,
        )
        pub_ref, eval_ref = ray.put(x_public), ray.put(x_eval)
        jobs = iter(jobs)
        pending: dict = {}

        def submit_next() -> None:  # the next chunk's rows are built only now
            for chunk, spec, x_rows, y_rows in itertools.islice(jobs, 1):
                pending[remote.remote(spec, x_rows, y_rows, pub_ref, eval_ref)] = chunk

        for _ in range(2 * self.slots):  # in flight: one running per slot, one ready to start
            submit_next()
        bar = tqdm(
            total=total,
            initial=done,
            file=sys.stderr,
            disable=not progress,
            desc="teachers",
            unit="chunk",
            dynamic_ncols=True,
        )
        bar.set_postfix_str(f"ray, {self.slots} task slot(s)")
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    chunk = pending.pop(ref)
                    try:
                        result = ray.get(ref)
                    except ray.exceptions.RayTaskError as exc:
                        raise exc.as_instanceof_cause() from None
                    except ray.exceptions.RayError as exc:
                        raise RuntimeError(
                            f"teachers chunk {chunk} failed on the Ray cluster after "
                            f"{c.max_retries} retries ({type(exc).__name__}: {exc}); the finished "
                            "chunks are saved: run the stage again (--resume) to continue"
                        ) from None
                    on_result(chunk, result)
                    bar.update(1)
                    submit_next()
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
            bar.close()
