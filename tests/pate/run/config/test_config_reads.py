"""No string-keyed config reads outside the config package (issues #32, #49): the run, the
pipeline and the stages hold a typed :class:`pate.run.config.RunConfig` and read its attributes
(``run.config.run.device``, ``config.aggregator_params()``), so each key is spelt in one place.

A read is ``X["..."]`` or ``X.get("...")`` with a string key and ``X`` a config: a name
``config``/``cfg``/``conf`` or an attribute ``.config`` (``run.config``, ``self.ctx.config``).
That also catches ``priv = config["privacy"]`` followed by ``priv["delta"]``, which a check of
chained subscripts alone would miss."""

from __future__ import annotations

import ast
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[4]
CONFIG_PACKAGE = "pate/run/config/"
CONFIG_NAMES = frozenset({"config", "cfg", "conf"})

#: Modules that may still read the dict, each with why.
ALLOWED = {
    # The report's schema check reads the copy of the config inside an analysis.json read from
    # disk, which may be malformed or hand-edited: it checks each value's type itself and names
    # the document's field (config.privacy.release_order), never a section of a live config.
    "pate/run/report/schema.py": "checks the config copy inside an analysis.json document",
}


def _is_config(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id in CONFIG_NAMES) or (
        isinstance(node, ast.Attribute) and node.attr == "config"
    )


def _string_key(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def table_reads(source: str) -> list[tuple[int, str]]:
    """``(line, key)`` of every string-keyed read of a config in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and _is_config(node.value):
            table = _string_key(node.slice)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and _is_config(node.func.value)
            and node.args
        ):
            table = _string_key(node.args[0])
        else:
            continue
        if table is not None:
            found.append((node.lineno, table))
    return sorted(found)


def test_the_finder_finds_each_form_of_read():
    source = (
        'a = config["run"]["device"]\nb = run.config["aggregator"].get("queries")\n'
        'priv = cfg["privacy"]\nknn = self.ctx.config.get("knn") or {}\n'
        'c = config[t]\nd = other["run"]\ne = config["not_a_table"]\n'
        'config["privacy"]["budget_eps"] = 1.0\n'
    )
    assert table_reads(source) == [
        (1, "run"),
        (2, "aggregator"),
        (3, "privacy"),
        (4, "knn"),
        (7, "not_a_table"),
        (8, "privacy"),
    ]


def test_the_allow_list_names_modules_that_exist_and_still_read():
    for path, why in ALLOWED.items():
        assert why and not path.startswith(CONFIG_PACKAGE)
        assert table_reads((REPO / path).read_text()), f"{path} no longer reads: drop it"


@pytest.mark.each_source_module(
    exclude=lambda path: path.startswith(CONFIG_PACKAGE) or path in ALLOWED
)
def test_no_module_outside_the_config_package_reads_a_table(path):
    reads = table_reads((REPO / path).read_text())
    assert not reads, (
        f"{path} reads config tables at "
        + ", ".join(f"line {line} ([{table}])" for line, table in reads)
        + ": read the typed config's attributes (config.<table>.<key>, "
        "pate.run.config.RunConfig) instead"
    )
