"""The peak GPU memory of one stage, per device: torch's ``max_memory_allocated`` (tensors) and
``max_memory_reserved`` (the caching allocator's blocks, what other processes cannot use; the
CUDA context is in neither). Torch is never imported here: a stage without torch or CUDA has
``None``. The counters are process-wide: :func:`reset` before a stage, :func:`peaks` after it.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["peaks", "reset"]


def _cuda() -> Any:
    """torch.cuda when torch is loaded and CUDA initialised in this process, else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    cuda = torch.cuda
    return cuda if cuda.is_available() and cuda.is_initialized() else None


def reset() -> None:
    """Start the peak counters of every CUDA device from what is held now."""
    cuda = _cuda()
    if cuda is not None:
        for index in range(cuda.device_count()):
            cuda.reset_peak_memory_stats(index)


def peaks() -> list[dict[str, Any]] | None:
    """One record per CUDA device the process allocated on since :func:`reset` (``index``,
    ``name``, ``peak_allocated_bytes``, ``peak_reserved_bytes``), or None without CUDA."""
    cuda = _cuda()
    if cuda is None:
        return None
    out = []
    for index in range(cuda.device_count()):
        reserved = int(cuda.max_memory_reserved(index))
        if reserved > 0:
            out.append(
                {
                    "index": index,
                    "name": str(cuda.get_device_name(index)),
                    "peak_allocated_bytes": int(cuda.max_memory_allocated(index)),
                    "peak_reserved_bytes": reserved,
                }
            )
    return out or None
