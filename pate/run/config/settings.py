"""What a validated config says, read once: the keyword arguments of the teachers, the student,
the data source and the cluster, the ``[knn]`` front-end, the noise (with ``"auto"`` parameters
calibrated), the orders, the ledger, the run directory and the feature cache: the readers the
stages, the planner, the report and the API call instead of indexing the tables themselves."""

from __future__ import annotations

import math
import pathlib

from pate import mechanisms
from pate.run.config.messages import checked
from pate.run.config.schema import KNN_DEFAULTS
from pate.teachers.errors import ConfigError

#: ``[student] temperature`` when ``targets = "soft"`` leaves it out (chosen in a development
#: run that looked at private labels: docs/benchmarks.md lists it).
SOFT_TARGET_TEMPERATURE = 10.0


def combine_with_rule(config: dict) -> bool:
    """Whether the released model is the student times its labelling rule
    (``[student] combine_with_rule``; :mod:`pate.student.rule_product`)."""
    return bool(config["student"].get("combine_with_rule", False))


def student_targets(config: dict) -> float | None:
    """The temperature T of a student trained on soft targets softmax(T * scores) of the
    labelling rule's published class scores (``[student] targets = "soft"``), or None for hard
    labels."""
    student = config["student"]
    if student.get("targets", "hard") != "soft":
        return None
    return float(student.get("temperature", SOFT_TARGET_TEMPERATURE))


def aggregator_params(config: dict) -> dict:
    """The noise parameters of the configured mechanism (and only those), with every ``"auto"``
    value calibrated (:func:`calibration`)."""
    agg = config["aggregator"]
    params = {k: agg[k] for k in mechanisms.get(agg["mechanism"]).param_names if k in agg}
    cal = calibration(config)
    return params if cal is None else dict(params, **cal["calibrated"])


def calibration(config: dict) -> dict | None:
    """What ``"auto"`` noise parameters were calibrated to, and how (None without ``"auto"``).

    The smallest noise such that asking ``[aggregator] queries`` queries, all answered (the worst
    case), composed with the planned sanitized release's cost (when ``[privacy] release`` is on
    and the mechanism has one), costs at most ``target_eps`` at ``delta`` with the config's
    conversion and orders: public quantities only, fixed before any data is seen
    (:meth:`pate.mechanisms.MechanismSpec.calibrate`, which uses ``pate.analysis.calibrate_*``).
    """
    from pate import analysis

    agg, priv = config["aggregator"], config["privacy"]
    spec = mechanisms.get(agg["mechanism"])
    params = {k: agg[k] for k in spec.param_names if k in agg}
    auto = sorted(k for k, v in params.items() if v == "auto")
    if not auto:
        return None
    grid = orders(config)
    release = (
        bool(priv.get("release", True))
        and spec.release_params({k: (1.0 if v == "auto" else v) for k, v in params.items()})
        is not None
    )
    extra = (
        analysis.gnss_rdp_curve(
            beta=priv["release_beta"], sigma_ss=priv["release_sigma_ss"], orders=grid
        )
        if release
        else None
    )
    try:
        full = spec.calibrate(
            params,
            target_eps=agg["target_eps"],
            delta=priv["delta"],
            num_queries=agg["queries"],
            orders=grid,
            conversion=priv["conversion"],
            extra_rdp=extra,
        )
    except (ValueError, ArithmeticError) as exc:
        raise ConfigError(f'[aggregator] {", ".join(auto)} = "auto": {exc}') from None
    return {
        "parameters": auto,
        "calibrated": {k: full[k] for k in auto},
        "target_eps": agg["target_eps"],
        "queries": agg["queries"],
        "delta": priv["delta"],
        "conversion": priv["conversion"],
        "release_included": release,
        "method": (
            f"the smallest noise whose data-independent cost of {agg['queries']} "
            f"queries, all answered{', with the planned sanitized release' if release else ''}, "
            f"is at most eps={agg['target_eps']:g} at delta={priv['delta']:g} "
            f"({priv['conversion']} conversion): {spec.title} calibration of "
            "pate.mechanisms with pate.analysis.calibrate_*"
        ),
    }


def noise_seeded(config: dict) -> bool:
    """Whether the user seeded the aggregator's noise (the run is then NOT private)."""
    return config["aggregator"].get("noise_seed") is not None


def is_private(config: dict) -> bool:
    """False when the run is not differentially private: seeded noise or ``private = false``."""
    return bool(config["privacy"]["private"]) and not noise_seeded(config)


def teacher_settings(config: dict) -> dict:
    """Keyword arguments of :class:`pate.teachers.ensemble.TeacherConfig`."""
    return dict(config["teachers"], device=config["run"]["device"])


