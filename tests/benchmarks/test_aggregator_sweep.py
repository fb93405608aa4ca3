"""benchmarks/aggregator_sweep.py's argument checks (the sweep itself runs on demand, not here)."""

from __future__ import annotations

import argparse

import pytest

from pate.run import rundir


@pytest.fixture(scope="module")
def sweep(load_benchmark):
    return load_benchmark("aggregator_sweep")


def test_a_setting_is_target_threshold_and_two_sigmas(sweep):
    target, aggregator = sweep.parse_setting("0.5/350/250/120")
    assert target == 0.5
    assert aggregator == {
        "mechanism": "confident-gnmax",
        "threshold": 350.0,
        "sigma1": 250.0,
        "sigma2": 120.0,
    }
    for bad in ("1/350/250", "1/350/250/0", "1/x/250/120", "1/350/250/nan"):
        with pytest.raises(argparse.ArgumentTypeError, match=repr(bad).replace("/", "/")):
            sweep.parse_setting(bad)


def test_bad_arguments_stop_before_any_work(sweep, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        sweep.main(["1/350/250/120", "--base-run", str(tmp_path)])
    assert exc.value.code == 2 and f"has no {rundir.VOTES}" in capsys.readouterr().err
    (tmp_path / rundir.VOTES).parent.mkdir()
    (tmp_path / rundir.VOTES).write_bytes(b"")
    (tmp_path / rundir.CONFIG).write_text("{}")
    with pytest.raises(SystemExit):
        sweep.main(["1/350/250/120", "--base-run", str(tmp_path), "--steps", "700"])
    assert "--steps must be a positive multiple of 500" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        sweep.main(["1/350/250/-1", "--base-run", str(tmp_path)])
    assert "four positive numbers" in capsys.readouterr().err
