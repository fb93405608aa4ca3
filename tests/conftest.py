"""Shared test fixtures."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(autouse=True)
def _private_ledger(tmp_path_factory, monkeypatch):
    """No test ever touches the user's privacy-budget ledger."""
    monkeypatch.setenv("PATE_LEDGER", str(tmp_path_factory.getbasetemp() / "default-ledger.sqlite3"))


@pytest.fixture
def one_torch_thread():
    """Tiny models run fastest and steadiest on one thread on a shared 2-core machine; the
    previous thread count is restored afterwards (teachers/ and student/ use it for every test)."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def digits():
    """scikit-learn's digits in the PATE split (private 1000 / public 597 / evaluation 200)."""
    from teachers.data import load_pate_data

    return load_pate_data("digits")