def knn_settings(
    config: dict, input_shape=None, *, sizes: tuple[int, int, int] | None = None
) -> dict:
    """The ``[knn]`` settings of a Private-kNN or class-means run with their defaults:
    ``{"features", "dims"}``. ``features`` defaults to "scatternet" when ``input_shape`` is an
    image ScatterNet takes ((C, H, W), H and W multiples of 4 and >= 8), to "kernel" for a
    class-means run on a table (its rule is then nonlinear in the inputs), else "none" (None
    when ``input_shape`` is unknown and the config does not say). A kernel's ``dims``, when left
    out, come from ``sizes`` = (declared private records, classes, public items) and the noise
    sigma (:func:`pate.core.tuned_defaults.kernel_dims`; 64 until both are known)."""
    given = config.get("knn") or {}
    out = dict(KNN_DEFAULTS, **given)
    if "features" not in out and input_shape is not None:
        shape = tuple(int(s) for s in input_shape)
        image = len(shape) == 3 and shape[1] % 4 == 0 and shape[2] % 4 == 0 and min(shape[1:]) >= 8
        spec = mechanisms.REGISTRY.get((config.get("aggregator") or {}).get("mechanism"))
        table_release = len(shape) == 1 and spec is not None and spec.kind.releases_once
        out["features"] = "scatternet" if image else "kernel" if table_release else "none"
    if "dims" not in given and out.get("features") == "none" and input_shape is not None:
        # the default PCA keeps at most the raw inputs' dimensions (a 30-column table: 30)
        out["dims"] = min(out["dims"], math.prod(int(s) for s in input_shape))
    sigma = (config.get("aggregator") or {}).get("sigma")
    if (
        "dims" not in given
        and out.get("features") == "kernel"
        and sizes is not None
        and isinstance(sigma, (int, float))
        and not isinstance(sigma, bool)
        and sigma > 0
    ):
        from pate.core.tuned_defaults import kernel_dims

        records, classes, public = sizes
        out["dims"] = kernel_dims(
            private_records=records, num_classes=classes, sigma=float(sigma), public_items=public
        )
    if out.get("features") == "quadratic" and input_shape is not None:
        from pate.core.quadratic_rule import quadratic_width

        out["dims"] = quadratic_width(math.prod(int(s) for s in input_shape))  # no reduction
    return out


def class_means_rule(config: dict) -> str:
    """How a class-means run labels from its release: ``[knn] rule``; when left out, "qda" over
    the quadratic front-end and "lda" otherwise."""
    knn = config.get("knn") or {}
    return knn.get("rule", "qda" if knn.get("features") == "quadratic" else "lda")


def cluster_settings(config: dict) -> dict:
    """Keyword arguments of :class:`pate.teachers.cluster.ClusterConfig` (a config saved before
    the ``[cluster]`` table existed runs locally)."""
    return dict(config.get("cluster") or {})


#: The ``[student]`` keys that say what the student is trained to, not how (student_targets),
#: and what is released with it (combine_with_rule).
_TARGET_KEYS = ("targets", "temperature", "combine_with_rule")


def student_settings(config: dict) -> dict:
    """Keyword arguments of :class:`pate.student.train.Student` (without data-dependent ones)."""
    return dict(
        {k: v for k, v in config["student"].items() if k not in _TARGET_KEYS},
        device=config["run"]["device"],
    )


def orders(config: dict):
    from pate import analysis

    spec = config["privacy"]["orders"]
    if spec == "default":
        return analysis.DEFAULT_ORDERS
    if spec == "reference":
        return analysis.REFERENCE_ORDERS
    if isinstance(spec, str):
        raise ConfigError(
            f'[privacy] orders must be "default", "reference" or a list of orders > 1, got {spec!r}'
        )
    return checked("[privacy] orders", analysis.validation.check_orders, spec, "orders")


def data_settings(config: dict) -> dict:
    """Keyword arguments of :func:`pate.teachers.data.load_pate_data` (besides the name)."""
    d = config["data"]
    size = d.get("image_size")
    out = {
        "root": d.get("root"),
        "download": d["download"],
        "public_size": d.get("public_size"),
        "eval_size": d.get("eval_size"),
        "classes": d.get("classes"),
        "split_column": d.get("split_column", "split"),
        "evaluation_public": d.get("evaluation_public", False),
    }
    if size is not None:
        out["image_size"] = tuple(size) if isinstance(size, list) else size
    return out


