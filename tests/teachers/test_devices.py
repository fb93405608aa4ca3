"""pate.teachers.devices: device names checked before anything is probed, chunks sized to memory."""

from __future__ import annotations

import pytest

from pate.teachers.devices import (
    available_bytes,
    check_device_spelling,
    choose_chunk_size,
    resolve_device,
)


def test_chunks_fit_the_budget_and_are_balanced():
    # 100 teachers fit; 250 teachers are then 3 chunks, balanced to 84 + 84 + 82
    assert choose_chunk_size(250, 10, 1000) == 84
    assert choose_chunk_size(10, 1, 100) == 10  # everything fits: one chunk
    assert choose_chunk_size(10, 100, 1) == 1  # nothing fits: one teacher at a time
    assert choose_chunk_size(5, 0, 1) == 1  # a zero estimate is not a division by 0


@pytest.mark.parametrize("bad", ["gpu", "cuda:", "cuda:x", "CPU", "cuda:-1"])
def test_misspelled_devices_are_refused_naming_the_value(bad):
    with pytest.raises(ValueError, match=f"'auto', 'cpu', 'cuda' or 'cuda:N', got {bad!r}"):
        check_device_spelling(bad)
    with pytest.raises(ValueError, match="cuda:N"):
        resolve_device(bad)


def test_a_device_that_is_not_a_string_is_a_type_error():
    with pytest.raises(TypeError, match="device must be"):
        check_device_spelling(0)


@pytest.mark.parametrize("good", ["auto", "cpu", "cuda", "cuda:0", "cuda:12"])
def test_well_spelled_devices_pass(good):
    check_device_spelling(good)


def test_the_cpu_needs_no_gpu_and_its_budget_is_capped():
    assert resolve_device("cpu") == "cpu"
    assert 0 < available_bytes("cpu") <= 2 << 30
