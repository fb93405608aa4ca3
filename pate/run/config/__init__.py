"""The run configuration of ``pate run``: a TOML file validated up front.

Tables and keys (unknown tables and keys are errors, never ignored)::

    [run]        name*, seed, secure, device, run_dir, smoke_test (true: the run only checks that
                 the pipeline works; its report says so at the top), threads (CPU threads, an
                 integer >= 1; left out: $OMP_NUM_THREADS, else the CPUs this process may use --
                 pate.core.threads, docs/threads.md), feature_cache (the folder of the on-disk
                 front-end feature cache, relative to the config file, or false; default
                 $PATE_FEATURE_CACHE, else <runs root>/.feature-cache:
                 :meth:`RunTable.feature_cache_root`, docs/feature_cache.md)
    [data]       name*, root, download, public_size, eval_size, image_size (imagefolder: the
                 size images are resized to, N or [height, width]; default the first image's),
                 records (* for your own data: the approximate number of private records,
                 declared public; the plan and every published figure use it, never the exact
                 count: :meth:`DataTable.declared_records`; built-in datasets declare their own size)
                 and the public facts the user declares: classes (the label set, a list of
                 class names; never read from the private labels), split_column (default
                 "split": the csv column / npz array marking each row of a pool private,
                 public or evaluation), evaluation_public (the evaluation data -- a file's
                 own split, the rows marked evaluation -- is public data); a pool's held-out evaluation split is keyed with the run's
                 :func:`evaluation_split_key` (docs/teachers.md)
    [partition]  num_teachers (not with private-knn: no teachers; left out or "auto": the
                 planner chooses, pate.run.planner), mode ("random": a keyed
                 hash of each record | "unit": of its privacy unit), unit_ids (.npy, mode unit)
    [teachers]   any field of pate.teachers.ensemble.TeacherConfig except device (see `pate train-teachers`)
    [aggregator] mechanism* (a name of the registry pate.mechanisms, or "auto": the planner's
                 rule), its noise parameters (threshold, sigma1, sigma2, sigma, scale, ...; a
                 Confident GNMax threshold left out is 0.8 x teachers), queries (first-k public
                 items asked; default all with fixed noise, the planner's choice with "auto"
                 noise, or "auto"), budget_basis, noise_seed
    [privacy]    delta*, budget_eps (the dataset's lifetime budget: registered in the ledger the
                 first time the dataset is charged -- default [aggregator] target_eps then --,
                 afterwards the ledger's counts; :func:`pate.run.stages.authorize`),
                 orders ("default" | "reference" | [list]), conversion,
                 release_order*, release_beta*, release_sigma_ss*  (the sanitized release's
                 parameters, fixed here before any data is seen; required unless release =
                 false), release (false: no sanitized release, only the data-independent
                 epsilon), ledger (path, or false), dataset,
                 private (false: the run is explicitly marked NOT private)
    [student]    any setting of pate.student.train.Student (see `pate train-student`); and
                 targets ("hard" | "soft"), temperature, combine_with_rule (class-means runs:
                 release the student times its labelling rule; pate.student.rule_product)
    [cluster]    where the teachers train: backend ("local" | "ray"), address, num_cpus,
                 cpus_per_task, gpus_per_task, teachers_per_task, max_retries
                 (pate.teachers.cluster.ClusterConfig; docs/cluster.md)
    [knn]        mechanism = "private-knn" or "class-means" only: the embedding of the
                 nearest-neighbour search, or of the class means,
                 features ("none": raw inputs | "scatternet" | "kernel": a table's random
                 Fourier features; default "scatternet" for images whose sides are multiples
                 of 4 and >= 8, "kernel" for a class-means table, else "none") and dims
                 (default 64; a kernel's from the noise and the sizes,
                 pate.core.tuned_defaults.kernel_dims): principal axes fitted on the public split
                 only (:meth:`RunConfig.knn_settings`); or
                 features = "student" with student_run = an earlier run's directory: that run's
                 released student embeds (a next round; its privacy cost is composed into this
                 run's guarantee, see pate.run.stages)

(* = required.) Everything is checked before any data is read, any file is written, any noise
is drawn or any budget is spent; errors name the table, the key and the value.

Noise. The aggregator's and the sanitized release's noise come from OS entropy
(:class:`pate.core.rng.SecureGenerator`) unless ``[aggregator] noise_seed`` is set: then the noise is
replayable by anyone who knows the seed, and the report says in its first line that the run is
reproducible and NOT private. ``[run] seed`` never seeds the noise. Left unset (the default), the
run's secret keys (the partition's, a pool's split: :mod:`pate.core.keys`), the teachers'
initialisation and the student come from OS entropy; given on purpose, it derives them all (the
report then says the keys are seeded, not private). ``[run] secure = true`` refuses a seed.

Ledger. ``[privacy] ledger`` is true (the default ledger, :func:`pate.ledger.default_ledger_path`:
``$PATE_LEDGER``, else ``$XDG_DATA_HOME/pate/ledger.sqlite3``, else
``~/.local/share/pate/ledger.sqlite3``), a path (a relative path is resolved against the folder
of the config file, never the working directory) or false (no budget is enforced; the report says
so in its first paragraph). ``budget_basis = "data-dependent"`` is refused unless the ledger is
off and ``[privacy] private = false`` marks the run as not private.

The package, one concern per module (each imports only those listed before it):

``errors``      :class:`SettingError`, which names ``(table, key, value)``.
``keys``        how a key is declared: :func:`key` (type, default, constraints such as
                :class:`Interval` and :class:`Options`, the :func:`pate.fit` keyword).
``tables``      one frozen dataclass per table, each key declared once, and what the table
                says (``config.privacy.ledger_path()``, ``config.run.directory()``, ...).
``validation``  the checks across keys (:func:`validate`, run by ``RunConfig.from_dict``).
``run_config``  :class:`RunConfig`, the whole config (``from_dict``, ``to_dict``, ``of``) and
                what it says across tables (``config.aggregator_params()``, ...).
``messages``    how a message names a setting for its caller: a TOML key or a keyword of
                :func:`pate.fit` (:func:`setting`, :func:`python_wording`).
``planning``    the plan step (:func:`plan`): the planner fills in what is left to it, once.
``loading``     the packaged configs, ``--config`` resolved, TOML read, overrides merged
                (:func:`load`, :func:`build`).
"""

