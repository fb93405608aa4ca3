"""A wide residual network for small images: the stronger student (``model = "wrn16_4"``).

More: docs/teachers.md, "pate.teachers.wide_resnet".
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional

from pate.analysis.errors import InputError

__all__ = ["wide_resnet"]


class _Block(nn.Module):
    """Pre-activation basic block; a 1x1 convolution on the shortcut where the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(8, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.norm2 = nn.GroupNorm(8, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.shortcut = (
            None
            if stride == 1 and cin == cout
            else nn.Conv2d(cin, cout, 1, stride=stride, bias=False)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = functional.relu(self.norm1(x))
        skip = x if self.shortcut is None else self.shortcut(out)
        out = self.conv1(out)
        out = self.conv2(functional.relu(self.norm2(out)))
        return out + skip


class _WideResNet(nn.Module):
    def __init__(self, channels: int, num_classes: int, *, depth: int, widen: int) -> None:
        super().__init__()
        blocks = (depth - 4) // 6
        widths = [16 * widen, 32 * widen, 64 * widen]
        self.stem = nn.Conv2d(channels, 16, 3, padding=1, bias=False)
        layers, cin = [], 16
        for stage, cout in enumerate(widths):
            for b in range(blocks):
                layers.append(_Block(cin, cout, 2 if (stage > 0 and b == 0) else 1))
                cin = cout
        self.blocks = nn.Sequential(*layers)
        self.norm = nn.GroupNorm(8, cin)
        self.head = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.Linear):
                nn.init.xavier_normal_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = functional.relu(self.norm(self.blocks(self.stem(x))))
        return self.head(out.mean(dim=(2, 3)))


def wide_resnet(channels: int, num_classes: int, *, depth: int = 16, widen: int = 4) -> nn.Module:
    """WRN-``depth``-``widen`` for ``channels``-channel images of any size >= 4x4."""
    if depth < 10 or (depth - 4) % 6:
        raise InputError(f"wide_resnet depth must be 6 n + 4 with n >= 1, got {depth!r}")
    if widen < 1:
        raise InputError(f"wide_resnet widen must be >= 1, got {widen!r}")
    return _WideResNet(channels, num_classes, depth=depth, widen=widen)
