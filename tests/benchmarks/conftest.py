"""Shared helpers for the benchmark scripts' tests: benchmarks/ is not a package, so each script
is loaded from its file."""

from __future__ import annotations

import importlib.util
import pathlib
from types import ModuleType

import pytest

BENCHMARKS = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str) -> ModuleType:
    """benchmarks/<name>.py as a module (under a private name, not importable elsewhere)."""
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def load_benchmark():
    """``load_benchmark(name)``: benchmarks/<name>.py as a module."""
    return _load
