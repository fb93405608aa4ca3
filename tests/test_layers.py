"""The layers of pate-learn point one way, and no module imports itself back.

* ``test_layers_contract_is_kept``: the import-linter contract of ``pyproject.toml``
  (``[tool.importlinter]``): CLI > orchestration > student > teachers > pate core > analysis (the student builds its
  network from the teachers' model zoo; teachers never import the student).
  A lower layer never imports a higher one.
* ``test_every_pate_module_has_a_layer``: a new ``pate`` module must be given a layer.
* ``test_no_import_cycles``: no cycle between the modules of ``pate`` (with ``pate.analysis``,
  ``pate.teachers``, ``pate.student``).
* ``test_pate_package_imports_only_the_errors``: ``import pate`` stays light.

Imports inside functions count (for grimp and import-linter alike): a lazy import is still a
dependency. On failure the messages print every offending import chain with line numbers.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tomllib

import pytest

grimp = pytest.importorskip(
    "grimp", reason="the layer checks need import-linter: pip install -e '.[dev]'"
)

REPO = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("pate",)  # pate.analysis, pate.teachers, pate.student are its subpackages


def _lint_imports() -> str:
    found = pathlib.Path(sys.executable).with_name("lint-imports")
    exe = str(found) if found.exists() else shutil.which("lint-imports")
    if exe is None:
        pytest.fail("lint-imports is not installed: pip install -e '.[dev]' (import-linter)")
    return exe


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph(*PACKAGES, cache_dir=None)


def _layers() -> list[list[str]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers"]
    out = []
    for layer in layers:
        names = layer.replace("|", ":").split(":")
        out.append([name.strip().strip("()") for name in names])
    return out


def _where(graph, importer: str, imported: str) -> str:
    details = graph.get_import_details(importer=importer, imported=imported)
    lines = ", ".join(f"l.{d['line_number']}: {d['line_contents'].strip()}" for d in details)
    return f"{importer} -> {imported} ({lines})"


def test_layers_contract_is_kept():
    env = {**os.environ, "NO_COLOR": "1", "TERM": "dumb", "COLUMNS": "160"}
    done = subprocess.run(
        [_lint_imports(), "--no-cache", "--no-logo", "pyproject.toml"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        report = done.stdout + done.stderr
        start = report.find("Broken contracts")
        pytest.fail(
            "the layers contract of pyproject.toml [tool.importlinter] is broken: a "
            "lower layer imports a higher one, or teachers and student import each other "
            "(move the shared code down a layer, or pass what it needs in from above):\n\n"
            + (report[start:] if start >= 0 else report),
            pytrace=False,
        )


def test_every_pate_module_has_a_layer(graph):
    declared = [name for layer in _layers() for name in layer]
    missing = sorted(
        module
        for module in graph.find_children("pate")
        if not any(module == name or module.startswith(name + ".") for name in declared)
    )
    assert not missing, (
        f"modules without a layer: {', '.join(missing)}; add each to its layer in "
        "pyproject.toml [tool.importlinter] (CLI, orchestration, student, teachers, pate core)"
    )


def _strongly_connected(graph) -> list[list[str]]:
    """Tarjan's algorithm, iterative: the strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.find_modules_directly_imported_by(succ)))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return components


def _a_cycle(graph, component: list[str]) -> list[str]:
    """The shortest cycle through the first module of a strongly connected component."""
    start = component[0]
    best: tuple[str, ...] | None = None
    for succ in sorted(graph.find_modules_directly_imported_by(start)):
        if succ not in component:
            continue
        back = graph.find_shortest_chain(importer=succ, imported=start)
        if back is not None and (best is None or len(back) + 1 < len(best)):
            best = (start, *back)
    return list(best)


def test_no_import_cycles(graph):
    components = _strongly_connected(graph)
    report = []
    for component in components:
        cycle = _a_cycle(graph, component)
        chain = "\n".join(f"    {_where(graph, a, b)}" for a, b in zip(cycle, cycle[1:]))
        report.append(f"  cycle among {', '.join(component)}:\n{chain}")
    if components:
        pytest.fail(
            "import cycles between modules (break each by moving the shared code down a "
            "layer, or by passing it in from above):\n" + "\n".join(report),
            pytrace=False,
        )


ERRORS = {"pate.analysis.errors", "pate.core.errors", "pate.teachers.errors"}


def test_pate_package_imports_only_the_errors(graph):
    assert graph.find_modules_directly_imported_by("pate") == ERRORS, (
        f"pate/__init__.py must import the errors ({', '.join(sorted(ERRORS))}) only "
        "(import pate stays fast and torch-free)"
    )


def test_the_errors_modules_import_only_the_errors_below_them(graph):
    """Each layer's errors module builds on the base in pate.analysis.errors and imports nothing
    else of pate, so that importing it (import pate does) stays light."""
    for module in ERRORS:
        assert graph.find_modules_directly_imported_by(module) <= {"pate.analysis.errors"}, module


def test_cycle_finder_finds_a_cycle():
    """The cycle finder itself on a known graph (so a pass of test_no_import_cycles means something)."""
    g = grimp.ImportGraph()
    for a, b in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d"), ("p.d", "p.e")]:
        g.add_import(importer=a, imported=b, line_number=1, line_contents=f"import {b}")
    components = _strongly_connected(g)
    assert components == [["p.a", "p.b", "p.c"]]
    assert _a_cycle(g, components[0]) == ["p.a", "p.b", "p.c", "p.a"]
