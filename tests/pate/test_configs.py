"""Every shipped config is valid, and the documented defaults hold."""

from __future__ import annotations

import pathlib

import pytest

from pate import config as C

CONFIGS = sorted((pathlib.Path(__file__).resolve().parents[2] / "configs").glob("*.toml"))


def test_configs_are_shipped():
    assert {p.name for p in CONFIGS} >= {"digits.toml", "fashion_mnist.toml", "mnist.toml"}


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_config_validates(path):
    config = C.load(path)
    assert config["run"]["name"] and config["privacy"]["delta"] < 1
    assert config["privacy"]["release_order"] < 1 / (2 * config["privacy"]["release_beta"])


def test_mnist_uses_the_scalable_pate_settings():
    config = C.load(next(p for p in CONFIGS if p.name == "mnist.toml"))
    agg = config["aggregator"]
    assert (config["partition"]["num_teachers"], agg["threshold"], agg["sigma1"], agg["sigma2"]) == \
        (250, 200.0, 150.0, 40.0)


def test_overrides(tmp_path):
    config = C.load(CONFIGS[0], seed=7, device="cpu", run_dir=str(tmp_path / "x"))
    assert config["run"]["seed"] == 7 and config["run"]["device"] == "cpu"
    assert C.run_directory(config) == tmp_path / "x"
