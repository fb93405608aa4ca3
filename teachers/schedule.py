"""Per-teacher randomness shared by the vectorized and the sequential trainer: drawn from each
teacher's own seed, outside the model, so that both trainers and every chunking produce the
same teachers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pate.analysis.errors import InputError
from pate.analysis.validation import check_choice

__all__ = [
    "EpochPlan",
    "epoch_plan",
    "augment",
    "init_teacher",
    "AUGMENTATIONS",
    "parse_augmentation",
    "DEFAULT_SHIFT",
]

AUGMENTATIONS = ("none", "shift", "flip", "shift+flip")
DEFAULT_SHIFT = 2  # pixels, for 28x28 / 32x32 images; 1 for 8x8 digits


@dataclass(frozen=True)
class EpochPlan:
    order: np.ndarray  # (n,) positions into the teacher's shard, a permutation
    shifts: np.ndarray | None  # (n, 2) int (dy, dx) per visit, or None
    flips: np.ndarray | None  # (n,) bool per visit, or None


def parse_augmentation(name: str, input_shape: tuple[int, ...]) -> tuple[int, bool]:
    """``(max_shift, flip)`` for augmentation ``name`` on inputs of ``input_shape``."""
    check_choice(name, "augment", AUGMENTATIONS)
    if name != "none" and len(input_shape) != 3:
        raise InputError(
            f"augment={name!r} needs image inputs (C, H, W), got input shape "
            f"{input_shape}; use augment='none' for tabular data"
        )
    shift = 0
    if "shift" in name:
        shift = 1 if min(input_shape[1:]) < 16 else DEFAULT_SHIFT
    return shift, "flip" in name


def epoch_plan(
    seed: int, epoch: int, num_records: int, *, max_shift: int = 0, flip: bool = False
) -> EpochPlan:
    """The order in which a teacher visits its shard in one epoch, and each visit's augmentation
    (a translation of up to ``max_shift`` pixels per axis, zero-padded; a horizontal flip with
    probability 1/2 when ``flip``). Drawn from ``default_rng([seed, epoch])``: stateless, so a run
    resumed at an epoch boundary draws what an uninterrupted one draws."""
    rng = np.random.default_rng([int(seed), int(epoch)])
    order = rng.permutation(num_records)
    shifts = rng.integers(-max_shift, max_shift + 1, size=(num_records, 2)) if max_shift else None
    flips = rng.random(num_records) < 0.5 if flip else None
    return EpochPlan(order=order, shifts=shifts, flips=flips)


def augment(x, shifts, flips, *, max_shift: int | None = None):
    """Translate (zero padding) and/or horizontally flip each image of ``x`` (N, C, H, W).

    ``shifts``: (N, 2) integer tensor or None; ``flips``: (N,) bool tensor or None;
    ``max_shift``: a bound on ``|shifts|`` (avoids a device sync on GPU; computed if None).
    """
    import torch

    if shifts is None and flips is None:
        return x
    n, _, h, w = x.shape
    dev = x.device
    if shifts is None:
        m = 0
    else:
        m = int(shifts.abs().max().item()) if max_shift is None else int(max_shift)
    xp = torch.nn.functional.pad(x, (m, m, m, m)) if m else x
    ar_h = torch.arange(h, device=dev)
    ar_w = torch.arange(w, device=dev)
    dy = shifts[:, 0] if shifts is not None else torch.zeros(n, dtype=torch.long, device=dev)
    dx = shifts[:, 1] if shifts is not None else torch.zeros(n, dtype=torch.long, device=dev)
    rows = (m - dy)[:, None] + ar_h[None, :]  # (N, H)
    cols = ar_w[None, :].expand(n, w)
    if flips is not None:
        cols = torch.where(flips[:, None], (w - 1) - cols, cols)
    cols = (m - dx)[:, None] + cols  # (N, W)
    idx = torch.arange(n, device=dev)[:, None, None]
    out = xp[idx, :, rows[:, :, None], cols[:, None, :]]  # (N, H, W, C)
    return out.permute(0, 3, 1, 2).contiguous()


def init_teacher(model: str, seed: int, *, input_shape, num_classes):
    """A freshly initialised teacher whose weights depend only on ``seed`` (built on CPU)."""
    import torch

    from pate.teachers.models import build_model

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed) % (2**63))
        return build_model(model, input_shape=input_shape, num_classes=num_classes)
