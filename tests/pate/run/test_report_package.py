"""The shape of the package ``pate.run.report`` (issue #32): one concept a module, no file over 700
lines, no function over 80, no private helper imported from outside its module, and the
Markdown / HTML templates shipped as package data and found with importlib.resources."""

from __future__ import annotations

import ast
from importlib import resources
from pathlib import Path

import jinja2
import pytest

from pate.run import rundir
from pate.run.report import templating

REPORT = Path(__file__).resolve().parents[3] / "pate" / "run" / "report"
TEMPLATES = (
    "appendix.md.j2",
    "budget_words.md.j2",
    "first_page.md.j2",
    "glossary.md.j2",
    "kind_other.md.j2",
    "kind_release.md.j2",
    "kind_sample.md.j2",
    "kind_vote.md.j2",
    "ledger.md.j2",
    "plots.md.j2",
    "report.css",
    "report.html.j2",
    "report.md.j2",
    "sanitized.md.j2",
    "statement.md.j2",
    "utility.md.j2",
)


def _modules() -> list[Path]:
    found = sorted(REPORT.glob("*.py"))
    assert len(found) >= 8, f"pate/run/report/*.py: expected the package's modules, found {found}"
    return found


def test_no_file_under_pate_report_exceeds_700_lines():
    files = [p for p in sorted(REPORT.rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    assert {p.name for p in files} >= {"__init__.py", *TEMPLATES}
    too_long = {
        p.relative_to(REPORT).as_posix(): n
        for p in files
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 700
    }
    assert not too_long, f"files over 700 lines (split them along their seams): {too_long}"


def test_no_function_under_pate_report_exceeds_80_lines():
    too_long = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > 80:
                    too_long.append(f"{path.name}:{node.lineno} {node.name} ({lines} lines)")
    assert not too_long, f"functions over 80 lines: {too_long}"


def _private_uses(tree: ast.Module) -> list[str]:
    """``from pate.run.report.x import _y`` and ``M._y`` where ``M`` is a pate.run.report module."""
    aliases, found = set(), []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom) and node.module == "pate.run"
        ):  # from pate.run import report
            aliases.update(n.asname or n.name for n in node.names if n.name == "report")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pate.run.report"):
            for name in node.names:
                if name.name.startswith("_"):
                    found.append(f"from {node.module} import {name.name}")
                if node.module == "pate.run.report":  # from pate.run.report import formatting
                    aliases.add(name.asname or name.name)
        elif isinstance(node, ast.Import):
            for name in node.names:
                if name.name.startswith("pate.run.report"):
                    aliases.add(name.asname or name.name)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            found.append(f"{node.value.id}.{node.attr}")
    return found


def test_no_private_helper_is_imported_across_modules():
    root = REPORT.parents[3]  # the repository (REPORT is pate/run/report)
    users = _modules() + [
        p
        for folder in ("pate", "teachers", "student", "tests", "benchmarks")
        for p in sorted((root / folder).rglob("*.py"))
        if REPORT not in p.parents
    ]
    offending = {}
    for path in users:
        text = path.read_text(encoding="utf-8")
        if "pate.run.report" in text or "from pate.run import report" in text:
            uses = _private_uses(ast.parse(text))
            if uses:
                offending[path.relative_to(root).as_posix()] = uses
    assert not offending, f"private names of pate.run.report used outside their module: {offending}"


def test_the_private_use_finder_finds_one():
    tree = ast.parse(
        "from pate.run.report import wording as W\nfrom pate.run.report.render import _x\n"
        "from pate.run import report as rep\nW._secret()\nW.public()\nrep._old()\n"
    )
    assert sorted(_private_uses(tree)) == [
        "W._secret",
        "from pate.run.report.render import _x",
        "rep._old",
    ]


@pytest.mark.parametrize("name", TEMPLATES)
def test_templates_are_found_via_importlib_resources(name):
    entry = resources.files("pate.run.report").joinpath("templates", name)
    assert entry.is_file(), f"pate/run/report/templates/{name} is not in the package"
    text = entry.read_text(encoding="utf-8")
    assert text.strip() and templating.template_source(name) == text


def test_a_missing_template_says_what_to_do():
    with pytest.raises(jinja2.TemplateNotFound, match="nope.j2 .*reinstall pate-learn"):
        templating.template_source("nope.j2")


def test_the_rule_check_a_run_recorded_is_read_back(tmp_path):
    """The class-means rule check in ``aggregate.json`` (records.rule_check) comes back as the
    check itself (the report's writer adds its warning when it is weak); other runs, missing or
    malformed summaries give None."""
    import json

    from pate.core.release_check import RuleCheck
    from pate.core.tuned_defaults import MISMATCH_WARNING
    from pate.run.report.content import read_rule_check

    assert read_rule_check(tmp_path) is None  # no summary
    (tmp_path / rundir.PRIVATE_DIR).mkdir()
    check = RuleCheck(rule="qda", chosen="qda", ratios={"qda": 5.0, "qda-shrunk": 5.5})
    (tmp_path / rundir.AGGREGATE).write_text(
        json.dumps({"records": {"rule_check": check.to_dict()}})
    )
    back = read_rule_check(tmp_path)
    assert back == check and back.weak and 5.0 > MISMATCH_WARNING
    assert "not reproduced by the labelling rule (qda)" in back.warning_text()
    (tmp_path / rundir.AGGREGATE).write_text(json.dumps({"records": {"rule": "logistic"}}))
    assert read_rule_check(tmp_path) is None
    (tmp_path / rundir.AGGREGATE).write_text('{"records": {"rule_check": {"chosen": 1}}}')
    assert read_rule_check(tmp_path) is None
