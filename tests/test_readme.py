"""Every ```python block of the README and of docs/*.md runs (per file: in order, in one
namespace), so the documented examples cannot rot."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))


def python_blocks(path: pathlib.Path = README) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", path.read_text(), flags=re.S | re.M)


def test_readme_has_examples():
    assert len(python_blocks()) >= 1
    assert README.stat().st_size <= 25_000, "the README is for users: keep it under 25 KB (docs/)"


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_python_examples_run(path, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__readme__"}
    for block in python_blocks(path):
        exec(compile(block, str(path), "exec"), namespace)
