"""The random draws of the student's steps: a step's batch as shards, each from its own
generator (:func:`step_shards`), the pool and a step's draws from it (:class:`Batches`), and
a chunk of steps' views drawn together (:func:`draw_steps`). A checkpoint holds the
generators' states, so a resumed run draws what an uninterrupted one would have drawn.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from pate.student import augment as aug


def rows_independent(network: nn.Module) -> bool:
    """Whether each row's output and gradient depend on that row alone in training mode: no
    BatchNorm, and only layers of torch.nn or pate (a custom layer is not guessed at)."""
    from pate.teachers.vectorized import has_batchnorm

    trusted = ("torch.nn.", "pate.", "kymatio.")
    return not has_batchnorm(network) and all(
        type(module).__module__.startswith(trusted) for module in network.modules()
    )


#: A step's batch is drawn as this many shards, each from its own generator, where the network's
#: rows are independent (:func:`step_shards`): what lets two processes share a step
#: (:mod:`pate.student.parallel`) with the same draws as one.
STEP_SHARDS = 2


def step_shards(
    network: nn.Module, batch_size: int, *, device: torch.device, resumed: int | None = None
) -> int:
    """How many shards a step's batch is drawn as: :data:`STEP_SHARDS` on the CPU where the rows
    are independent and the batch has one for each, else 1 (GPU: docs/pipeline.md); a run
    resumed from ``resumed`` shards keeps that count where the network allows it."""
    possible = STEP_SHARDS if batch_size >= STEP_SHARDS and rows_independent(network) else 1
    if resumed is not None and resumed in (1, possible):
        return resumed
    return possible if device.type == "cpu" else 1


def saved_shards(state: dict) -> int | None:
    """The shards a checkpoint's ``state`` was drawn in (None where it does not say)."""
    states = state.get("generators")
    return len(states) if isinstance(states, list | tuple) else None


def shard_seeds(seed: int, shards: int) -> list[int]:
    """The seeds of the shards' generators: ``seed`` itself for one shard, else one derived
    from ``(seed, shard)`` for each (numpy's ``SeedSequence``: unrelated streams)."""
    if shards == 1:
        return [seed]
    return [
        int(np.random.SeedSequence([seed, shard]).generate_state(1, np.uint64)[0])
        for shard in range(shards)
    ]


def shard_sizes(total: int, shards: int) -> list[int]:
    """``total`` rows split into ``shards`` near-equal consecutive parts."""
    return [total * (k + 1) // shards - total * k // shards for k in range(shards)]


class Batches:
    """The public pool on ``device`` and the draws of a step, all from ``generator``
    (:meth:`drawing_with`: the same pool, drawn from another generator)."""

    def __init__(
        self,
        x: np.ndarray,
        y: np.ndarray,
        targets: np.ndarray | None,
        labelled: np.ndarray,
        std: np.ndarray,
        settings: dict,
        *,
        generator: torch.Generator,
        device: torch.device,
        skip_unconfident: bool = False,
    ) -> None:
        self.x = torch.from_numpy(x).to(device)
        self.y = torch.from_numpy(y).to(device)
        self.targets = (
            None if targets is None else torch.from_numpy(targets.astype(np.float32)).to(device)
        )
        self.labelled = torch.from_numpy(labelled)
        self.image = x.ndim == 4
        self.feature_std = torch.from_numpy(std.reshape(-1)).to(device) if not self.image else None
        self.settings = settings
        self.generator = generator
        self.device = device
        #: FixMatch leaves the unconfident unlabelled rows out of the training pass (only for a
        #: network whose rows are independent: :func:`rows_independent`).
        self.skip_unconfident = skip_unconfident

    def drawing_with(self, generator: torch.Generator) -> Batches:
        """The same pool and settings (not copied), drawn from ``generator``."""
        twin = copy.copy(self)
        twin.generator = generator
        return twin

    def labelled_rows(self, size: int) -> torch.Tensor:
        """``size`` answered items, drawn with replacement (their rows of the pool)."""
        drawn = torch.randint(0, self.labelled.numel(), (size,), generator=self.generator)
        return self.labelled[drawn].to(self.device)

    def unlabelled_rows(self, size: int) -> torch.Tensor:
        """``size`` items of the whole public pool, drawn with replacement."""
        return torch.randint(0, self.x.shape[0], (size,), generator=self.generator).to(self.device)

    def labelled_loss(self, logits: torch.Tensor, rows: torch.Tensor, total: int) -> torch.Tensor:
        """Cross-entropy of the labelled rows to their labels or soft targets, summed and divided
        by ``total``, the whole batch's rows (the processes' shares add up to its mean)."""
        if self.targets is None:
            return functional.cross_entropy(logits, self.y[rows], reduction="sum") / total
        return -(self.targets[rows] * functional.log_softmax(logits, dim=1)).sum() / total

    def weak(self, batch: torch.Tensor) -> torch.Tensor:
        s = self.settings
        if self.image:
            return aug.weak_augment(batch, generator=self.generator, flip=s["flip"], pad=s["pad"])
        return aug.weak_augment_tabular(
            batch, generator=self.generator, feature_std=self.feature_std
        )

    def strong(self, batch: torch.Tensor) -> torch.Tensor:
        if not self.image:
            return aug.strong_augment_tabular(
                batch, generator=self.generator, feature_std=self.feature_std
            )
        s = self.settings
        return aug.strong_augment(
            self.weak(batch), generator=self.generator, num_ops=s["strong_ops"], cutout=s["cutout"]
        )


@dataclass(frozen=True)
class StepDraw:
    """One step's labelled rows of the pool, their weak views, and FixMatch's weak and strong
    views of its unlabelled rows (None when supervised)."""

    rows: torch.Tensor
    labelled: torch.Tensor
    unlabelled_weak: torch.Tensor | None
    unlabelled_strong: torch.Tensor | None


#: The augmented views of a chunk of steps are drawn together, at most this many bytes of them:
#: one call per augmentation for the chunk instead of one per step (docs/student.md, "Speed").
DRAW_BYTES = 16 * 2**20
#: ... and at most this many steps per chunk.
MAX_STEPS_PER_DRAW = 32


def steps_per_draw(batches: Batches, settings: dict) -> int:
    """How many steps' views :func:`draw_steps` makes at once (at least one)."""
    row_bytes = batches.x[0].numel() * batches.x.element_size()
    views = settings["batch_size"]
    if settings["method"] == "fixmatch":
        views *= 1 + 2 * settings["unlabeled_ratio"]
    return max(1, min(MAX_STEPS_PER_DRAW, DRAW_BYTES // max(1, views * row_bytes)))


def draw_steps(batches: Batches, settings: dict, steps: int) -> list[StepDraw]:
    """The inputs of ``steps`` steps, each augmentation called once for all of them (drawn in
    order: labelled rows, unlabelled rows, their weak, their strong, the labelled weak views)."""
    bs = settings["batch_size"]
    rows = batches.labelled_rows(bs * steps)
    weak = strong = None
    if settings["method"] == "fixmatch":
        mu = bs * settings["unlabeled_ratio"]  # unlabelled rows per step
        xu = batches.x[batches.unlabelled_rows(mu * steps)]
        weak, strong = batches.weak(xu), batches.strong(xu)
    labelled = batches.weak(batches.x[rows])
    return [
        StepDraw(
            rows[k * bs : (k + 1) * bs],
            labelled[k * bs : (k + 1) * bs],
            None if weak is None else weak[k * mu : (k + 1) * mu],
            None if strong is None else strong[k * mu : (k + 1) * mu],
        )
        for k in range(steps)
    ]
