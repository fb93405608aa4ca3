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
