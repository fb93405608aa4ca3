"""The partition stage: disjoint shards of the private split, one per teacher."""

from __future__ import annotations

from pate.core.io import load_npy
from pate.run import config as C
from pate.run import rundir as R
from pate.run.rundir import Run
from pate.run.stages.budget import run_identity


def partition(run: Run) -> dict:
    from pate.core import partition as P

    cfg = C.sections(run.config).partition
    k, rng = cfg.num_teachers, run.streams().partition
    if cfg.mode == "random":  # a keyed hash of each record's content key (the ledger's)
        part = P.partition_random(run_identity(run).record_keys, num_teachers=k, rng=rng)
    else:
        unit_ids = load_npy(cfg.unit_ids, what="[partition] unit_ids")
        part = P.partition_by_unit(unit_ids, num_teachers=k, rng=rng)
    part.save(run.path(R.PARTITION))
    sizes = part.shard_sizes
    return {
        "num_teachers": k,
        "mode": cfg.mode,
        "relation": part.relation,
        "shard_size_min": int(sizes.min()),
        "shard_size_max": int(sizes.max()),
        "neighbouring_relation": part.neighbouring_relation,
    }
