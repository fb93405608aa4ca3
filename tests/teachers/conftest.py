"""Fixtures of the teacher tests: one torch thread (small ops on a shared 2-core machine are
much faster and steadier single-threaded), restored after each test."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(autouse=True)
def _one_torch_thread():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def digits():
    from teachers.data import load_pate_data

    return load_pate_data("digits")


def random_shards(num_records, sizes, seed=0):
    """Disjoint shards of the given (unequal) sizes from the first sum(sizes) of a permutation."""
    perm = np.random.default_rng(seed).permutation(num_records)
    bounds = np.cumsum([0] + list(sizes))
    return [np.sort(perm[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
