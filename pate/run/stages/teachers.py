"""The teachers stage: one model per shard, its predictions and accuracy metrics."""

from __future__ import annotations

import dataclasses
import logging

from pate.run import rundir
from pate.run.rundir import Run
from pate.run.stages.records import feature_cache
from pate.teachers.errors import ConfigError

logger = logging.getLogger("pate")


def teachers(run: Run) -> dict:
    from pate.core.partition import Partition
    from pate.teachers.cluster import ClusterConfig
    from pate.teachers.ensemble import TeacherConfig, train_teachers
    from pate.teachers.recipe import auto_epochs

    part = Partition.load(run.path(rundir.PARTITION))
    if part.num_records != len(run.data.private):
        raise ConfigError(
            f"{run.path(rundir.PARTITION)} covers {part.num_records} records but the "
            f"private split has {len(run.data.private)}; start a new run directory"
        )
    seeds = run.streams().teacher_seeds(part.num_teachers)
    settings = run.config.teacher_settings()
    settings["model"] = run.python_object("teacher_model", settings["model"])
    recipe = TeacherConfig(**settings)
    if recipe.epochs is None:
        # sized from the declared records per teacher, never the shards' exact sizes: one
        # record more must change one teacher's shard, not every teacher's training length
        declared = run.config.data.declared_records(run.data)[0]
        recipe = dataclasses.replace(
            recipe,
            epochs=auto_epochs(declared / part.num_teachers, batch_size=recipe.batch_size),
        )
    # [cluster] says where the teachers train, never what they compute: every backend gives the
    # same predictions; the stage summary records where it ran (the report shows it)
    cluster = ClusterConfig(**run.config.cluster.settings())
    from pate.teachers.feature_cache import using as using_feature_cache

    cache = feature_cache(run)
    with using_feature_cache(cache):  # [teachers] features = "scatternet": cached on disk
        result = train_teachers(
            run.data,
            part.shards,
            seeds,
            recipe,
            out_dir=run.path(rundir.TEACHERS),
            resume=True,
            progress=run.progress,
            cluster=cluster,
        )
    summary = result.summary()
    if cache is not None and cache.summary()["entries"]:
        summary["feature_cache"] = cache.summary()
    summary["execution"] = {k: v for k, v in result.execution.items() if k != "workers"}
    logger.info(
        "teachers (INTERNAL, do not publish): mean accuracy %.4f, plurality vote %.4f on the "
        "evaluation split",
        summary["teacher_accuracy_mean"],
        summary["plurality_accuracy"],
    )
    return summary
