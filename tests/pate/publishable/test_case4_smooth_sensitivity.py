"""Issue #48, case 4: the smooth sensitivity of the votes, and anything scaled by it (the noise
std of the sanitized release, the "+ 2 std" reading), is computed from the private votes and is
covered by no noise: it appears only in the internal report. The sanitized epsilon itself may be
published only when its release was charged."""

from __future__ import annotations

import copy
import json

import pytest

from pate.cli import main
from pate.run import report as rep
from pate.run import rundir
from pate.run.report import formatting


@pytest.fixture(scope="module")
def released(tmp_path_factory, small_digits):
    """A Confident GNMax run on digits whose sanitized epsilon is released (the config fixes the
    release's order, beta and sigma_ss)."""
    tmp = tmp_path_factory.mktemp("case4")
    config = small_digits(tmp)
    run_dir = tmp / "run"
    argv = ["run", "--config", str(config), "--run-dir", str(run_dir)]
    assert main([*argv, "--ledger", str(tmp / "ledger.sqlite3"), "--no-progress"]) == 0
    analysis = json.loads((run_dir / rundir.ANALYSIS).read_text())
    return run_dir, analysis


def _renderings(value: float) -> set[str]:
    """How the report may write ``value``."""
    return {formatting.sig(value), formatting.eps(value), repr(value)}


def test_the_release_was_drawn_and_charged(released):
    run_dir, analysis = released
    s = analysis["privacy"]["sanitized"]
    assert s["fallback"] is None and s["smooth_sensitivity"] > 0 and s["noise_std"] > 0
    assert s["noise_std"] == pytest.approx(s["smooth_sensitivity"] * s["sigma_ss"])
    events = json.loads((run_dir / rundir.AGGREGATE).read_text())["events"]
    assert "gnss-release" in [e["mechanism"] for e in events] and s["charged"] is True


def test_the_smooth_sensitivity_and_the_noise_std_are_internal_only(released, leaks):
    run_dir, analysis = released
    s = analysis["privacy"]["sanitized"]
    public = json.loads((run_dir / "report.json").read_text())
    for key in ("smooth_sensitivity", "noise_std", "eps_sanitized_upper_2std"):
        assert key not in public["privacy"]["sanitized"], key
    secret = {"smooth_sensitivity", "noise_std", "eps_sanitized_upper_2std"}
    for name in ("report.md", "report.html", "report.json"):
        text = (run_dir / name).read_text(encoding="utf-8")
        assert "noise std" not in text and "smooth sensitivity 8" not in text, name
        for key in secret:
            for shown in _renderings(s[key]):
                assert not leaks(text, shown, public), (name, key, shown)
    internal = json.loads((run_dir / rundir.REPORT_INTERNAL_JSON).read_text())
    assert {k: internal["privacy"]["sanitized"][k] for k in secret} == {k: s[k] for k in secret}
    md = (run_dir / rundir.REPORT_INTERNAL_MD).read_text()
    row = next(line for line in md.splitlines() if line.startswith("| Smooth sensitivity"))
    assert formatting.sig(s["smooth_sensitivity"]) in row and formatting.sig(s["noise_std"]) in row
    assert row.endswith("| **NO \u2014 INTERNAL** |")
    paragraph = next(line for line in md.splitlines() if "Sanitized data-dependent epsilon" in line)
    assert f"smooth sensitivity {formatting.sig(s['smooth_sensitivity'])}" in paragraph
    assert rep.NOT_PRIVATE in paragraph


def test_the_charged_sanitized_epsilon_is_public(released):
    run_dir, analysis = released
    p = analysis["privacy"]
    public = json.loads((run_dir / "report.json").read_text())
    assert public["privacy"]["eps_sanitized"] == p["eps_sanitized"]
    assert public["privacy"]["sanitized"]["charged"] is True
    assert formatting.eps(p["eps_sanitized"]) in (run_dir / "report.md").read_text()
    assert "released with its own charge" in public["statement"]


def test_an_uncharged_sanitized_epsilon_is_not_published(released, leaks):
    """Were the release's event missing from the charges, its value would be a figure of the
    private votes that no ledger covers: it goes to the internal report only."""
    _, analysis = released
    uncharged = copy.deepcopy(analysis)
    uncharged["privacy"]["sanitized"]["charged"] = False
    full = rep.build_report(rep.validate_analysis(uncharged))
    public = rep.public_report(full)
    assert "eps_sanitized" not in public["privacy"]
    assert "None is published" in public["statement"]
    md = rep.render_markdown(public)
    for shown in _renderings(analysis["privacy"]["eps_sanitized"]):
        assert not leaks(md, shown, public), shown
    assert full["privacy"]["eps_sanitized"] == analysis["privacy"]["eps_sanitized"]
    # a release that fell back to the data-independent cost adds no noise: its value is public
    fallback = copy.deepcopy(uncharged)
    fallback["privacy"]["sanitized"].update(fallback="no release configured", noise_std=0.0)
    public = rep.public_report(rep.build_report(fallback))
    assert public["privacy"]["eps_sanitized"] == fallback["privacy"]["eps_sanitized"]
