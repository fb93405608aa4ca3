"""What the publishable-output tests share: whether a document shows a figure beyond what the
publishable report itself may show."""

from __future__ import annotations

import re

import pytest

from pate.run.report import formatting
from pate.run.report.publishable import leaf_paths


def renderings(value) -> set[str]:
    """How a report may write a figure: as a percentage, an epsilon, three significant digits,
    or as JSON does (none for a flag, a string or zero)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value == 0:
        return set()
    return {formatting.pct(value), formatting.eps(value), formatting.sig(value), repr(value)}


def _lengths(doc) -> list[int]:
    """The length of every list in a JSON document (the report writes some: "338 orders")."""
    if isinstance(doc, dict):
        return [n for value in doc.values() for n in _lengths(value)]
    if isinstance(doc, list):
        return [len(doc), *(n for value in doc for n in _lengths(value))]
    return []


def public_renderings(public: dict) -> set[str]:
    """Every way the publishable report ``public`` (report.json) may write one of its figures."""
    values = [value for _, value in leaf_paths(public)] + _lengths(public)
    return {shown for value in values for shown in renderings(value)}


def shows(text: str, number: str) -> bool:
    """``number`` appears in ``text`` as a whole number (not inside a longer one, nor in the
    base64 of an embedded image, nor as a CSS colour such as ``#333``)."""
    text = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]*", "", text)
    return re.search(rf"(?<![\w.#]){re.escape(number)}(?!\w|\.\d)", text) is not None


def shows_beyond(text: str, number: str, public: dict) -> bool:
    """``text`` shows ``number`` other than as one of the publishable report's own figures: a
    secret that renders like a public figure, or inside one ("95.1" in a public "95.1%"), proves
    nothing; anywhere else it is a leak."""
    allowed = public_renderings(public)
    if number in allowed:
        return False
    for shown in allowed:
        if number in shown:
            text = text.replace(shown, " ")
    return shows(text, number)


@pytest.fixture(scope="session")
def leaks():
    """:func:`shows_beyond`, for the tests of this folder."""
    return shows_beyond


@pytest.fixture(scope="session")
def figure_renderings():
    """(:func:`renderings`, :func:`public_renderings`), for the tests of this folder."""
    return renderings, public_renderings
