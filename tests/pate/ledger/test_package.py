"""The ledger package keeps its shape: small files, short functions, one public face.

``pate/ledger.py`` was one 2 215-line file; it is now the package ``pate/ledger/`` split along
its seams (issue #32). These tests keep it that way.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

import pate.ledger

PACKAGE = pathlib.Path(pate.ledger.__file__).resolve().parent
FILES = sorted(PACKAGE.glob("*.py"))
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80


def test_the_package_has_its_modules():
    names = {f.stem for f in FILES}
    assert {
        "__init__",
        "ledger",
        "ledger_file",
        "keying",
        "identity",
        "dataset_registry",
        "recorded_spend",
        "composition",
        "spending",
        "budget_checks",
        "summaries",
    } <= names, names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_file_of_the_ledger_package_exceeds_500_lines(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_FILE_LINES, (
        f"pate/ledger/{path.name} has {lines} lines (> {MAX_FILE_LINES}): it holds more than one "
        "concept; split it along its seams into another module of the package"
    )


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_function_of_the_ledger_package_exceeds_80_lines(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines, l.{node.lineno})"
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"pate/ledger/{path.name}: functions over {MAX_FUNCTION_LINES} lines: {long}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_private_name_is_imported_from_another_module(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    private = [
        f"l.{node.lineno}: from {node.module} import {alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pate")
        for alias in node.names
        if alias.name.startswith("_")
    ]
    assert not private, (
        f"pate/ledger/{path.name} imports private names {private}; give a "
        "helper that several modules use a public name in its module"
    )


def test_every_public_name_is_importable_from_the_package():
    assert all(hasattr(pate.ledger, name) for name in pate.ledger.__all__)


def test_the_public_classes_are_one_class_each():
    """``pate.ledger.Reservation`` is the class the ledger hands out (tests patch its ``commit``)."""
    from pate.ledger.ledger import Reservation

    assert pate.ledger.Reservation is Reservation
