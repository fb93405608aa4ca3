"""Data augmentations for the semi-supervised student, on torch tensors only (no downloads, no PIL).

More: docs/student.md, "pate.student.augment".
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional

#: Datasets whose labels survive a horizontal flip. Digits, characters and house numbers do not.
FLIP_DATASETS = frozenset({"fashion-mnist", "cifar10"})


def default_pad(height: int) -> int:
    """FixMatch's translation range: 12.5 % of the image side, at least one pixel."""
    return max(1, int(round(0.125 * int(height))))


def _signs(n: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    return (torch.randint(0, 2, (n,), generator=generator) * 2 - 1).to(device, torch.float32)


def weak_augment(
    x: torch.Tensor, *, generator: torch.Generator, flip: bool, pad: int
) -> torch.Tensor:
    """A new tensor: a random horizontal flip (if ``flip``) and translation by up to ``pad``
    pixels (reflect-pad, then a random crop per image), FixMatch's weak view."""
    n, c, h, w = x.shape
    device = x.device
    flip_mask = (torch.rand(n, generator=generator) < 0.5).to(device) if flip else None
    if pad <= 0:
        if flip_mask is None:
            return x.clone()
        return torch.where(flip_mask[:, None, None, None], x.flip(-1), x)
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=generator).to(device)
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=generator).to(device)
    # Flip, pad and crop as one gather: output pixel (i, j) copies the input pixel that flipping,
    # padding (reflect, or replicate when pad >= the side) and cropping at (dy, dx) would bring
    # there -- the same values as doing the three in turn, without the padded copy.
    mode = "reflect" if pad < min(h, w) else "replicate"
    rows = _source_index(dy[:, None] + torch.arange(h, device=device) - pad, h, mode)  # (n, h)
    cols = _source_index(dx[:, None] + torch.arange(w, device=device) - pad, w, mode)  # (n, w)
    if flip_mask is not None:
        cols = torch.where(flip_mask[:, None], w - 1 - cols, cols)
    flat = (rows[:, :, None] * w + cols[:, None, :]).reshape(n, 1, h * w).expand(n, c, h * w)
    return x.reshape(n, c, h * w).gather(2, flat).view(n, c, h, w)


def _source_index(position: torch.Tensor, size: int, mode: str) -> torch.Tensor:
    """The index in ``[0, size)`` that padding maps ``position`` (in ``[-pad, size + pad)``) to:
    reflected about the edges (``"reflect"``, as ``functional.pad``; needs pad < size) or clamped to
    them (``"replicate"``)."""
    if mode == "replicate":
        return position.clamp(0, size - 1)
    position = position.abs()  # reflect at 0: -k -> k
    return torch.where(position > size - 1, 2 * (size - 1) - position, position)


def _enhance(x: torch.Tensor, other: torch.Tensor, m: torch.Tensor, g) -> torch.Tensor:
    """PIL ImageEnhance semantics, other + factor * (x - other) clipped to [0, 1], with FixMatch's
    RA factor in [0.05, 1.95] (Brightness, Color, Contrast, Sharpness)."""
    f = (1.0 + _signs(len(m), g, x.device) * 0.95 * m)[:, None, None, None]
    return (other + f * (x - other)).clamp(0.0, 1.0)


def _op_identity(x, m, g):
    return x


def _op_autocontrast(x, m, g):
    lo = x.amin(dim=(2, 3), keepdim=True)
    hi = x.amax(dim=(2, 3), keepdim=True)
    scale = torch.where(hi > lo, 1.0 / (hi - lo).clamp_min(1e-8), torch.ones_like(hi))
    offset = torch.where(hi > lo, lo, torch.zeros_like(lo))
    return ((x - offset) * scale).clamp(0.0, 1.0)


