"""What the README says, executed: the pate.fit example after the quick start (its budget,
its folders, what it prints), the shipped configs it lists, the flags of `pate run` it shows,
how it describes docs/own_data.md; and the LICENSE that pyproject.toml names."""

from __future__ import annotations

import hashlib
import json
import pathlib
import re
import tempfile
import tomllib

import pytest

from pate.cli import main
from pate.core.errors import BudgetExceededError
from pate.ledger import Ledger
from pate.run.config import packaged_configs

REPO = pathlib.Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")

#: sha256 of the Apache License 2.0 text as the ASF publishes it
#: (https://www.apache.org/licenses/LICENSE-2.0.txt; Debian's /usr/share/common-licenses/Apache-2.0).
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def fit_example() -> str:
    """The README's pate.fit example on digits (the ```python block writing digits-run/)."""
    blocks = re.findall(r"^```python\n(.*?)^```", README, flags=re.S | re.M)
    (block,) = [block for block in blocks if "digits-run" in block]
    assert "pate.fit(" in block
    return block


def test_the_readme_lists_every_shipped_config_and_only_those(capsys):
    sentence = re.search(r"The shipped configs: (.*?)\.\n", README, flags=re.S).group(1)
    listed = re.findall(r"`([a-z0-9-]+)`", sentence)
    assert sorted(listed) == sorted(packaged_configs())
    assert main(["init-config", "--list"]) == 0
    printed = capsys.readouterr().out.split("\n\n")[0]  # then: where they are installed
    printed = [line.split()[0] for line in printed.splitlines()]
    assert sorted(printed) == sorted(listed)


def test_init_config_writes_the_editable_copies_the_readme_names(tmp_path, monkeypatch):
    assert "pate init-config own-data         # an editable copy in this folder: own_data.toml" in (
        README
    )
    monkeypatch.chdir(tmp_path)
    for name, written in (("own-data", "own_data.toml"), ("digits", "digits.toml")):
        assert f"pate init-config {name}" in README
        assert main(["init-config", name]) == 0
        assert (tmp_path / written).read_bytes() == packaged_configs()[name].read_bytes()


def test_the_fit_example_after_the_quick_start(tmp_path, monkeypatch, small_digits, capsys):
    """The quick start (`pate run --config digits`: digits' budget eps 1000 in the default
    ledger), then the README's example twice: the first runs into digits-run/ and its own
    ledger, leaves nothing in the system temp folder and prints what it answered; the second
    (another run_dir) is refused before training with the call that raises the budget."""
    system_temp = tmp_path / "system-temp"
    system_temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system_temp))
    default_ledger = tmp_path / "default-ledger.sqlite3"  # conftest's $PATE_LEDGER
    quick = small_digits(tmp_path)  # configs/digits.toml, shorter training: the same budget
    assert main(["run", "--config", str(quick), "--run-dir", str(tmp_path / "quick")]) == 0
    with Ledger(default_ledger) as ledger:
        before = [(d["name"], d["budget_eps"], d["events"]) for d in ledger.datasets()]
    assert [(name, budget) for name, budget, _ in before] == [("digits", 1000.0)]

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    namespace: dict = {"__name__": "__readme__"}
    exec(compile(fit_example(), "README.md", "exec"), namespace)
    result = namespace["result"]
    assert result.epsilon <= 8.0  # "the guarantee (eps <= 8)"
    assert (work / "digits-run" / "report.html").is_file()
    assert result.report_path.resolve() == (work / "digits-run" / "report.html").resolve()
    left = [p.name for p in system_temp.iterdir() if not p.name.startswith("torchinductor_")]
    assert left == []
    answered, asked = int(result.answered_mask.sum()), result.report["queries"]["asked"]
    assert f"answered={answered} of {asked} asked ({result.labels.size} public items)" in (
        capsys.readouterr().out
    )
    with Ledger(default_ledger) as ledger:  # the example kept to its own ledger
        assert [(d["name"], d["budget_eps"], d["events"]) for d in ledger.datasets()] == before

    again = fit_example().replace('run_dir="digits-run"', 'run_dir="digits-run-2"')
    assert again != fit_example()
    with pytest.raises(BudgetExceededError, match=r"Nothing was trained.*\.set_budget\("):
        exec(compile(again, "README.md", "exec"), dict(namespace))
    assert not (work / "digits-run-2").exists()


def test_target_eps_is_a_flag_of_pate_run_through_the_config(tmp_path, small_digits, capsys):
    """The README's `--sigma2 auto --target-eps 1 --queries 2000` are flags of `pate run` (as is
    every flag of its synopsis): they set [aggregator] keys of the run's config, as the TOML
    would."""
    synopsis = re.search(r"^pate run --config FILE\|NAME (.*)$", README, flags=re.M).group(1)
    shown = set(re.findall(r"--[a-z-]+", synopsis)) | {"--sigma2", "--target-eps", "--queries"}
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    helptext = capsys.readouterr().out
    assert [flag for flag in sorted(shown) if not re.search(rf"{flag}\b", helptext)] == []
    config, run_dir = small_digits(tmp_path), tmp_path / "run"
    flags = ["--sigma2", "auto", "--target-eps", "100", "--queries", "200"]
    assert main(["run", "--config", str(config), "--run-dir", str(run_dir), *flags,
                 "--until", "partition", "--no-progress"]) == 0  # fmt: skip
    assert main(["plan", "--config", str(config), *flags]) == 0  # the same flags
    planned = capsys.readouterr().out
    assert "target eps = 100" in planned and "with the same flags runs this plan" in planned
    aggregator = json.loads((run_dir / "config.json").read_text())["aggregator"]
    assert aggregator["target_eps"] == 100 and aggregator["queries"] == 200
    assert aggregator["sigma2"] == "auto"  # calibrated for the target when it aggregates


def test_the_own_data_page_is_described_as_it_is():
    """docs/own_data.md says its datasets chose the defaults it measures; the README must not
    call them data we did not tune for."""
    page = (REPO / "docs" / "own_data.md").read_text(encoding="utf-8")
    assert "were made by looking at these datasets" in page
    sentences = re.findall(r"[^.;(]*`docs/own_data\.md`", README)
    measured = [s for s in sentences if "measured" in s]
    assert measured and all(re.search(r"chose its defaults", s) for s in measured), sentences
    assert not re.search(r"untuned|did not tune|not tuned", README)


def test_the_license_is_the_apache_2_text_pyproject_names():
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == {"text": "Apache-2.0"}
    text = (REPO / "LICENSE").read_bytes()
    assert b"Apache License\n                           Version 2.0, January 2004" in text
    assert hashlib.sha256(text).hexdigest() == APACHE_2_SHA256


def test_the_messy_tables_line_is_the_results_file():
    """The README's messy-tables range and count are read from the committed results."""
    rows = json.loads((REPO / "benchmarks/results/messy_tables.json").read_text())["rows"]
    closed = [row["gap_closed"] for row in rows]
    met = sum(row["meets_bar"] for row in rows)
    line = re.search(r"Messy tables.*?messy_tables\.json`\)", README, flags=re.S).group(0)
    line = " ".join(line.split())
    assert f"closes {min(closed):.2f}–{max(closed):.2f} of the gap" in line
    assert f"{met} of {len(rows)} tables meet 0.8 or are warned before training" in line
    # the one below the bar that only its release's warning named
    (named,) = [r for r in rows if r["gap_closed"] < 0.8 and not r["warned_before_training"]]
    assert named["named_before_training"]
    assert f"({named['gap_closed']:.2f}) is warned after its release" in line
