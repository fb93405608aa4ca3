"""The peak GPU memory of one stage: what torch's CUDA caching allocator held at most while the
stage ran, per device it used (``torch.cuda.max_memory_allocated`` for the tensors,
``max_memory_reserved`` for the allocator's cached blocks, which is what other processes on the
card cannot use; the CUDA context itself, a few hundred MB, is in neither).

Torch is never imported here: a stage that did not load torch, or did not initialise CUDA, has
no GPU memory to report (``None``). The counters are process-wide, so :func:`reset` is called
before a stage and :func:`peaks` after it; a stage that initialises CUDA itself starts from zero.
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
