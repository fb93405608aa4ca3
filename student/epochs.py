"""The student's epoch loop, in one process or data-parallel in several
(:mod:`pate.student.parallel`).

More: docs/student.md, "pate.student.epochs".
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import sys
import time
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch

from pate.student.checkpoint import atomic_save
from pate.student.draws import Batches, StepDraw, draw_steps, shard_sizes, steps_per_draw
from pate.student.parallel import Group, data_parallel
from pate.student.trainer import Training, accuracy, step


@dataclasses.dataclass(frozen=True)
class EpochLoop:
    """What every epoch of one student's training reads (``validation``: (x, y) or None)."""

    settings: dict
    num_classes: int
    device: torch.device
    validation: tuple[Any, Any] | None


@dataclasses.dataclass(frozen=True)
class CheckpointTarget:
    """Where the checkpoint after each epoch goes (None: none) and what it records."""

    path: pathlib.Path | None
    fingerprint: str
    seed: int


def draw_shards(
    shards: Sequence[tuple[Batches, int]], settings: dict, steps: int
) -> list[StepDraw]:
    """The inputs of ``steps`` steps from ``shards`` (each ``(its Batches, its labelled rows)``,
    drawn as a batch of that size), the shards' rows of a step put together in order."""
    drawn = [
        draw_steps(batches, {**settings, "batch_size": size}, steps) for batches, size in shards
    ]
    if len(drawn) == 1:
        return drawn[0]
    return [_joined(parts) for parts in zip(*drawn, strict=True)]


def _joined(parts: Sequence[StepDraw]) -> StepDraw:
    """The shards' fields put together (a field None in one, supervised training, is None in
    all)."""
    fields = [[getattr(part, f.name) for part in parts] for f in dataclasses.fields(StepDraw)]
    return StepDraw(*(None if values[0] is None else torch.cat(values) for values in fields))


def _epoch(
    training: Training,
    shards: Sequence[tuple[Batches, int]],
    loop: EpochLoop,
    epoch: int,
    bar,
    *,
    group: Group,
) -> dict:
    """Train one epoch on this process's ``shards``; returns its record of ``history_``."""
    settings, num_classes = loop.settings, loop.num_classes
    t0 = time.perf_counter()
    n = settings["steps_per_epoch"]
    total_steps = settings["epochs"] * n
    batches = shards[0][0]
    # Summed as tensors, read once at the end of the epoch (no synchronisation per step).
    sums: dict[str, Any] = {"loss_labelled": 0.0, "loss_unlabelled": 0.0, "mask_rate": 0.0}
    lr = settings["learning_rate"]
    chunk = steps_per_draw(batches, settings)  # of the whole batch: the same for any processes
    for first in range(0, n, chunk):
        # A chunk never crosses the end of an epoch: a run resumed from a checkpoint draws
        # what an uninterrupted one would have drawn.
        for i, draw in enumerate(draw_shards(shards, settings, min(chunk, n - first)), first):
            lr = settings["learning_rate"] * math.cos(
                7.0 * math.pi * (epoch * n + i) / (16.0 * total_steps)
            )
            for param_group in training.optimizer.param_groups:
                param_group["lr"] = lr
            step(training, batches, draw, settings, sums, num_classes=num_classes, group=group)
            bar.update(1)
    names = ("loss_labelled", "loss_unlabelled", "mask_rate")
    if group.size > 1:  # each process summed its share of every step's losses
        mine = torch.stack([torch.as_tensor(sums[k], dtype=torch.float32) for k in names])
        sums = dict(zip(names, group.all_sum(mine).tolist(), strict=True))
    kept = names if settings["method"] == "fixmatch" else names[:1]
    record = {"epoch": epoch + 1, "steps": (epoch + 1) * n, "lr": lr}
    record.update({name: float(sums[name]) / n for name in kept})
    record["seconds"] = time.perf_counter() - t0
    if loop.validation is not None:
        record["validation_accuracy"] = accuracy(
            training.final, *loop.validation, device=loop.device
        )
        training.model.train()
    return record


def _epochs(
    training: Training,
    batches: Batches,
    loop: EpochLoop,
    group: Group,
    bar,
    *,
    after_epoch: Callable[[int, dict], None] | None,
) -> None:
    """The epochs of ``group.rank``'s shards; after each, every process gets every shard's
    generator state (the checkpoint holds them all) and ``after_epoch(epoch, record)`` runs."""
    settings = loop.settings
    generators = training.generators
    count = len(generators)
    owners = [k % group.size for k in range(count)]
    sizes = shard_sizes(settings["batch_size"], count)
    mine = [
        (batches.drawing_with(generators[k]), sizes[k])
        for k in range(count)
        if owners[k] == group.rank
    ]
    for epoch in range(training.start_epoch, settings["epochs"]):
        record = _epoch(training, mine, loop, epoch, bar, group=group)
        if group.size > 1:
            states = group.share_states([g.get_state() for g in generators], owners)
            for k, generator in enumerate(generators):
                if owners[k] != group.rank:
                    generator.set_state(states[k])
        if after_epoch is not None:
            after_epoch(epoch, record)


#: A helper process's progress bar: it shows nothing.
_NO_BAR = types.SimpleNamespace(update=lambda n=1: None)


def train_epochs(
    training: Training,
    batches: Batches,
    loop: EpochLoop,
    *,
    checkpoint: CheckpointTarget,
    progress: bool,
    on_epoch_end: Callable[[int, dict], None] | None,
    processes: int = 1,
    threads_each: int = 1,
) -> None:
    """The remaining epochs: after each, its record appended to ``training.history``, the
    checkpoint written and ``on_epoch_end(epoch, record)`` called. With ``processes > 1`` (at
    most one per generator) forked helpers share the steps, each process on ``threads_each``
    threads (:mod:`pate.student.parallel`)."""
    training.model.train()

    def helper(group: Group) -> None:  # in a forked process: its own copy of everything
        training.ema = None  # only the caller's EMA is ever used
        _epochs(
            training,
            batches,
            dataclasses.replace(loop, validation=None),
            group,
            _NO_BAR,  # no tqdm in a forked process: its lock may have been held at the fork
            after_epoch=None,
        )

    def after_epoch(epoch: int, record: dict) -> None:
        training.history.append(record)
        bar.set_postfix(loss=f"{record['loss_labelled']:.3f}")
        if checkpoint.path is not None:
            atomic_save(
                training.checkpoint(
                    fingerprint=checkpoint.fingerprint, seed=checkpoint.seed, epoch=epoch + 1
                ),
                checkpoint.path,
            )
        if on_epoch_end is not None:
            on_epoch_end(epoch + 1, record)

    state_size = training.generators[0].get_state().numel()
    slot_size = max(loop.num_classes, 3, sum(p.numel() for p in training.model.parameters()))
    with data_parallel(
        processes,
        helper,
        states=(len(training.generators), state_size),
        slot_size=slot_size,
        threads_each=threads_each,
    ) as group:
        from tqdm.auto import tqdm

        settings = loop.settings
        bar = tqdm(  # after the fork (see helper)
            total=settings["epochs"] * settings["steps_per_epoch"],
            initial=training.start_epoch * settings["steps_per_epoch"],
            desc=f"student ({settings['method']})",
            unit="step",
            file=sys.stderr,
            disable=not progress,
            leave=False,
        )
        try:
            _epochs(training, batches, loop, group, bar, after_epoch=after_epoch)
        finally:
            bar.close()
