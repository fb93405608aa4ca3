"""The shape of :mod:`pate.run_analysis` (issue #32): ``build_analysis`` is a sequence of named
steps, none over 80 lines. What the steps compute is checked end to end by the pipeline and
report tests (``test_pipeline.py``, ``test_report.py``, ``test_class_means_pipeline.py``)."""

from __future__ import annotations

import ast
import pathlib

import pate.run_analysis

MAX_FUNCTION_LINES = 80


def long_functions(path: pathlib.Path) -> list[str]:
    """The functions (and methods) of ``path`` over :data:`MAX_FUNCTION_LINES` lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [f"{node.name} ({node.end_lineno - node.lineno + 1} lines, l.{node.lineno})"
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]


def test_long_functions_finds_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    path = tmp_path / "module.py"
    path.write_text(f"def short():\n    pass\n\n\ndef long():\n{body}\n", encoding="utf-8")
    assert long_functions(path) == [f"long ({MAX_FUNCTION_LINES + 1} lines, l.5)"]


def test_no_function_of_run_analysis_exceeds_80_lines():
    path = pathlib.Path(pate.run_analysis.__file__)
    long = long_functions(path)
    assert not long, (f"pate/run_analysis.py: functions over {MAX_FUNCTION_LINES} lines: {long}; "
                      "split each into named steps")
