"""One training run of the student: its network, optimiser and FixMatch or supervised step
(draws: :mod:`pate.student.draws`; the epoch loop: :mod:`pate.student.epochs`; more:
docs/student.md, "pate.student.trainer").
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from pate.analysis.errors import InputError
from pate.student.checkpoint import FORMAT, not_a_checkpoint, start_over
from pate.student.draws import Batches, StepDraw, shard_seeds
from pate.student.parallel import SINGLE, Group

logger = logging.getLogger("pate.student")  # shown by the pate CLI

ALIGNMENT_MOMENTUM = 0.99  # distribution alignment's running mean: about the last 100 steps
#: Zoo networks whose weights are kept channels-last on the CPU: faster (docs/pipeline.md,
#: "Speed"), the same arithmetic up to rounding.
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
    axes = (0, 2, 3) if x.ndim == 4 else (0,)
    mean = x.mean(axis=axes, dtype=np.float64, keepdims=True)
    std = x.std(axis=axes, dtype=np.float64, keepdims=True)
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
    statistics of ``x``, on ``device`` (channels-last where :data:`CHANNELS_LAST_MODELS`
    says); and the std it divides by."""
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
    with AMX tiles (elsewhere emulated, slower than float32)."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    probe = getattr(torch.cpu, "_is_amx_tile_supported", None)
    return device.type == "cpu" and probe is not None and bool(probe())


@dataclass
class Training:
    """The state of one run (docs/student.md); :meth:`start` makes a fresh one."""

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
        ema = None if settings["ema_decay"] is None else copy.deepcopy(model).requires_grad_(False)
        params = list(model.parameters())
        optimizer = torch.optim.SGD(
            params,
            lr=settings["learning_rate"],
            momentum=settings["momentum"],
            nesterov=settings["momentum"] > 0,
            weight_decay=settings["weight_decay"],
            # One kernel per step for all the weights (docs/student.md, "Speed"), where torch
            # has one: floating weights on the CPU or a CUDA device.
            fused=bool(params)
            and device.type in ("cpu", "cuda")
            and all(p.is_floating_point() and p.device.type == device.type for p in params),
        )
        generators = [torch.Generator().manual_seed(s) for s in shard_seeds(seed, shards)]
        # Distribution alignment: running mean of the weak views' predicted class probabilities.
        prediction_mean = torch.full((num_classes,), 1.0 / num_classes, device=device)
        amp = bool(settings.get("amp", False)) and bf16_native(device)
        return cls(model, ema, optimizer, generators, prediction_mean, amp=amp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The training network's float32 logits of ``x`` (under bfloat16 autocast if ``amp``)."""
        if not self.amp:
            return self.model(x)
        with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16):
            logits = self.model(x)
        return logits.float()

    def update_ema(self, decay: float) -> None:
        """``ema = decay * ema + (1 - decay) * model`` (no EMA: nothing), in two foreach calls."""
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
            self.model.load_state_dict(state["model"])
            if self.ema is not None:
                self.ema.load_state_dict(state["ema"])
            self.optimizer.load_state_dict(state["optimizer"])
            states = list(state["generators"])
            if len(states) != len(self.generators):
                raise InputError(
                    f"it holds {len(states)} generator states for {len(self.generators)} shards"
                )
            for generator, generator_state in zip(self.generators, states):
                generator.set_state(generator_state)
            self.prediction_mean = state["prediction_mean"].to(device)
            self.history = list(state["history"])
            self.start_epoch = int(state["epoch"])
        except (RuntimeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise not_a_checkpoint(
                checkpoint_path, exc, remedy=start_over(checkpoint_path)
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
            "generators": [g.get_state() for g in self.generators],
            "prediction_mean": self.prediction_mean.cpu(),
            "history": self.history,
        }


#: The rows a step keeps are a multiple of this (unconfident rows, weighted 0, fill it up): a
#: handful of batch shapes, as oneDNN keeps kernels per shape (docs/student.md, "Speed").
KEPT_ROWS_MULTIPLE = 16


def _kept_rows(mask: torch.Tensor) -> torch.Tensor:
    """Every confident unlabelled row, then unconfident ones up to a multiple of
    :data:`KEPT_ROWS_MULTIPLE` (or all rows)."""
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
    """FixMatch's hard pseudo-labels of the weak views and their confidence mask (no gradient;
    distribution alignment averages over the ``total`` unlabelled rows of ``group``)."""
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
    """One optimiser step on ``draw``, this process's shards of the batch (its learning rate
    already set), its losses added to ``sums``: divided by the whole batch's rows, so that the
    processes' losses and gradients, summed over ``group`` before the update, are the batch's."""
    bs = draw.rows.numel()
    total = settings["batch_size"]
    if draw.unlabelled_weak is not None and draw.unlabelled_strong is not None:
        total_u = total * settings["unlabeled_ratio"]
        pseudo, mask = _pseudo_labels(
            training, draw.unlabelled_weak, settings, num_classes, total=total_u, group=group
        )
        # Rows below the threshold add 0 to the loss and to every gradient: skip_unconfident
        # leaves them out of the forward and backward pass (the same loss: the sum over the kept
        # rows divided by all the unlabelled rows).
        kept = _kept_rows(mask) if batches.skip_unconfident else slice(None)
        logits = training.forward(torch.cat([draw.labelled, draw.unlabelled_strong[kept]]))
        loss_u = (
            functional.cross_entropy(logits[bs:], pseudo[kept], reduction="none") * mask[kept]
        ).sum() / total_u
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
    training.update_ema(settings["ema_decay"])
    sums["loss_labelled"] += loss_x.detach()
