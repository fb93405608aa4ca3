"""The ScatterNet front-end's scattering transform (J = 2, L = 8), a whole layer at once.
Kymatio's 2-D modules are imported directly (``import kymatio.torch`` fails with scipy >=
1.15). More: docs/teachers.md, "pate.teachers.scattering".
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from pate.analysis.errors import InputError

__all__ = ["Scattering2D", "J", "L", "PATHS", "CHUNK"]

J, L = 2, 8
#: Scattering paths per input channel for J = 2, L = 8: 1 + J L + L^2 J (J - 1) / 2.
PATHS = 1 + J * L + L * L * J * (J - 1) // 2
#: Images (times channels) computed at a time.
CHUNK = 32


def _padded_shape(height: int, width: int) -> tuple[int, int]:
    from kymatio.scattering2d.utils import compute_padding

    return tuple(int(s) for s in compute_padding(height, width, J))


def _lowpass_matrix(phi: np.ndarray, k: int) -> np.ndarray:
    """The (pixels, outputs) matrix of ``v -> crop(Re F^-1 P_k(F(v) phi))`` (identity 1)."""
    m, n = phi.shape
    units = np.eye(m * n).reshape(m * n, m, n)
    spectra = (np.fft.fft2(units) * phi).reshape(m * n, k, m // k, k, n // k).mean(axis=(1, 3))
    out = np.fft.ifft2(spectra).real[:, 1:-1, 1:-1]
    return out.reshape(m * n, -1)


def _periodized_filters(psi: np.ndarray) -> np.ndarray:
    """The 8 filters ``psi`` (8, m, n) as (m/2 * n/2, 4, 8): per frequency w of the small grid,
    the (block -> filter) matrix of identity 2 (the 1/4 of the mean included)."""
    f, m, n = psi.shape
    blocks = psi.reshape(f, 2, m // 2, 2, n // 2).transpose(2, 4, 1, 3, 0)
    return np.ascontiguousarray(blocks.reshape(m // 2 * (n // 2), 4, f) / 4.0)


@functools.lru_cache(maxsize=8)
def _constants(height: int, width: int) -> dict[str, np.ndarray]:
    """The filters and low-pass matrices of one image size, computed once per process (about
    a quarter of a second each: every ScatterNet of that size shares them)."""
    from kymatio.scattering2d.filter_bank import filter_bank

    pm, pn = _padded_shape(height, width)
    bank = filter_bank(pm, pn, J, L)
    phi_0, phi_1 = bank["phi"]["levels"]
    psi = np.stack([p["levels"][0] for p in bank["psi"]])  # (16, pm, pn): j = 0, then 1
    return {
        "lowpass_0": _lowpass_matrix(phi_0, 4),  # full grid -> output grid
        "lowpass_1": _lowpass_matrix(phi_1, 2),  # half grid -> output grid
        "wavelets_0": psi[:L],  # j = 0, full grid
        "wavelets_1": _periodized_filters(psi[L:]),  # j = 1, to the half grid
    }


def _filter_periodize(z: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
    """``P_2(z psi_f)`` for every filter f (identity 2): z (rows, m, n) complex ->
    (rows, 8, m/2, n/2), contiguous."""
    rows, m, n = z.shape
    h, w = m // 2, n // 2
    by_frequency = z.reshape(rows, 2, h, 2, w).permute(2, 4, 0, 1, 3).reshape(h * w, rows, 4)
    out = torch.bmm(by_frequency, blocks.to(z.dtype))  # (h w, rows, 8)
    return out.permute(1, 2, 0).reshape(rows, -1, h, w).contiguous()


class Scattering2D(torch.nn.Module):
    """(B, C, H, W) images -> (B, C * 81, H / 4, W / 4) scattering coefficients
    (docs/teachers.md); H and W multiples of 4 and at least 8."""

    def __init__(self, height: int, width: int):
        super().__init__()
        self.height, self.width = int(height), int(width)
        if self.height % 4 or self.width % 4 or min(self.height, self.width) < 8:
            raise InputError(
                f"Scattering2D needs H and W multiples of 4 and at least 8, got "
                f"{self.height}x{self.width}"
            )
        pm, pn = _padded_shape(self.height, self.width)
        self.padded = (pm, pn)
        # torch's pad order: left, right, top, bottom (kymatio's split: the odd pixel after)
        dw, dh = pn - self.width, pm - self.height
        self.padding = (dw // 2, (dw + 1) // 2, dh // 2, (dh + 1) // 2)
        for name, value in _constants(self.height, self.width).items():
            # float64; copied, so that a module's buffers never share the cached arrays
            self.register_buffer(name, torch.tensor(value), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        if (h, w) != (self.height, self.width):
            raise InputError(
                f"Scattering2D built for {self.height}x{self.width} images, got {h}x{w}"
            )
        rows = x.reshape(b * c, 1, h, w)
        out = [self._paths(rows[i : i + CHUNK]) for i in range(0, b * c, CHUNK)]
        return torch.cat(out).reshape(b, c * PATHS, h // 4, w // 4)

    def _paths(self, x: torch.Tensor) -> torch.Tensor:
        """(rows, 1, H, W) -> (rows, 81, H/4 * W/4)."""
        n = len(x)
        pm, pn = self.padded
        dtype = x.dtype
        low_0, low_1 = self.lowpass_0.to(dtype), self.lowpass_1.to(dtype)
        u = torch.nn.functional.pad(x, self.padding, mode="reflect").reshape(n, pm, pn)
        s_0 = u.reshape(n, 1, -1) @ low_0
        spectrum = torch.fft.fft2(u)
        u_1_fine = torch.fft.ifft2(spectrum[:, None] * self.wavelets_0.to(dtype)).abs()
        u_1_coarse = torch.fft.ifft2(_filter_periodize(spectrum, self.wavelets_1)).abs()
        s_1_fine = u_1_fine.reshape(n, L, -1) @ low_0
        s_1_coarse = u_1_coarse.reshape(n, L, -1) @ low_1
        spectrum_1 = torch.fft.fft2(u_1_fine).reshape(n * L, pm, pn)
        u_2 = torch.fft.ifft2(_filter_periodize(spectrum_1, self.wavelets_1)).abs()
        s_2 = u_2.reshape(n, L * L, -1) @ low_1
        return torch.cat([s_0, s_1_fine, s_1_coarse, s_2], dim=1)