def declared_records(config: dict, data) -> tuple[int, str]:
    """``(records, basis)``: the number of private records every plan and published figure works
    from, and where it comes from -- ``"declared"``: ``[data] records`` (``records=``), the
    approximate number the user states as public; ``"builtin"``: a built-in dataset's private
    split (a public benchmark: its size is a published fact). Never the count of the user's own
    loaded records: that is internal (:func:`pate.run.planner.facts_of` only compares it with
    the declared number). A user's own data without ``[data] records`` is refused
    (:func:`pate.run.config.validate` says so before any data is read)."""
    from pate.teachers.data import DATASET_NAMES

    records = config["data"].get("records")
    if records is not None:
        return int(records), "declared"
    if config["data"]["name"] in DATASET_NAMES:
        return len(data.private), "builtin"
    raise ConfigError(records_needed_text("[data] records"))


def records_needed_text(name: str) -> str:
    """Why ``[data] records`` is needed and what to give (``name``: how the caller spells it:
    ``[data] records`` or ``records=``)."""
    return (
        f"{name} is needed for your own data: declare an approximate number of private records "
        "(a public fact: the plan, the report and the released student are sized from it, so "
        "that nothing published depends on the exact count; within a factor 2 of the true count)"
    )


def load_data(config: dict, *, run_dir=None, cache: bool = True, keep_split_key: bool = False):
    """The ``[data]`` source of ``config``, loaded and split
    (:func:`pate.teachers.data.load_pate_data`) with the feature cache of a run in ``run_dir``
    (None: :func:`run_directory`; :func:`feature_cache_root`), unless ``cache`` is False or the
    cache is off: a built-in dataset's training images (as float32), an ``imagefolder:``
    (decoded) or an ``npz:`` (decompressed, as float32, a pool in split order) are written there
    once and the private split memory-mapped (:mod:`pate.teachers.cached_data`). A pool's
    held-out evaluation split is keyed with the run's key (:func:`evaluation_split_key`; made
    there when ``keep_split_key``, else a fresh one where the run has none yet)."""
    from pate.teachers.data import load_pate_data

    name = config["data"]["name"]
    folder = None
    run_dir = run_directory(config) if run_dir is None else pathlib.Path(run_dir)
    root = feature_cache_root(config, run_dir=run_dir)
    if cache and root is not None:  # the folder is made only when an entry is written
        from pate.teachers.feature_cache import FeatureCache

        folder = FeatureCache(root)

    def split_key() -> bytes | None:
        return evaluation_split_key(run_dir, create=keep_split_key)

    return load_pate_data(name, **data_settings(config), cache=folder, split_key=split_key)


#: Where a run keeps the key of its held-out evaluation split: in the run's folder of private
#: files (owner-only; ``pate.run.rundir`` names that folder too).
SPLIT_KEY_PATH = ("private", "evaluation_split.key")
_SPLIT_KEY_BYTES = 32


def evaluation_split_key(run_dir, *, create: bool) -> bytes | None:
    """The key of the held-out evaluation split of the run in ``run_dir``: 32 bytes from OS
    entropy, written once (mode 0600, in a 0700 folder) when ``create``, read back later (a
    resumed run holds out the same records); None where there is none and not ``create``."""
    import os

    path = pathlib.Path(run_dir).joinpath(*SPLIT_KEY_PATH)
    if path.is_file():
        key = path.read_bytes()
        if len(key) != _SPLIT_KEY_BYTES:
            raise ConfigError(f"{path} holds {len(key)} bytes, not a {_SPLIT_KEY_BYTES}-byte key")
        return key
    if not create:
        return None
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = os.urandom(_SPLIT_KEY_BYTES)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key)
    return key


def ledger_path(config: dict) -> pathlib.Path | None:
    """The ledger this config charges: None when ``[privacy] ledger = false``."""
    setting = config["privacy"]["ledger"]
    if setting is False:
        return None
    if setting is True:
        from pate.ledger import default_ledger_path

        return default_ledger_path().resolve()
    return pathlib.Path(setting).expanduser().resolve()


def run_directory(config: dict) -> pathlib.Path:
    """The run directory: [run] run_dir, else runs/<name>."""
    run = config["run"]
    return pathlib.Path(run.get("run_dir") or pathlib.Path("runs") / run["name"])


def feature_cache_root(config: dict, *, run_dir) -> pathlib.Path | None:
    """The folder of the front-end feature cache of a run in ``run_dir``: ``[run]
    feature_cache`` (false: none), else ``$PATE_FEATURE_CACHE``, else ``.feature-cache`` beside
    the run directory (:func:`pate.teachers.feature_cache.resolve_root`)."""
    from pate.teachers.feature_cache import resolve_root

    return resolve_root(
        config["run"].get("feature_cache"), runs_root=pathlib.Path(run_dir).absolute().parent
    )
