"""The run configuration of ``pate run``: a TOML file validated up front.

Tables and keys (unknown tables and keys are errors, never ignored)::

    [run]        name*, seed, secure, device, run_dir, smoke_test (true: the run only checks that
                 the pipeline works; its report says so at the top), threads (CPU threads, an
                 integer >= 1; left out: $OMP_NUM_THREADS, else the CPUs this process may use --
                 pate.core.threads, docs/threads.md), feature_cache (the folder of the on-disk
                 front-end feature cache, relative to the config file, or false; default
                 $PATE_FEATURE_CACHE, else <runs root>/.feature-cache:
                 :func:`feature_cache_root`, docs/feature_cache.md)
    [data]       name*, root, download, public_size, eval_size, image_size (imagefolder: the
                 size images are resized to, N or [height, width]; default the first image's),
                 records (* for your own data: the approximate number of private records,
                 declared public; the plan and every published figure use it, never the exact
                 count: :func:`declared_records`; built-in datasets declare their own size)
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
                 only (:func:`knn_settings`); or
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

``messages``    how a message names a setting (a TOML key or a keyword of :func:`pate.fit`),
                :func:`error_at` and :func:`checked`.
``schema``      the tables, keys, types and defaults (:data:`SCHEMA`) and :func:`normalize`.
``sections``    a validated config as typed sections, one frozen dataclass per table
                (:func:`sections`: ``C.sections(config).run.device``); the dict stays the
                on-disk format.
``settings``    what a validated config says, read once (:func:`teacher_settings`,
                :func:`aggregator_params`, :func:`calibration`, :func:`ledger_path`, ...).
``validation``  the semantic checks, one function per table (:func:`validate`).
``planning``    the planner with this package's calibration and orders (:func:`plan_config`).
``loading``     the packaged configs, ``--config`` resolved, TOML read, overrides merged
                (:func:`load`, :func:`from_dict`).
"""

from pate.run.config.loading import (
    CONFIGS_FOLDER,
    CONFIGS_PACKAGE,
    from_dict,
    load,
    packaged_configs,
    plan_facts,
    read_toml,
    resolve_config,
)
from pate.run.config.messages import (
    PYTHON_NAMES,
    PYTHON_SOURCE,
    assignment,
    budget_command,
    checked,
    error_at,
    setting,
)
from pate.run.config.planning import plan_config, plan_for
from pate.run.config.schema import (
    KNN_DEFAULTS,
    PLANNED,
    REQUIRED,
    SCHEMA,
    UNUSED_RELEASE,
    normalize,
)
from pate.run.config.sections import (
    SECTION_TYPES,
    AggregatorSection,
    ClusterSection,
    DataSection,
    KnnSection,
    PartitionSection,
    PrivacySection,
    RunSection,
    Sections,
    StudentSection,
    TeachersSection,
    sections,
    set_budget_eps,
    with_ledger,
)
from pate.run.config.settings import (
    SOFT_TARGET_TEMPERATURE,
    SPLIT_KEY_PATH,
    aggregator_params,
    calibration,
    class_means_rule,
    cluster_settings,
    combine_with_rule,
    data_settings,
    declared_records,
    evaluation_split_key,
    feature_cache_root,
    is_private,
    knn_settings,
    ledger_path,
    load_data,
    noise_seeded,
    orders,
    run_directory,
    student_settings,
    student_targets,
    teacher_settings,
)
from pate.run.config.validation import validate
from pate.teachers.errors import ConfigError

__all__ = [
    "CONFIGS_FOLDER",
    "CONFIGS_PACKAGE",
    "KNN_DEFAULTS",
    "PLANNED",
    "PYTHON_NAMES",
    "PYTHON_SOURCE",
    "REQUIRED",
    "SCHEMA",
    "SECTION_TYPES",
    "SOFT_TARGET_TEMPERATURE",
    "UNUSED_RELEASE",
    "AggregatorSection",
    "ClusterSection",
    "ConfigError",
    "DataSection",
    "KnnSection",
    "PartitionSection",
    "PrivacySection",
    "RunSection",
    "Sections",
    "StudentSection",
    "TeachersSection",
    "aggregator_params",
    "assignment",
    "budget_command",
    "calibration",
    "checked",
    "class_means_rule",
    "cluster_settings",
    "combine_with_rule",
    "data_settings",
    "declared_records",
    "error_at",
    "feature_cache_root",
    "from_dict",
    "is_private",
    "knn_settings",
    "ledger_path",
    "load",
    "noise_seeded",
    "normalize",
    "orders",
    "packaged_configs",
    "plan_config",
    "plan_facts",
    "plan_for",
    "read_toml",
    "resolve_config",
    "load_data",
    "evaluation_split_key",
    "SPLIT_KEY_PATH",
    "run_directory",
    "sections",
    "set_budget_eps",
    "setting",
    "student_settings",
    "student_targets",
    "teacher_settings",
    "validate",
    "with_ledger",
]
