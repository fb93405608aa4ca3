"""A validated config read as typed sections (:func:`pate.run.config.sections`): one frozen
dataclass per table, its fields the schema's keys, its values the dict's."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

from pate import mechanisms
from pate.run import config as C
from pate.teachers.errors import ConfigError

CONFIGS = sorted((pathlib.Path(__file__).resolve().parents[4] / "configs").glob("*.toml"))


def test_every_table_has_a_section_with_the_schemas_keys():
    assert set(C.SECTION_TYPES) == set(C.SCHEMA)
    assert [f.name for f in dataclasses.fields(C.Sections)] == [*C.SCHEMA, "planned"]
    for table, cls in C.SECTION_TYPES.items():
        fields = {f.name for f in dataclasses.fields(cls)}
        keys = set(C.SCHEMA[table])
        if table == "aggregator":  # the mechanisms' noise parameters are one mapping, `noise`
            keys = (keys - set(mechanisms.all_param_names())) | {"noise"}
        assert fields == keys, table


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_sections_hold_what_the_dict_holds(path, tmp_path, monkeypatch):
    if path.name == "own_data.toml":  # the planner checks its declared records: a file with
        # about as many (records = 5000; 6000 rows leave 4200 private) must be there
        monkeypatch.chdir(tmp_path)
        marks = ("private", "public", "evaluation", "private", "private")  # the rows' splits
        rows = ["f1,f2,label,split"] + [
            f"{i % 7}.5,{i % 3},{i % 2},{marks[i % 5]}" for i in range(6000)
        ]
        (tmp_path / "my_data.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    config = C.load(path)
    s = C.sections(config)
    for table in C.SCHEMA:
        section = getattr(s, table)
        for key, value in config[table].items():
            if table == "aggregator" and key in mechanisms.all_param_names():
                assert section.noise[key] == value
            elif isinstance(value, list):
                assert getattr(section, key) == tuple(value)
            else:
                assert getattr(section, key) == value, (table, key)
        for field in dataclasses.fields(section):  # left out and no default: None
            if field.name not in config[table] and field.name != "noise":
                assert getattr(section, field.name) is None, (table, field.name)
    assert s.aggregator.spec is mechanisms.get(config["aggregator"]["mechanism"])


def test_sections_are_frozen_and_do_not_alias_the_dict():
    config = C.load(CONFIGS[0])
    s = C.sections(config)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.run.device = "cuda"  # type: ignore[misc]
    with pytest.raises(TypeError):
        s.aggregator.noise["sigma"] = 1.0  # type: ignore[index]
    config["privacy"]["orders"] = [2.0, 4.0]
    assert C.sections(config).privacy.orders == (2.0, 4.0) and s.privacy.orders == "default"


def test_set_budget_eps_is_seen_by_the_next_sections():
    config = C.load(CONFIGS[0])
    C.set_budget_eps(config, 3)
    assert config["privacy"]["budget_eps"] == 3.0 and C.sections(config).privacy.budget_eps == 3.0


def test_an_unvalidated_dict_is_refused_with_what_to_do():
    with pytest.raises(ConfigError, match=r"\[run\] name is missing.*from_dict"):
        C.sections({"run": {}})
    with pytest.raises(ConfigError, match=r"\[privacy\] must be a table, got 3"):
        C.sections(dict(C.load(CONFIGS[0]), privacy=3))
    with pytest.raises(ConfigError, match="got list"):
        C.sections([])  # type: ignore[arg-type]


def test_a_saved_config_without_cluster_or_knn_reads_their_defaults():
    config = C.load(CONFIGS[0])
    config.pop("cluster")
    config.pop("knn")
    s = C.sections(config)
    assert s.cluster.backend == "local" and s.knn.features is None


def test_with_ledger_is_a_copy_that_charges_that_ledger(tmp_path):
    config = C.load(CONFIGS[0])
    before = C.sections(config).privacy.ledger
    other = C.with_ledger(config, tmp_path / "sub" / ".." / "l.sqlite3")
    assert C.sections(other).privacy.ledger == str((tmp_path / "l.sqlite3").resolve())
    assert C.ledger_path(other) == (tmp_path / "l.sqlite3").resolve()
    assert C.sections(config).privacy.ledger == before and other["run"] == config["run"]
