"""pate.core.gpu_memory: the peak GPU memory of a stage (issue #33), without a GPU: a process
that never initialised CUDA reports None, and the record's fields come from torch.cuda's
counters (a stand-in torch module)."""

from __future__ import annotations

import sys
import types

from pate.core import gpu_memory


class _FakeCuda:
    def __init__(self, *, initialized=True):
        self.initialized = initialized
        self.resets = []

    def is_available(self):
        return True

    def is_initialized(self):
        return self.initialized

    def device_count(self):
        return 2

    def reset_peak_memory_stats(self, index):
        self.resets.append(index)

    def max_memory_reserved(self, index):
        return [0, 4096][index]  # device 0 unused by this stage

    def max_memory_allocated(self, index):
        return [0, 1024][index]

    def get_device_name(self, index):
        return f"card {index}"


def _with_torch(monkeypatch, cuda):
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))


def test_no_torch_no_record(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    gpu_memory.reset()
    assert gpu_memory.peaks() is None


def test_cuda_not_initialised_no_record(monkeypatch):
    cuda = _FakeCuda(initialized=False)
    _with_torch(monkeypatch, cuda)
    gpu_memory.reset()
    assert cuda.resets == []
    assert gpu_memory.peaks() is None


def test_peaks_per_used_device(monkeypatch):
    cuda = _FakeCuda()
    _with_torch(monkeypatch, cuda)
    gpu_memory.reset()
    assert cuda.resets == [0, 1]
    assert gpu_memory.peaks() == [
        {"index": 1, "name": "card 1", "peak_allocated_bytes": 1024, "peak_reserved_bytes": 4096}
    ]
