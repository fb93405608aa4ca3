"""One training run of the student: its network, optimiser and random draws, and the step of
FixMatch or supervised training (the methods are described in :mod:`pate.student.train`; the
epoch loop is :mod:`pate.student.epochs`).

Every random draw comes from the run's seed: the initial weights are drawn under
``torch.random.fork_rng`` seeded with it (the global generator is untouched), the batches and
augmentations from one ``torch.Generator`` per shard of the batch (:func:`step_shards`; one
shard: the generator is seeded with the run's seed). A checkpoint holds the generators' states,
so a resumed run draws what an uninterrupted one would have drawn.

Symbols
-------
``Standardize(net, mean, std)``
    The network behind a standardisation by the public pool's statistics (its buffers ``mean``
    and ``std`` are part of the state dict).
``input_stats(x)``: per-channel (images) or per-feature (tabular) mean and std of ``x``.
``build_network(spec, *, seed, x, input_shape, num_classes, device)``
    A freshly initialised zoo network (``spec``: a model name or a factory) inside
    :class:`Standardize`; returns it and the std it divides by.
``Training``
    The state of a run: model, EMA copy, optimiser, generators, the running mean of the predicted
    class probabilities (distribution alignment), history and the first epoch still to train;
    ``update_ema(decay)`` averages the weights into the EMA copy; ``forward(x)`` the training
    network's float32 logits, computed under bfloat16 autocast where ``amp`` is on.
``bf16_native(device)``: a CUDA GPU with bfloat16, or a CPU with AMX tiles.
``CHANNELS_LAST_MODELS``: the zoo networks kept channels-last on the CPU (faster, same results).
``Batches``
    The public pool on the device and what a step draws from it: labelled rows, unlabelled
    rows, weak and strong augmentations, the labelled loss (hard labels or soft targets);
    ``skip_unconfident``: FixMatch's training pass leaves out the unlabelled rows whose
    pseudo-label is below the threshold (the same loss and gradients, less arithmetic).
``rows_independent(network)``: whether each row's output depends on that row alone.
``StepDraw``, ``steps_per_draw(batches, settings)``, ``draw_steps(batches, settings, steps)``,
``DRAW_BYTES``, ``MAX_STEPS_PER_DRAW``
    A step's inputs (its rows and augmented views); the views of a chunk of steps are drawn
    together (each augmentation called once per chunk, never across the end of an epoch).
``STEP_SHARDS``, ``step_shards(network, batch_size, *, device, resumed)``, ``saved_shards(state)``,
``shard_seeds(seed, shards)``, ``shard_sizes(total, shards)``: a step's batch drawn as shards,
    each from its own generator (one on a GPU).
``step(training, batches, draw, settings, sums, *, num_classes, group=SINGLE)``
    One optimiser step on this process's shards of a batch (gradients summed over ``group``).
``accuracy(model, x, y, *, device)``: accuracy on held-out data (monitoring only).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from pate.student import augment as aug
from pate.student.checkpoint import FORMAT, not_a_checkpoint
from pate.student.parallel import SINGLE, Group
from pate.teachers.scattering import without_kymatio_buffers

__all__ = [
    "Standardize",
    "input_stats",
    "build_network",
    "bf16_native",
    "Training",
    "Batches",
    "StepDraw",
    "steps_per_draw",
    "draw_steps",
    "rows_independent",
    "STEP_SHARDS",
    "step_shards",
    "saved_shards",
    "shard_seeds",
    "shard_sizes",
    "step",
    "accuracy",
    "ALIGNMENT_MOMENTUM",
]

logger = logging.getLogger("pate.student")  # shown by the pate CLI

ALIGNMENT_MOMENTUM = 0.99  # distribution alignment's running mean: about the last 100 steps
#: Zoo networks whose weights are kept channels-last on the CPU: the convolutions (oneDNN) and
#: max-pooling of their training step run faster than in the default layout (measured:
#: docs/pipeline.md, "Speed"); same arithmetic, rounding-level differences only.
CHANNELS_LAST_MODELS = ("cnn28", "cnn32", "cnn8")


class Standardize(nn.Module):
    """Standardises inputs with the public pool's statistics, then applies the network."""

    def __init__(self, net: nn.Module, mean: torch.Tensor, std: torch.Tensor) -> None:
        super().__init__()
        self.net = net
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net((x - self.mean) / self.std)