from pate.run.config.errors import SettingError
from pate.run.config.keys import Interval, Options, key
from pate.run.config.loading import (
    CONFIGS_FOLDER,
    CONFIGS_PACKAGE,
    build,
    load,
    packaged_configs,
    read_toml,
    resolve_config,
)
from pate.run.config.messages import (
    PYTHON_SOURCE,
    assignment,
    budget_command,
    python_wording,
    setting,
)
from pate.run.config.planning import facts_of, plan
from pate.run.config.run_config import SPLIT_KEY_PATH, RunConfig, evaluation_split_key
from pate.run.config.tables import (
    SOFT_TARGET_TEMPERATURE,
    TABLE_TYPES,
    AggregatorTable,
    DataTable,
    KnnTable,
    PartitionTable,
    PrivacyTable,
    RunTable,
    StudentTable,
    TeachersTable,
    keys_of,
    keyword,
)
from pate.run.config.validation import validate
from pate.teachers.errors import ConfigError

__all__ = [
    "CONFIGS_FOLDER",
    "CONFIGS_PACKAGE",
    "PYTHON_SOURCE",
    "SOFT_TARGET_TEMPERATURE",
    "SPLIT_KEY_PATH",
    "TABLE_TYPES",
    "AggregatorTable",
    "ConfigError",
    "DataTable",
    "Interval",
    "KnnTable",
    "Options",
    "PartitionTable",
    "PrivacyTable",
    "RunConfig",
    "RunTable",
    "SettingError",
    "StudentTable",
    "TeachersTable",
    "assignment",
    "budget_command",
    "build",
    "evaluation_split_key",
    "facts_of",
    "key",
    "keys_of",
    "keyword",
    "load",
    "packaged_configs",
    "plan",
    "python_wording",
    "read_toml",
    "resolve_config",
    "setting",
    "validate",
]
