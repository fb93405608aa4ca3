"""Where the teachers train: the device, and how many teachers fit in its memory at once."""

from __future__ import annotations

import math

from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.validation import describe

__all__ = ["resolve_device", "check_device_spelling", "available_bytes", "choose_chunk_size"]


def check_device_spelling(device) -> None:
    """Refuse a device that is not spelled 'auto', 'cpu', 'cuda' or 'cuda:N' (nothing probed)."""
    if not isinstance(device, str):
        raise InputTypeError(
            f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {describe(device)}"
        )
    if device in ("auto", "cpu", "cuda"):
        return
    if device.startswith("cuda:") and device[5:].isdigit():
        return
    raise InputError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when a GPU is visible, else 'cpu'; a named GPU must exist."""
    import torch

    check_device_spelling(device)
    if device == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return "cpu"
    if not torch.cuda.is_available():
        raise InputError(
            f"device {device!r} was asked for but no CUDA GPU is available; "
            "use --device cpu (or auto)"
        )
    index = int(device[5:]) if ":" in device else 0
    count = torch.cuda.device_count()
    if index >= count:
        raise InputError(f"device {device!r} does not exist: {count} CUDA device(s) visible")
    return f"cuda:{index}"


def available_bytes(device: str) -> int:
    """Bytes a chunk of teachers may take on ``device`` (60 % of a GPU's free memory; on the
    CPU at most half of what is free and at most 2 GiB)."""
    if device.startswith("cuda"):
        import torch

        free, _total = torch.cuda.mem_get_info(device)
        return int(free * 0.6)
    try:
        with open("/proc/meminfo") as fh:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in fh}
        avail = info.get("MemAvailable", 8 << 30)
    except OSError:  # not Linux
        avail = 8 << 30
    return int(min(avail * 0.5, 2 << 30))


def choose_chunk_size(num_teachers: int, per_teacher: int, budget: int) -> int:
    """Teachers per chunk: as many as ``budget`` bytes hold, balanced across chunks."""
    fit = max(1, min(num_teachers, budget // max(per_teacher, 1)))
    chunks = math.ceil(num_teachers / fit)
    return math.ceil(num_teachers / chunks)