def _op_equalize(x, m, g):
    """Histogram equalisation per image and channel on 256 levels (PIL ImageOps.equalize-like)."""
    n, c, h, w = x.shape
    levels = (x * 255.0).round().long().clamp(0, 255).reshape(n * c, h * w)
    hist = torch.zeros(n * c, 256, device=x.device, dtype=torch.float32)
    hist.scatter_add_(1, levels, torch.ones_like(levels, dtype=torch.float32))
    cdf = hist.cumsum(dim=1)
    # First non-zero bin's cumulative count (cdf_min); flat images stay unchanged.
    cdf_min = torch.where(hist > 0, cdf, torch.full_like(cdf, float(h * w))).amin(
        dim=1, keepdim=True
    )
    denom = float(h * w) - cdf_min
    mapped = (cdf.gather(1, levels) - cdf_min) / denom.clamp_min(1.0)
    flat = (denom <= 0).expand_as(mapped)
    out = torch.where(flat, levels.float() / 255.0, mapped.clamp(0.0, 1.0))
    return out.reshape(n, c, h, w)


def _op_brightness(x, m, g):
    return _enhance(x, torch.zeros_like(x), m, g)


def _op_contrast(x, m, g):
    gray = x.mean(dim=1, keepdim=True)
    mean = gray.mean(dim=(2, 3), keepdim=True).expand_as(x)
    return _enhance(x, mean, m, g)


def _op_color(x, m, g):
    if x.shape[1] != 3:
        return x
    weights = torch.tensor([0.299, 0.587, 0.114], device=x.device, dtype=x.dtype)
    gray = (x * weights[None, :, None, None]).sum(dim=1, keepdim=True).expand_as(x)
    return _enhance(x, gray, m, g)


def _op_sharpness(x, m, g):
    c = x.shape[1]
    kernel = torch.ones(3, 3, device=x.device, dtype=x.dtype)  # PIL's SMOOTH filter
    kernel[1, 1] = 5.0
    kernel = (kernel / 13.0).expand(c, 1, 3, 3)
    smooth = functional.conv2d(functional.pad(x, (1, 1, 1, 1), mode="replicate"), kernel, groups=c)
    return _enhance(x, smooth, m, g)


def _op_posterize(x, m, g):
    bits = (8.0 - (m * 4.0).round()).clamp(4.0, 8.0)  # keep 4..8 bits
    step = (2.0 ** (8.0 - bits))[:, None, None, None]
    return (torch.floor(x * 255.0 / step) * step / 255.0).clamp(0.0, 1.0)


def _op_solarize(x, m, g):
    threshold = (1.0 - m)[:, None, None, None]
    return torch.where(x >= threshold, 1.0 - x, x)


