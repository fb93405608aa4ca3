"""The typed config (:class:`pate.run.config.RunConfig`): one frozen dataclass per table, each key
declared once (type, default, constraints, pate.fit keyword); parsed and validated once; its
on-disk form the dict it was read from."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

from pate import mechanisms
from pate.run.config import RunConfig, SettingError, build, keys_of, load, python_wording
from pate.run.config.keys import Interval, Options
from pate.run.config.tables import TABLE_TYPES, keyword
from pate.teachers.errors import ConfigError

CONFIGS = sorted((pathlib.Path(__file__).resolve().parents[4] / "configs").glob("*.toml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_a_packaged_config_loads_without_its_data_and_round_trips(path):
    """Loading plans nothing and reads no data (own_data.toml's csv is not there)."""
    config = load(path)
    again = RunConfig.from_dict(config.to_dict())
    assert again == config and again.to_dict() == config.to_dict()
    if config.needs_plan:  # planned where the data is loaded: pate.run.config.plan
        assert config.aggregator.mechanism == "auto" or "auto" in config.aggregator.noise.values()


def test_the_on_disk_form_keeps_what_was_given_and_the_defaults():
    config = load(CONFIGS[0])
    saved = config.to_dict()
    assert set(saved) == set(TABLE_TYPES)
    for table in TABLE_TYPES:
        section = getattr(config, table)
        for name, value in saved[table].items():
            if table == "aggregator" and name in mechanisms.all_param_names():
                assert section.noise[name] == value
            elif isinstance(value, list):
                assert getattr(section, name) == tuple(value)
            else:
                assert getattr(section, name) == value, (table, name)
        for name in keys_of(table):  # left out without a default: None, and not saved
            if name not in saved[table]:
                assert getattr(section, name) is None, (table, name)


def test_a_config_is_frozen_and_copies_change_it():
    config = load(CONFIGS[0])
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.run.device = "cuda"  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.aggregator.noise["sigma"] = 1.0  # type: ignore[index]
    cheaper = config.with_budget_eps(3)
    assert cheaper.privacy.budget_eps == 3.0 and config.privacy.budget_eps != 3.0


def test_with_ledger_is_a_copy_that_charges_that_ledger(tmp_path):
    config = load(CONFIGS[0])
    other = config.with_ledger(tmp_path / "sub" / ".." / "l.sqlite3")
    assert other.privacy.ledger == str((tmp_path / "l.sqlite3").resolve())
    assert other.privacy.ledger_path() == (tmp_path / "l.sqlite3").resolve()
    assert config.privacy.ledger is True and other.run == config.run


def test_constraints_describe_themselves_and_check_values():
    assert str(Interval(0, 1, closed="neither")) == "a number in (0, 1)"
    assert str(Interval(1, integer=True)) == "an integer >= 1"
    assert Interval(0, 1, closed="neither").accepts(0.5)
    assert not Interval(0, 1, closed="neither").accepts(1.0)
    assert not Interval(1, integer=True).accepts(True) and not Interval(1, integer=True).accepts(0)
    assert Options(("a", "b")).accepts("a") and not Options(("a", "b")).accepts("c")


@pytest.mark.parametrize(
    "table, name, value, message",
    [
        ("privacy", "delta", 2.0, r"\[privacy\] delta must be a number in \(0, 1\), got 2.0"),
        ("privacy", "conversion", "x", r'\[privacy\] conversion must be one of "classic", "tight"'),
        ("run", "threads", 0, r"\[run\] threads must be an integer >= 1 \(the number of CPU"),
        ("run", "seed", "x", r"\[run\] seed must be an integer, got 'x'"),
        ("aggregator", "queries", "many", r'queries must be an integer >= 1 or "auto"'),
        ("data", "unknown", 1, r"unknown key\(s\) unknown in \[data\]"),
    ],
)
def test_an_error_names_the_table_the_key_and_the_value(table, name, value, message):
    raw = load(CONFIGS[0]).to_dict()
    raw[table][name] = value
    with pytest.raises(SettingError, match=message) as caught:
        build(raw, where="x.toml")
    assert (caught.value.table, caught.value.key, caught.value.value) == (table, name, value)
    assert str(caught.value).startswith("x.toml: ")


def test_a_cross_key_error_names_its_key_too():
    raw = load(CONFIGS[0]).to_dict()
    raw["run"]["secure"] = True  # with a seed
    with pytest.raises(SettingError) as caught:
        RunConfig.from_dict(raw)
    assert (caught.value.table, caught.value.key) == ("run", "seed")


def test_the_python_front_end_words_keys_as_keywords():
    assert keyword("privacy", "budget_eps") == "budget_eps="
    assert keyword("partition", "mode") == "partition="
    assert keyword("student", "epochs") == "student_params={'epochs': ...}"
    assert (
        python_wording("[aggregator] target_eps exceeds [privacy] budget_eps; see [knn]")
        == "target_eps= exceeds budget_eps=; see [knn]"
    )
    assert (
        python_wording("[aggregator] mechanism = 'private-knn' needs k")
        == "mechanism='private-knn' needs k"
    )
    # a recipe's key takes its value inside the dict; TOML's booleans become Python's
    assert (
        python_wording("[student] combine_with_rule = true multiplies; [privacy] release = false")
        == "student_params={'combine_with_rule': True} multiplies; release=False"
    )
    assert python_wording('[student] targets = "soft"') == "student_params={'targets': 'soft'}"


def test_an_unparsable_config_is_refused():
    with pytest.raises(ConfigError, match="must be a TOML table"):
        RunConfig.from_dict([])
    with pytest.raises(SettingError, match=r"\[privacy\] must be a table, got 3"):
        RunConfig.from_dict(dict(load(CONFIGS[0]).to_dict(), privacy=3))
    with pytest.raises(SettingError, match=r"unknown table\(s\) \[nope\]"):
        RunConfig.from_dict(dict(load(CONFIGS[0]).to_dict(), nope={}))
