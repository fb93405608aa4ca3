"""Fixtures of the teacher tests: one torch thread (small ops on a shared 2-core machine are
much faster and steadier single-threaded), restored after each test."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _one_torch_thread(one_torch_thread):
    yield
