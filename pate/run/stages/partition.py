"""The partition stage: disjoint shards of the private split, one per teacher."""

from __future__ import annotations

from pate.core.io import load_npy
from pate.run import rundir
from pate.run.rundir import Run
from pate.run.stages.budget import run_identity


def partition(run: Run) -> dict:
    from pate.core.partition import partition_by_unit, partition_random

    cfg = run.config.partition
    # the run's secret partition key (OS entropy in private/keys.json, unless [run] seed)
    k, key, seed = cfg.num_teachers, run.key("partition"), run.config.run.seed
    if cfg.mode == "random":  # a keyed hash of each record's content key (the ledger's)
        part = partition_random(run_identity(run).record_keys, num_teachers=k, key=key, seed=seed)
    else:
        unit_ids = load_npy(cfg.unit_ids, what="[partition] unit_ids")
        part = partition_by_unit(unit_ids, num_teachers=k, key=key, seed=seed)
    part.save(run.path(rundir.PARTITION))
    sizes = part.shard_sizes
    return {
        "num_teachers": k,
        "mode": cfg.mode,
        "relation": part.relation,
        "shard_size_min": int(sizes.min()),
        "shard_size_max": int(sizes.max()),
        "neighbouring_relation": part.neighbouring_relation,
        "keys_seeded": seed is not None,
    }