def _affine(x: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    grid = functional.affine_grid(theta, list(x.shape), align_corners=False)
    return functional.grid_sample(
        x, grid, mode="bilinear", padding_mode="zeros", align_corners=False
    )


def _op_rotate(x, m, g):
    angle = _signs(len(m), g, x.device) * m * (30.0 * math.pi / 180.0)
    cos, sin, zero = torch.cos(angle), torch.sin(angle), torch.zeros_like(angle)
    return _affine(x, torch.stack([cos, -sin, zero, sin, cos, zero], dim=1).view(-1, 2, 3))


def _shift_op(row: int, column: int, factor: float):
    """Shear (an off-diagonal entry of theta) or translate (its last column, ``factor`` 2: grid
    units span 2) by up to 0.3."""

    def op(x, m, g):
        theta = torch.eye(2, 3, device=x.device).repeat(len(m), 1, 1)
        theta[:, row, column] = _signs(len(m), g, x.device) * 0.3 * m * factor
        return _affine(x, theta)

    return op


#: The RandAugment operations (FixMatch's RA list, minus the PIL-only ones), name -> function.
IMAGE_OPS = {
    "identity": _op_identity,
    "autocontrast": _op_autocontrast,
    "equalize": _op_equalize,
    "brightness": _op_brightness,
    "contrast": _op_contrast,
    "color": _op_color,
    "sharpness": _op_sharpness,
    "posterize": _op_posterize,
    "solarize": _op_solarize,
    "rotate": _op_rotate,
    "shear_x": _shift_op(0, 1, 1.0),
    "shear_y": _shift_op(1, 0, 1.0),
    "translate_x": _shift_op(0, 2, 2.0),
    "translate_y": _shift_op(1, 2, 2.0),
}
_OP_LIST = tuple(IMAGE_OPS.values())


def _cutout(
    x: torch.Tensor, *, generator: torch.Generator, size_fraction: float, fill: float
) -> torch.Tensor:
    """Zero-information square of side U(0, size_fraction) x side at a uniform centre, per image."""
    n, _, h, w = x.shape
    device = x.device
    side = (torch.rand(n, generator=generator) * size_fraction * min(h, w)).to(device)
    cy = (torch.rand(n, generator=generator) * h).to(device)
    cx = (torch.rand(n, generator=generator) * w).to(device)
    ys = torch.arange(h, device=device, dtype=torch.float32)[None, :] + 0.5
    xs = torch.arange(w, device=device, dtype=torch.float32)[None, :] + 0.5
    in_y = (ys - cy[:, None]).abs() <= side[:, None] / 2
    in_x = (xs - cx[:, None]).abs() <= side[:, None] / 2
    box = (in_y[:, :, None] & in_x[:, None, :])[:, None, :, :]
    return torch.where(box, torch.full_like(x, fill), x)


def strong_augment(
    x: torch.Tensor,
    *,
    generator: torch.Generator,
    num_ops: int = 2,
    cutout: float = 0.5,
    fill: float = 0.5,
) -> torch.Tensor:
    """RandAugment (per image, ``num_ops`` random ops at random magnitudes) then Cutout of a side
    up to ``cutout`` x the image side (0: none), on ``x`` (N, C, H, W) in [0, 1]."""
    n = x.shape[0]
    if n == 0:
        return x.clone()
    op_index = torch.randint(0, len(_OP_LIST), (n, num_ops), generator=generator).to(x.device)
    magnitude = torch.rand(n, num_ops, generator=generator).to(x.device)
    out = x
    for slot in range(num_ops):
        # The images grouped by operation (a stable sort: ascending within a group), each group
        # a slice: every operation sees the rows it would see gathered one operation at a time,
        # in the same order and drawing the same random numbers, so the result is that of one
        # gather and one scatter per operation, bit for bit, with one of each per slot.
        ops = op_index[:, slot]
        order = torch.sort(ops, stable=True).indices
        counts = torch.bincount(ops, minlength=len(_OP_LIST)).tolist()
        grouped, grouped_m = out.index_select(0, order), magnitude[order, slot]
        pieces, start = [], 0
        for op, count in zip(_OP_LIST, counts):
            if count:
                rows = slice(start, start + count)
                pieces.append(op(grouped[rows], grouped_m[rows], generator))
            start += count
        out = torch.empty_like(out).index_copy_(0, order, torch.cat(pieces))
    if cutout > 0:
        out = _cutout(out, generator=generator, size_fraction=cutout, fill=fill)
    return out


def weak_augment_tabular(
    x: torch.Tensor, *, generator: torch.Generator, feature_std: torch.Tensor, noise: float = 0.05
) -> torch.Tensor:
    """Gaussian jitter of ``noise`` x each feature's standard deviation."""
    eps = torch.randn(x.shape, generator=generator).to(x.device)
    return x + noise * feature_std[None, :] * eps


def strong_augment_tabular(
    x: torch.Tensor,
    *,
    generator: torch.Generator,
    feature_std: torch.Tensor,
    corruption: float = 0.3,
    noise: float = 0.2,
) -> torch.Tensor:
    """SCARF-style corruption (features replaced from random other rows) plus larger jitter."""
    n, f = x.shape
    if n == 0:
        return x.clone()
    replace = (torch.rand(n, f, generator=generator) < corruption).to(x.device)
    donor_rows = torch.randint(0, n, (n, f), generator=generator).to(x.device)
    donors = x.gather(0, donor_rows)
    out = torch.where(replace, donors, x)
    eps = torch.randn(x.shape, generator=generator).to(x.device)
    return out + noise * feature_std[None, :] * eps