def input_stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (images) or per-feature (tabular) mean/std, shaped for broadcasting."""
    if x.ndim == 4:
        mean = x.mean(axis=(0, 2, 3), dtype=np.float64)[None, :, None, None]
        std = x.std(axis=(0, 2, 3), dtype=np.float64)[None, :, None, None]
    else:
        mean = x.mean(axis=0, dtype=np.float64)[None, :]
        std = x.std(axis=0, dtype=np.float64)[None, :]
    std = np.where(std > 1e-6, std, 1.0)
    return mean.astype(np.float32), std.astype(np.float32)


def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray, *, device: torch.device) -> float:
    """Accuracy of ``model`` on ``(x, y)``, in chunks of 1024 (leaves the model in eval mode)."""
    model.eval()
    correct = 0
    with torch.no_grad():
        for start in range(0, x.shape[0], 1024):
            chunk = torch.from_numpy(
                np.ascontiguousarray(x[start : start + 1024], dtype=np.float32)
            )
            pred = model(chunk.to(device)).argmax(dim=1).cpu().numpy()
            correct += int(np.sum(pred == y[start : start + 1024]))
    return correct / max(1, x.shape[0])


def build_network(
    spec: Any,
    *,
    seed: int,
    x: np.ndarray,
    input_shape: tuple[int, ...],
    num_classes: int,
    device: torch.device,
) -> tuple[Standardize, np.ndarray]:
    """A fresh network (initialised from ``seed``, global RNG untouched) standardised by the
    statistics of ``x``, on ``device``; and the std it divides by. The zoo's convolutional
    networks (:data:`CHANNELS_LAST_MODELS`) keep their weights channels-last on the CPU."""
    from pate.teachers.models import build_model

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = build_model(spec, input_shape=input_shape, num_classes=num_classes)
    if spec in CHANNELS_LAST_MODELS and device.type == "cpu":
        net = net.to(memory_format=torch.channels_last)
    mean, std = input_stats(x)
    return Standardize(net, torch.from_numpy(mean), torch.from_numpy(std)).to(device), std


def bf16_native(device: torch.device) -> bool:
    """Whether ``device`` computes in bfloat16 natively: a CUDA GPU that supports it, or a CPU
    with AMX tiles (oneDNN's bfloat16 convolutions and matrix products; elsewhere a CPU would
    emulate them, slower than float32)."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    if device.type == "cpu":
        probe = getattr(torch.cpu, "_is_amx_tile_supported", None)
        return bool(probe()) if probe is not None else False
    return False


def _fusable(params: list[torch.Tensor], device: torch.device) -> bool:
    """Whether torch's fused SGD takes these weights: float32 (or other floating) tensors on
    the CPU or a CUDA device."""
    return (
        bool(params)
        and device.type in ("cpu", "cuda")
        and all(p.is_floating_point() and p.device.type == device.type for p in params)
    )


