"""Fixtures of the student tests: sklearn digits through the teachers' loader, one torch thread."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tiny models run fastest on one thread, and the test machine's cores are shared."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def digits():
    from teachers.data import load_pate_data

    return load_pate_data("digits")


def _first_k_labels(y: np.ndarray, k: int) -> np.ndarray:
    labels = np.full(y.shape[0], -1, dtype=np.int64)
    labels[:k] = y[:k]
    return labels


@pytest.fixture(scope="session")
def first_k_labels():
    """``first_k_labels(y, k)``: the true labels of the first k items, -1 elsewhere."""
    return _first_k_labels
