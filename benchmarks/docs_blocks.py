"""Generated tables in the docs: a block between ``<!-- TAG: RESULTS -->`` and ``<!-- /TAG -->``
holds the table made from the results file RESULTS (a path from the repository root). A
benchmark rewrites its blocks with :func:`write_docs`; its test compares each block with the
table its results file makes (:func:`docs_tables`), so a number in the docs cannot drift from
the committed results."""

from __future__ import annotations

import pathlib
import re
from collections.abc import Callable

ROOT = pathlib.Path(__file__).resolve().parents[1]


def block_pattern(tag: str) -> re.Pattern[str]:
    return re.compile(
        rf"(<!-- {re.escape(tag)}: (?P<path>\S+) -->\n)(?P<table>.*?)(\n<!-- /{re.escape(tag)} -->)",
        re.S,
    )


def docs_tables(text: str, tag: str) -> list[tuple[str, str]]:
    """(results path, table in the docs) for every block ``tag`` of a docs page's text."""
    return [(m.group("path"), m.group("table")) for m in block_pattern(tag).finditer(text)]


def write_docs(doc: pathlib.Path, tag: str, table: Callable[[pathlib.Path], str]) -> int:
    """Rewrite every block ``tag`` of ``doc`` with ``table(results file)``; the number of blocks."""
    count = 0

    def fill(m: re.Match[str]) -> str:
        nonlocal count
        count += 1
        return m.group(1) + table(ROOT / m.group("path")) + m.group(4)

    doc.write_text(block_pattern(tag).sub(fill, doc.read_text()))
    return count
