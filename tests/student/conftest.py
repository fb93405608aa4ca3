"""Fixtures of the student tests (digits and one torch thread come from tests/conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(autouse=True)
def _one_torch_thread(one_torch_thread):
    yield


def _first_k_labels(y: np.ndarray, k: int) -> np.ndarray:
    labels = np.full(y.shape[0], -1, dtype=np.int64)
    labels[:k] = y[:k]
    return labels


@pytest.fixture(scope="session")
def first_k_labels():
    """``first_k_labels(y, k)``: the true labels of the first k items, -1 elsewhere."""
    return _first_k_labels
