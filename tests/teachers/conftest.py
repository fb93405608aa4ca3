"""Fixtures of the teacher tests: one torch thread (small ops on a shared 2-core machine are
much faster and steadier single-threaded), restored after each test."""

from __future__ import annotations

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

