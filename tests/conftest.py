"""Shared test fixtures."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


SOURCE_FOLDERS = ("pate", "analysis", "teachers", "student")


def source_modules() -> list[str]:
    """Every module of the four source folders, once, as repository-relative paths
    (pate/analysis, pate/teachers and pate/student are symlinks to analysis/, teachers/,
    student/, so they are skipped under pate/)."""
    out = []
    for root in SOURCE_FOLDERS:
        for path in sorted((REPO / root).rglob("*.py")):
            rel = path.relative_to(REPO)
            if root == "pate" and rel.parts[1] in SOURCE_FOLDERS[1:]:
                continue
            out.append(rel.as_posix())
    return out


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "each_source_module(exclude=None): run the test once per source module, its "
        "repository-relative path as the argument `path` (exclude: a predicate on the path)",
    )


def pytest_generate_tests(metafunc):
    """``@pytest.mark.each_source_module``: the static checks over the source tree (sizes,
    config reads) share one list of modules."""
    marker = metafunc.definition.get_closest_marker("each_source_module")
    if marker is not None:
        exclude = marker.kwargs.get("exclude") or (lambda path: False)
        metafunc.parametrize("path", [p for p in source_modules() if not exclude(p)])


@pytest.fixture(scope="session")
def source_module_paths() -> list[str]:
    return source_modules()


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(scope="session", autouse=True)
def _no_user_ledger(tmp_path_factory):
    """No test, and no module- or session-scoped fixture, ever touches the user's ledger."""
    import os

    before = os.environ.get("PATE_LEDGER")
    os.environ["PATE_LEDGER"] = str(tmp_path_factory.getbasetemp() / "session-ledger.sqlite3")
    yield
    if before is None:
        os.environ.pop("PATE_LEDGER", None)
    else:
        os.environ["PATE_LEDGER"] = before


@pytest.fixture(autouse=True)
def _private_ledger(tmp_path, monkeypatch):
    """Each test has its own default ledger (budgets never leak from one test to another)."""
    monkeypatch.setenv("PATE_LEDGER", str(tmp_path / "default-ledger.sqlite3"))


def _small_digits_config(folder, *, replace=(), extra="", name="digits-small.toml") -> pathlib.Path:
    text = (REPO / "configs" / "digits.toml").read_text()
    for old, new in (
        ("epochs = 40", "epochs = 16"),
        ("epochs = 6", "epochs = 1"),
        ("steps_per_epoch = 20", "steps_per_epoch = 8"),
        *replace,
    ):
        if old not in text:
            raise ValueError(f"small_digits_config: {old!r} is not in configs/digits.toml")
        text = text.replace(old, new)
    path = pathlib.Path(folder) / name
    path.write_text(text + extra)
    return path


@pytest.fixture(scope="session")
def small_digits():
    """A factory: ``small_digits(folder, replace=((old, new), ...), extra="...")`` writes
    configs/digits.toml with short teacher and student training (seconds) into ``folder``."""
    return _small_digits_config


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
    from pate.teachers.data import load_pate_data

    return load_pate_data("digits")
