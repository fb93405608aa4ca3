"""The built-in datasets' image conversion: float32 in [0, 1] written once (issue #33)."""

from __future__ import annotations

import tracemalloc

import numpy as np

from pate.teachers.builtin_datasets import unit_float32


def test_unit_float32_is_astype_then_divide_bit_for_bit():
    u8 = np.random.default_rng(0).integers(0, 256, (50, 3, 8, 8), dtype=np.uint8)
    for images in (u8, np.transpose(u8, (3, 2, 0, 1))):  # SVHN's transposed (strided) view
        out = unit_float32(images)
        want = images.astype(np.float32) / 255.0
        assert out.dtype == np.float32 and out.flags.c_contiguous
        np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
    assert unit_float32(np.array([0, 255], dtype=np.uint8)).tolist() == [0.0, 1.0]


def test_unit_float32_holds_one_float32_copy():
    images = np.zeros((2000, 1, 28, 28), dtype=np.uint8)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        out = unit_float32(images)
        _, peak = tracemalloc.get_traced_memory()
        nbytes = out.nbytes
        del out
        tracemalloc.reset_peak()
        old = images.astype(np.float32) / 255.0
        _, peak_old = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1.1 * nbytes and peak_old > 1.9 * nbytes  # the former way: two float32 copies
    del old
