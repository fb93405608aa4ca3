"""The partition stage: disjoint shards of the private split, one per teacher."""

from __future__ import annotations

import numpy as np

from pate.core.io import load_npy
from pate.run import rundir
from pate.run.rundir import Run
from pate.run.stages.budget import run_identity
from pate.teachers.errors import ConfigError


def unit_ids_of(run: Run) -> np.ndarray | None:
    """The privacy-unit id of every private row the shards are dealt by, or None (record by
    record): the data's own (its id column, ``data.unit_ids``), else ``[partition] unit_ids``
    with ``mode = "unit"``. A setting that contradicts the data's id column is refused: one
    neighbouring relation everywhere (one person: the ledger keys the budget by the same ids)."""
    cfg, data = run.config.partition, run.data
    if data.unit_ids is None:
        if cfg.mode != "unit":
            return None
        return load_npy(cfg.unit_ids, what="[partition] unit_ids")
    if cfg.unit_ids is not None:
        raise ConfigError(
            f"[partition] unit_ids = {cfg.unit_ids!r} names the privacy units, but the data's "
            "id column ([data] id) names them already: remove [partition] mode and unit_ids "
            "(the shards, the ledger and the report then all follow the id column's people)"
        )
    if cfg.mode == "random":
        raise ConfigError(
            '[partition] mode = "random" deals the private rows one by one, but the data has '
            "an id column ([data] id): a person's rows must all go to one teacher for the "
            "guarantee to hold per person; remove [partition] mode (the id column's people "
            "are then the units)"
        )
    return data.unit_ids


def partition(run: Run) -> dict:
    from pate.core.partition import partition_by_unit, partition_random

    cfg = run.config.partition
    # the run's secret partition key (OS entropy in private/keys.json, unless [run] seed)
    k, key, seed = cfg.num_teachers, run.key("partition"), run.config.run.seed
    unit_ids = unit_ids_of(run)
    if unit_ids is None:  # a keyed hash of each record's content key (the ledger's)
        part = partition_random(run_identity(run).record_keys, num_teachers=k, key=key, seed=seed)
    else:
        part = partition_by_unit(unit_ids, num_teachers=k, key=key, seed=seed)
    part.save(run.path(rundir.PARTITION))
    sizes = part.shard_sizes
    return {
        "num_teachers": k,
        "mode": part.mode,
        "relation": part.relation,
        "shard_size_min": int(sizes.min()),
        "shard_size_max": int(sizes.max()),
        "neighbouring_relation": part.neighbouring_relation,
        "keys_seeded": seed is not None,
    }