@dataclass
class Training:
    """The state of one run (see the module docstring); :meth:`start` makes a fresh one."""

    model: nn.Module
    ema: nn.Module | None
    optimizer: torch.optim.Optimizer
    #: One generator per shard of a step's batch (:func:`step_shards`).
    generators: list[torch.Generator]
    prediction_mean: torch.Tensor
    history: list[dict] = field(default_factory=list)
    start_epoch: int = 0
    #: The training passes run under bfloat16 autocast (``amp`` and :func:`bf16_native`); the
    #: weights, the optimiser and the losses stay float32.
    amp: bool = False

    @classmethod
    def start(
        cls,
        model: nn.Module,
        settings: dict,
        *,
        seed: int,
        num_classes: int,
        device: torch.device,
        shards: int = 1,
    ) -> Training:
        ema = copy.deepcopy(model) if settings["ema_decay"] is not None else None
        if ema is not None:
            for p in ema.parameters():
                p.requires_grad_(False)
        params = list(model.parameters())
        optimizer = torch.optim.SGD(
            params,
            lr=settings["learning_rate"],
            momentum=settings["momentum"],
            nesterov=settings["momentum"] > 0,
            weight_decay=settings["weight_decay"],
            # One kernel per step for all the weights (measured: docs/student.md, "Speed");
            # the same update, rounded otherwise.
            fused=_fusable(params, device),
        )
        generators = [torch.Generator().manual_seed(s) for s in shard_seeds(seed, shards)]
        # Distribution alignment: running mean of the weak views' predicted class probabilities.
        prediction_mean = torch.full((num_classes,), 1.0 / num_classes, device=device)
        amp = bool(settings.get("amp", False)) and bf16_native(device)
        return cls(model, ema, optimizer, generators, prediction_mean, amp=amp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The training network's float32 logits of ``x`` (computed under bfloat16 autocast
        when :attr:`amp`)."""
        if not self.amp:
            return self.model(x)
        with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16):
            logits = self.model(x)
        return logits.float()

    def update_ema(self, decay: float) -> None:
        """``ema = decay * ema + (1 - decay) * model``, all parameters in two foreach calls (the
        same arithmetic as a loop over them, without its per-tensor overhead)."""
        if self.ema is None:
            return
        with torch.no_grad():
            ema = list(self.ema.parameters())
            torch._foreach_mul_(ema, decay)
            torch._foreach_add_(ema, [p.detach() for p in self.model.parameters()], alpha=1 - decay)

    @property
    def final(self) -> nn.Module:
        """The model that predicts: the EMA copy when there is one."""
        return self.ema if self.ema is not None else self.model

    def restore(self, state: dict, *, device: torch.device, checkpoint_path) -> None:
        """Continue from a checkpoint's ``state`` (a damaged one raises ``CheckpointError``)."""
        try:
            self.model.load_state_dict(without_kymatio_buffers(state["model"]))
            if self.ema is not None:
                self.ema.load_state_dict(without_kymatio_buffers(state["ema"]))
            self.optimizer.load_state_dict(state["optimizer"])
            states = _generator_states(state)
            if states is None:
                raise KeyError("generators")
            if len(states) != len(self.generators):
                raise ValueError(
                    f"it holds {len(states)} generator states for {len(self.generators)} shards"
                )
            for generator, generator_state in zip(self.generators, states):
                generator.set_state(generator_state)
            if state.get("prediction_mean") is not None:
                self.prediction_mean = state["prediction_mean"].to(device)
            self.history = list(state["history"])
            self.start_epoch = int(state["epoch"])
        except (RuntimeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise not_a_checkpoint(
                checkpoint_path,
                exc,
                remedy=(
                    f"delete {checkpoint_path} (or use a new run directory) to train the "
                    "student from scratch"
                ),
            ) from None

    def checkpoint(self, *, fingerprint: str, seed: int, epoch: int) -> dict:
        """What the per-epoch checkpoint holds after ``epoch`` epochs."""
        return {
            "format": FORMAT,
            "fingerprint": fingerprint,
            "seed": seed,
            "epoch": epoch,
            "model": self.model.state_dict(),
            "ema": self.ema.state_dict() if self.ema is not None else None,
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generators[0].get_state(),
            "generators": [g.get_state() for g in self.generators],
            "prediction_mean": self.prediction_mean.cpu(),
            "history": self.history,
        }


def rows_independent(network: nn.Module) -> bool:
    """Whether each row's output depends on that row alone in training mode, so that leaving a
    row out of a batch changes no other row's output or gradient: no BatchNorm (its batch
    statistics couple the rows), and every layer one of torch.nn's or pate's own (a custom
    layer might couple them; it is not guessed at)."""
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
    """How many shards a step's batch is drawn as: on the CPU :data:`STEP_SHARDS` where
    ``network``'s rows are independent (:func:`rows_independent`) and the batch has a row for
    each, else 1 (the processes' gradients would not add up to the batch's). On a GPU 1: one
    process trains there, and drawing the shards apart only costs (measured: docs/pipeline.md,
    ``benchmarks/results/student_cuda_shards.json``).
    A run resumed from a checkpoint drawn in ``resumed`` shards keeps that count where the
    network allows it, so that it continues the draws it began on another device."""
    possible = STEP_SHARDS if batch_size >= STEP_SHARDS and rows_independent(network) else 1
    if resumed is not None and resumed in (1, possible):
        return resumed
    return possible if device.type == "cpu" else 1


def _generator_states(state: dict) -> list | None:
    """A checkpoint's generator states, one per shard (a checkpoint written before shards holds
    one, as ``"generator"``); None where it holds none."""
    states = state.get("generators") or ([state["generator"]] if "generator" in state else None)
    return list(states) if isinstance(states, list | tuple) else None


def saved_shards(state: dict) -> int | None:
    """The shards a checkpoint's ``state`` was drawn in (None where it does not say)."""
    states = _generator_states(state)
    return None if states is None else len(states)


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
        pick = self.labelled[
            torch.randint(0, self.labelled.numel(), (size,), generator=self.generator)
        ]
        return pick.to(self.device)

    def unlabelled_rows(self, size: int) -> torch.Tensor:
        """``size`` items of the whole public pool, drawn with replacement."""
        return torch.randint(0, self.x.shape[0], (size,), generator=self.generator).to(self.device)

    def labelled_loss(self, logits: torch.Tensor, rows: torch.Tensor, total: int) -> torch.Tensor:
        """Cross-entropy of the labelled rows to their one-hot labels, or to their soft targets,
        summed and divided by ``total`` (the whole batch's rows: the processes' shares add up
        to the batch's mean)."""
        if self.targets is None:
            return F.cross_entropy(logits, self.y[rows], reduction="sum") / total
        return -(self.targets[rows] * F.log_softmax(logits, dim=1)).sum() / total

    def weak(self, batch: torch.Tensor) -> torch.Tensor:
        s = self.settings
        if self.image:
            return aug.weak_augment(batch, generator=self.generator, flip=s["flip"], pad=s["pad"])
        return aug.weak_augment_tabular(
            batch, generator=self.generator, feature_std=self.feature_std
        )

    def strong(self, batch: torch.Tensor) -> torch.Tensor:
        s = self.settings
        if self.image:
            batch = aug.weak_augment(batch, generator=self.generator, flip=s["flip"], pad=s["pad"])
            return aug.strong_augment(
                batch, generator=self.generator, num_ops=s["strong_ops"], cutout=s["cutout"]
            )
        return aug.strong_augment_tabular(
            batch, generator=self.generator, feature_std=self.feature_std
        )


@dataclass(frozen=True)
class StepDraw:
    """What one step trains on: the labelled rows of the pool (for their labels or targets),
    the weak views of those rows, and for FixMatch the weak and strong views of its unlabelled
    rows (None for supervised training)."""

    rows: torch.Tensor
    labelled: torch.Tensor
    unlabelled_weak: torch.Tensor | None
    unlabelled_strong: torch.Tensor | None


#: The augmented views of a chunk of steps are drawn together, at most this many bytes of them:
#: one call per augmentation for the chunk instead of one per step (FixMatch's step on 28x28
#: images augments 224 small images in some 60 tensor operations; measured: docs/student.md,
#: "Speed"). Each image draws its own augmentation either way.
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
    """The inputs of ``steps`` steps, each augmentation called once for all of them (the random
    draws in this order: labelled rows, unlabelled rows, their weak views, their strong views,
    the labelled rows' weak views)."""
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


#: The rows a step keeps are a multiple of this (unconfident rows, weighted 0, fill it up): a
#: handful of batch shapes instead of one per count, as oneDNN keeps kernels per shape
#: (measured: docs/student.md, "Speed").
KEPT_ROWS_MULTIPLE = 16


def _kept_rows(mask: torch.Tensor) -> torch.Tensor:
    """The unlabelled rows a step trains on: every confident row, then unconfident ones up to a
    multiple of :data:`KEPT_ROWS_MULTIPLE` (or all rows)."""
    confident = mask.nonzero().squeeze(1)
    size = min(mask.numel(), -(-confident.numel() // KEPT_ROWS_MULTIPLE) * KEPT_ROWS_MULTIPLE)
    if size == confident.numel():
        return confident
    filler = (mask == 0).nonzero().squeeze(1)[: size - confident.numel()]
    return torch.cat([confident, filler])


def _pseudo_labels(
    training: Training,
    xu_weak: torch.Tensor,
    settings: dict,
    num_classes: int,
    *,
    total: int,
    group: Group,
) -> tuple[torch.Tensor, torch.Tensor]:
    """FixMatch's hard pseudo-labels of the weak views and their confidence mask (no gradient).
    Distribution alignment averages the predictions of the whole batch's ``total`` unlabelled
    rows, those of every process of ``group``."""
    with torch.no_grad():
        probs = torch.softmax(training.forward(xu_weak), dim=1)
        if settings["distribution_alignment"]:
            batch_mean = group.all_sum(probs.sum(dim=0) / total)
            training.prediction_mean.mul_(ALIGNMENT_MOMENTUM).add_(
                batch_mean, alpha=1.0 - ALIGNMENT_MOMENTUM
            )
            probs = probs / (training.prediction_mean * num_classes)
            probs = probs / probs.sum(dim=1, keepdim=True)
        confidence, pseudo = probs.max(dim=1)
        mask = (confidence >= settings["threshold"]).float()
    return pseudo, mask


def step(
    training: Training,
    batches: Batches,
    draw: StepDraw,
    settings: dict,
    sums: dict,
    *,
    num_classes: int,
    group: Group = SINGLE,
) -> None:
    """One optimiser step on ``draw`` (its learning rate already set); adds its losses to
    ``sums``. ``draw`` holds this process's shards of the batch: the losses are divided by
    the whole batch's rows (``batch_size``, ``batch_size * unlabeled_ratio``), so that the
    processes' losses and gradients add up to the batch's, and the gradients are summed over
    ``group`` before the update."""
    bs = draw.rows.numel()
    total = settings["batch_size"]
    if draw.unlabelled_weak is not None and draw.unlabelled_strong is not None:
        total_u = total * settings["unlabeled_ratio"]
        pseudo, mask = _pseudo_labels(
            training, draw.unlabelled_weak, settings, num_classes, total=total_u, group=group
        )
        strong = draw.unlabelled_strong
        if batches.skip_unconfident:
            # Rows below the threshold add 0 to the loss and to every gradient: leave them out of
            # the forward and backward pass (the same loss: the sum over the kept rows divided
            # by all the unlabelled rows).
            kept = _kept_rows(mask)
            logits = training.forward(torch.cat([draw.labelled, strong[kept]]))
            loss_u = (
                F.cross_entropy(logits[bs:], pseudo[kept], reduction="none") * mask[kept]
            ).sum() / total_u
        else:
            logits = training.forward(torch.cat([draw.labelled, strong]))
            loss_u = (F.cross_entropy(logits[bs:], pseudo, reduction="none") * mask).sum() / total_u
        loss_x = batches.labelled_loss(logits[:bs], draw.rows, total)
        loss = loss_x + settings["unlabeled_weight"] * loss_u
        sums["loss_unlabelled"] += loss_u.detach()
        sums["mask_rate"] += mask.sum() / total_u
    else:
        loss_x = batches.labelled_loss(training.forward(draw.labelled), draw.rows, total)
        loss = loss_x
    training.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    group.sum_gradients(list(training.model.parameters()))
    training.optimizer.step()
    if training.ema is not None:
        training.update_ema(settings["ema_decay"])
    sums["loss_labelled"] += loss_x.detach()
