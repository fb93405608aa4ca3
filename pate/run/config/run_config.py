"""The config, typed: :class:`RunConfig`, one frozen table each (:mod:`pate.run.config.tables`),
parsed and validated once; what it says across its tables (the recipes' keyword arguments,
the calibrated noise, the ``[knn]`` front-end, the data) are its methods."""

from __future__ import annotations

import dataclasses
import math
import pathlib
from collections.abc import Mapping
from typing import Any

from pate import mechanisms
from pate.run.config.errors import SettingError
from pate.run.config.keys import frozen, thawed
from pate.run.config.tables import (
    KNN_DIMS,
    PLANNED,
    TABLE_TYPES,
    TARGET_KEYS,
    AggregatorTable,
    ClusterTable,
    DataTable,
    KnnTable,
    PartitionTable,
    PrivacyTable,
    RunTable,
    StudentTable,
    TeachersTable,
    given_keys,
    parsed_table,
)
from pate.teachers.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """A config, table by table; ``planned`` is what the planner filled in (None when nothing
    was left to it). Built by :meth:`from_dict` (or :func:`pate.run.config.load`), never
    changed: :meth:`replace` makes a changed copy."""

    run: RunTable
    data: DataTable
    partition: PartitionTable
    teachers: TeachersTable
    aggregator: AggregatorTable
    privacy: PrivacyTable
    student: StudentTable
    cluster: ClusterTable
    knn: KnnTable
    planned: Mapping[str, Any] | None = None

    # -------------------------------------------------------------- building

    @classmethod
    def parse(cls, raw: Any) -> RunConfig:
        """Tables, keys, types and each key's constraints checked, defaults filled in; no check
        across keys (:meth:`from_dict` adds them)."""
        if not isinstance(raw, dict):
            raise SettingError("config", None, raw, "the configuration must be a TOML table")
        unknown = sorted(set(raw) - set(TABLE_TYPES) - {PLANNED})
        if unknown:
            problem = (
                f"unknown table(s) {', '.join(f'[{u}]' for u in unknown)}; "
                f"valid tables: {', '.join(f'[{t}]' for t in TABLE_TYPES)}"
            )
            raise SettingError(unknown[0], None, raw[unknown[0]], problem)
        tables = {t: parsed_table(t, raw.get(t, {})) for t in TABLE_TYPES}
        planned = raw.get(PLANNED)
        if planned is not None and not isinstance(planned, dict):
            raise SettingError(
                PLANNED, None, planned, f"{PLANNED!r} must be a table written by the planner"
            )
        return cls(**tables, planned=None if planned is None else frozen(planned))

    @classmethod
    def of(cls, **tables: Any) -> RunConfig:
        """A config of typed tables (those left out: their defaults), validated once like
        :meth:`from_dict` (:func:`pate.fit` builds its config so)."""
        from pate.run.config.validation import validate

        defaults = {t: kind.of() for t, kind in TABLE_TYPES.items() if t not in tables}
        config = cls(**tables, **defaults)
        validate(config)
        return config

    @classmethod
    def from_dict(cls, raw: Any) -> RunConfig:
        """A config from its dict (a TOML table, a saved ``config.json``), parsed and validated
        once; settings left to the planner are filled in by :func:`pate.run.config.plan`."""
        from pate.run.config.validation import validate

        config = cls.parse(raw)
        validate(config)
        return config

    def to_dict(self) -> dict:
        """The on-disk form (``config.json``): every table, its keys that are set."""
        out: dict[str, Any] = {}
        for table in TABLE_TYPES:
            section = getattr(self, table)
            out[table] = given_keys(section)
            if table == "aggregator":
                out[table].update(thawed(section.noise))
        if self.planned is not None:
            out[PLANNED] = thawed(self.planned)
        return out

    def replace(self, table: str, **values: Any) -> RunConfig:
        """A copy with ``values`` set in ``table`` (not validated again)."""
        return dataclasses.replace(
            self, **{table: dataclasses.replace(getattr(self, table), **values)}
        )

    def with_ledger(self, path) -> RunConfig:
        """A copy that charges the ledger at ``path`` (resolved to an absolute path)."""
        return self.replace("privacy", ledger=str(pathlib.Path(path).expanduser().resolve()))

    def with_budget_eps(self, eps: float) -> RunConfig:
        """A copy whose ``[privacy] budget_eps`` is ``eps``: the lifetime budget a run goes on
        under once the ledger (or, without one, the config's target) resolved it
        (:func:`pate.run.stages.authorize`). The one change a run makes to its config."""
        return self.replace("privacy", budget_eps=float(eps))

    # -------------------------------------------------------------- the planner's settings

    @property
    def needs_plan(self) -> bool:
        """Whether a setting is left to the planner (:func:`pate.run.planner.needs_plan`)."""
        from pate.run.planner import needs_plan

        return needs_plan(self)

    # -------------------------------------------------------------- what the config says

    @property
    def is_private(self) -> bool:
        """False when the run is not differentially private: seeded noise or ``private = false``."""
        return self.privacy.private and self.aggregator.noise_seed is None

    def teacher_settings(self) -> dict:
        """Keyword arguments of :class:`pate.teachers.ensemble.TeacherConfig`."""
        return dict(given_keys(self.teachers), device=self.run.device)

    def student_settings(self) -> dict:
        """Keyword arguments of :class:`pate.student.train.Student` (without data-dependent ones)."""
        given = given_keys(self.student)
        return dict(
            {k: v for k, v in given.items() if k not in TARGET_KEYS}, device=self.run.device
        )

    def aggregator_params(self) -> dict:
        """The noise parameters of the configured mechanism (and only those), with every
        ``"auto"`` value calibrated (:meth:`calibration`)."""
        params = self.aggregator.given
        calibrated = self.calibration()
        return params if calibrated is None else dict(params, **calibrated["calibrated"])

    def release_rdp(self, params: dict, orders):
        """The RDP at ``orders`` of the planned sanitized release: None unless ``[privacy]
        release`` is on and the mechanism has one with the noise ``params``."""
        from pate import analysis

        priv = self.privacy
        if not (priv.release and self.aggregator.spec.release_params(params) is not None):
            return None
        return analysis.gnss_rdp_curve(
            beta=priv.release_beta, sigma_ss=priv.release_sigma_ss, orders=orders
        )

    def calibration(self) -> dict | None:
        """What ``"auto"`` noise parameters were calibrated to, and how (None without ``"auto"``).

        The smallest noise such that asking ``[aggregator] queries`` queries, all answered (the
        worst case), composed with the planned sanitized release's cost (when ``[privacy]
        release`` is on and the mechanism has one), costs at most ``target_eps`` at ``delta``
        with the config's conversion and orders: public quantities only, fixed before any data
        is seen (:meth:`pate.mechanisms.MechanismSpec.calibrate`)."""

        agg, priv = self.aggregator, self.privacy
        spec, params = agg.spec, agg.given
        auto = sorted(k for k, v in params.items() if v == "auto")
        if not auto:
            return None
        grid = priv.order_grid()
        extra = self.release_rdp({k: (1.0 if v == "auto" else v) for k, v in params.items()}, grid)
        release = extra is not None
        try:
            full = spec.calibrate(
                params,
                target_eps=agg.target_eps,
                delta=priv.delta,
                num_queries=agg.queries,
                orders=grid,
                conversion=priv.conversion,
                extra_rdp=extra,
            )
        except (ValueError, ArithmeticError) as exc:
            raise SettingError(
                "aggregator", auto[0], "auto", f'[aggregator] {", ".join(auto)} = "auto": {exc}'
            ) from None
        return {
            "parameters": auto,
            "calibrated": {k: full[k] for k in auto},
            "target_eps": agg.target_eps,
            "queries": agg.queries,
            "delta": priv.delta,
            "conversion": priv.conversion,
            "release_included": release,
            "method": (
                f"the smallest noise whose data-independent cost of {agg.queries} "
                f"queries, all answered{', with the planned sanitized release' if release else ''}, "
                f"is at most eps={agg.target_eps:g} at delta={priv.delta:g} "
                f"({priv.conversion} conversion): {spec.title} calibration of "
                "pate.mechanisms with pate.analysis.calibrate_*"
            ),
        }

    def knn_settings(self, input_shape=None, *, sizes: tuple[int, int, int] | None = None) -> dict:
        """The ``[knn]`` settings of a Private-kNN or class-means run with their defaults:
        ``{"features", "dims"}`` (and the other keys given). ``features`` defaults to
        "scatternet" when ``input_shape`` is an image ScatterNet takes ((C, H, W), H and W
        multiples of 4 and >= 8), to "kernel" for a class-means run on a table, else "none"
        (left out when ``input_shape`` is unknown and the config does not say). A kernel's
        ``dims``, when left out, come from ``sizes`` = (declared private records, classes,
        public items) and the noise sigma (:func:`pate.core.tuned_defaults.kernel_dims`)."""
        given = given_keys(self.knn)
        out = dict({"dims": KNN_DIMS}, **given)
        if "features" not in out and input_shape is not None:
            shape = tuple(int(s) for s in input_shape)
            image = (
                len(shape) == 3 and shape[1] % 4 == 0 and shape[2] % 4 == 0 and min(shape[1:]) >= 8
            )
            spec = mechanisms.REGISTRY.get(self.aggregator.mechanism)
            table_release = len(shape) == 1 and spec is not None and spec.kind.releases_once
            out["features"] = "scatternet" if image else "kernel" if table_release else "none"
        if "dims" not in given and out.get("features") == "none" and input_shape is not None:
            # the default PCA keeps at most the raw inputs' dimensions (a 30-column table: 30)
            out["dims"] = min(out["dims"], math.prod(int(s) for s in input_shape))
        sigma = self.aggregator.noise.get("sigma")
        if (
            "dims" not in given
            and out.get("features") == "kernel"
            and sizes is not None
            and isinstance(sigma, float)
            and sigma > 0
        ):
            from pate.core.tuned_defaults import kernel_dims

            records, classes, public = sizes
            out["dims"] = kernel_dims(
                private_records=records, num_classes=classes, sigma=sigma, public_items=public
            )
        if out.get("features") == "quadratic" and input_shape is not None:
            from pate.core.quadratic_rule import quadratic_width

            out["dims"] = quadratic_width(math.prod(int(s) for s in input_shape))  # no reduction
        return out

    def load_data(self, *, run_dir=None, cache: bool = True, keep_split_key: bool = False):
        """The ``[data]`` source, loaded and split (:func:`pate.teachers.data.load_pate_data`)
        with the feature cache of a run in ``run_dir`` (None: the config's run directory),
        unless ``cache`` is False or the cache is off. A pool's held-out evaluation split is
        keyed with the run's key (:func:`evaluation_split_key`; made there when
        ``keep_split_key``, else a fresh one where the run has none yet)."""
        from pate.teachers.data import load_pate_data

        folder = None
        run_dir = self.run.directory() if run_dir is None else pathlib.Path(run_dir)
        root = self.run.feature_cache_root(run_dir=run_dir)
        if cache and root is not None:  # the folder is made only when an entry is written
            from pate.teachers.feature_cache import FeatureCache

            folder = FeatureCache(root)

        def split_key() -> bytes | None:
            return evaluation_split_key(run_dir, create=keep_split_key)

        return load_pate_data(
            self.data.name, **self.data.loader_settings(), cache=folder, split_key=split_key
        )


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
        secret = path.read_bytes()
        if len(secret) != _SPLIT_KEY_BYTES:
            raise ConfigError(
                f"{path} holds {len(secret)} bytes, not a {_SPLIT_KEY_BYTES}-byte key"
            )
        return secret
    if not create:
        return None
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    secret = os.urandom(_SPLIT_KEY_BYTES)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(secret)
    return secret
