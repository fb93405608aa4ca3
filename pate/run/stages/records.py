"""What the stages of a mechanism that reads the private records share: which stages it skips,
the size of its public-fitted embedding, an earlier round whose released student embeds it
(:func:`knn_prior`), and what its aggregate stage starts from and publishes."""

from __future__ import annotations

import contextlib
import functools
import pathlib
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from pate.core.io import load_npz
from pate.run import rundir
from pate.run.rundir import Run
from pate.run.stages.budget import eps_of, run_identity
from pate.run.stages.release import release_plan
from pate.run.stages.rounds import charged_part
from pate.teachers.errors import ConfigError


def skip_reason(config: dict, stage: str) -> str | None:
    """Why ``stage`` does not apply to a run of ``config``, or None: a mechanism that reads the
    private records itself has no partition and no teachers."""
    spec = config.aggregator.spec
    if spec.kind.reads_private_records and stage in ("partition", "teachers"):
        return f"mechanism {spec.name!r} ({spec.title}) trains no teachers: {spec.voters_text}"
    return None


def feature_cache(run: Run):
    """The on-disk front-end feature cache of this run (None: ``[run] feature_cache = false``
    or ``$PATE_FEATURE_CACHE=off``); docs/feature_cache.md."""
    from pate.teachers.feature_cache import FeatureCache

    root = run.config.run.feature_cache_root(run_dir=run.run_dir)
    return None if root is None else FeatureCache(root)


def embedding_features(run: Run) -> tuple[str, int, int]:
    """(features, dims, feature count) of the records' embedding (ConfigError if the data
    cannot take them), from public sizes only: no record is read."""
    data = run.data
    settings = run.config.knn_settings(
        data.input_shape,
        sizes=(run.config.data.declared_records(data)[0], int(data.num_classes), len(data.public)),
    )
    features, dims = settings["features"], settings["dims"]
    if features == "student":  # the earlier student's class probabilities, no PCA
        return features, int(data.num_classes), int(data.num_classes)
    if features in ("kernel", "quadratic") and len(data.input_shape) != 1:
        raise ConfigError(
            f'[knn] features = "{features}" maps tables; {data.name} has inputs of shape '
            f'{tuple(data.input_shape)}: set [knn] features = "scatternet" or "none"'
        )
    if features == "kernel":
        from pate.teachers.public_embedding import KERNEL_FEATURES

        return features, dims, KERNEL_FEATURES
    if features == "quadratic":
        from pate.core.quadratic_rule import QUADRATIC_MAX_WIDTH, quadratic_width

        width = quadratic_width(int(data.input_shape[0]))
        if width > QUADRATIC_MAX_WIDTH:
            raise ConfigError(
                f'[knn] features = "quadratic": {data.input_shape[0]} columns make '
                f"{width} features (at most {QUADRATIC_MAX_WIDTH}); set [knn] features "
                '= "kernel"'
            )
        return features, width, width
    if features in ("scatternet", "scatternet+patches"):
        from pate.teachers.features import feature_shape
        from pate.teachers.patch_features import patch_width

        try:
            width = int(np.prod(feature_shape(data.input_shape)))
            if features == "scatternet+patches":
                width += patch_width(data.input_shape)
        except ValueError as exc:
            raise ConfigError(f'[knn] features: {exc}; set [knn] features = "none"') from None
    else:
        width = int(np.prod(data.input_shape))
    return features, dims, width


def private_rows(run: Run) -> np.ndarray | None:
    """The private rows a mechanism that reads the records may use: with an id column, each
    person's first row only, so adding or removing a person changes at most one row and the
    record-level bound holds per person; None: every row."""
    ids = run.data.unit_ids
    if ids is None:
        return None
    return np.sort(np.unique(ids.astype(str), return_index=True)[1])


def check_records_data(run: Run) -> None:
    features, dims, width = embedding_features(run)
    limit = min(len(run.data.public), width)
    if features == "student":
        knn_prior(run)  # the earlier run is usable (ConfigError naming it otherwise)
    elif features != "quadratic" and dims > limit:  # quadratic features are not reduced
        raise ConfigError(
            f"[knn] dims ({dims}) exceeds min(public items, {features!r} features) "
            f"= {limit} of {run.data.name}: the principal axes are fitted on the "
            "public split"
        )
    k = run.config.aggregator_params().get("k")  # Private-kNN's neighbours per query
    rows = private_rows(run)
    usable = len(run.data.private) if rows is None else rows.size
    if k is not None and k > usable:
        raise ConfigError(
            f"[aggregator] k ({k}) exceeds the {usable} private "
            f"{'records' if rows is None else 'people'} of {run.data.name}"
        )


def knn_prior(run: Run) -> dict | None:
    """The earlier rounds whose released student embeds this run (``[knn] features =
    "student"``) and their charged cost: ``{"runs": [{"run_dir", "run_id", "eps"}, ...], "rdp":
    [...]}``; None for any other run. ConfigError before anything is drawn unless that run drew
    fresh noise, charged to this run's ledger for the same records (docs/pipeline.md, "Rounds")."""
    knn = run.config.knn
    if knn.features != "student":
        return None
    path = pathlib.Path(knn.student_run).expanduser().resolve()
    where = f"[knn] student_run = {knn.student_run!r}"
    summary, digest = _usable_earlier_run(run, path, where)
    orders = run.config.privacy.order_grid()
    own = _recorded_cost(summary, orders, where)
    # the cost is the ledger's, per run of the chain; what the files record must agree with it
    earlier = summary.get("prior") or {"runs": [], "rdp": np.zeros(orders.size).tolist()}
    chain = [r["run_id"] for r in earlier["runs"]] + [summary["run_id"]]
    charged = _charged_per_run(run, digest, chain, orders)
    recorded = (own, np.asarray(earlier["rdp"], dtype=float))
    ledgered = (
        charged[summary["run_id"]],
        sum((charged[r] for r in chain[:-1]), np.zeros(orders.size)),
    )
    if not all(np.allclose(a, b, rtol=1e-9, atol=0) for a, b in zip(recorded, ledgered)):
        raise ConfigError(
            f"{where}: the ledger {run.ledger_path} does not hold the charges of that run "
            "(or of its earlier rounds) as its aggregate.json records them "
            "(modified, or from another ledger); it cannot be composed"
        )
    eps = eps_of(run.config, ledgered[0])
    return {
        "runs": [
            *earlier["runs"],
            {"run_dir": str(path), "run_id": summary["run_id"], "eps": float(eps)},
        ],
        "rdp": sum(charged.values(), np.zeros(orders.size)).tolist(),
    }


def _usable_earlier_run(run: Run, path: pathlib.Path, where: str) -> tuple[dict, str]:
    """``(aggregate.json of the earlier run at path, this run's dataset digest)``, checked."""
    for name in (rundir.STUDENT_WEIGHTS, rundir.AGGREGATE):
        if not (path / name).is_file():
            raise ConfigError(
                f"{where}: {path / name} does not exist; name the directory of a "
                "finished run (its student trained)"
            )
    summary = rundir.read_summary(path / rundir.AGGREGATE, rundir.AGGREGATE_KEYS)
    if summary["noise_seeded"]:
        raise ConfigError(
            f"{where}: that run's noise was seeded (not private); its student "
            "cannot embed a private run"
        )
    ledger = run.ledger_path
    if (
        ledger is None
        or summary["ledger"] is None
        or pathlib.Path(summary["ledger"]).resolve() != ledger.resolve()
    ):
        raise ConfigError(
            f"{where}: that run was charged to the ledger {summary['ledger']} and "
            f"this run's is {ledger}; both rounds must be charged to the same "
            "ledger, which composes them against one budget"
        )
    with contextlib.closing(run.ledger()) as opened:
        digest = opened.dataset_id(run_identity(run))  # the ledger's (keyed) id of the records
    if summary["dataset"] != digest:
        raise ConfigError(f"{where}: that run's private records are not this run's")
    return summary, digest


def _recorded_cost(summary: dict, orders: np.ndarray, where: str) -> np.ndarray:
    """The data-independent RDP of the events an earlier run's aggregate.json records."""
    from pate.analysis import PrivacyEvent

    own = np.zeros(orders.size)
    for entry in summary["events"]:
        event = PrivacyEvent.from_dict(entry)
        if not np.array_equal(event.orders, orders):
            raise ConfigError(
                f"{where}: that run used other [privacy] orders; use the same orders in every round"
            )
        own = own + event.rdp_data_independent
    return own


def _charged_per_run(run: Run, digest: str, chain: list, orders: np.ndarray) -> dict:
    """``{run_id: data-independent RDP the ledger charged that run on dataset digest}`` for
    every run of ``chain``."""
    with contextlib.closing(run.ledger()) as opened:
        return {
            run_id: sum(
                (
                    np.asarray(e.event.rdp_data_independent, dtype=float)
                    for e in opened.events(digest, run_id=run_id)
                ),
                np.zeros(orders.size),
            )
            for run_id in chain
        }


class RecordsInputs(NamedTuple):
    """What the aggregate stage of a mechanism that reads the private records starts from
    (:func:`records_inputs`); a tuple, so it also unpacks in this order."""

    params: dict
    public: np.ndarray
    private: np.ndarray
    private_labels: np.ndarray
    num_classes: int
    num_queries: int
    queries: int
    orders: np.ndarray
    plan: dict
    prior: dict | None
    prior_rdp: np.ndarray
    eps_of: Callable[[np.ndarray], float]  # at the config's orders, delta and conversion


def records_inputs(run: Run, spec) -> RecordsInputs:
    """What the aggregate stage of a mechanism that reads the private records starts from."""
    config = run.config
    params = spec.validate(config.aggregator_params(), prefix="[aggregator] ")
    # the private embeddings memory-mapped: read a block at a time, never all held (issue #33)
    emb = load_npz(run.path(rundir.KNN_EMBEDDINGS), what="the votes stage", mapped=("private",))
    public, private = emb["public"], emb["private"]
    num_classes, num_queries = int(emb["num_classes"]), public.shape[0]
    orders = config.privacy.order_grid()
    declared = config.data.declared_records(run.data)[0]  # public: never the exact count
    plan = release_plan(
        config,
        num_teachers=max(1, spec.voters(params, private_records=declared)),
        num_classes=num_classes,
        orders=orders,
    )
    prior = knn_prior(run)
    prior_rdp = np.zeros(orders.size) if prior is None else np.asarray(prior["rdp"], dtype=float)
    return RecordsInputs(
        params,
        public,
        private,
        emb["private_labels"],
        num_classes,
        num_queries,
        min(
            num_queries if config.aggregator.queries is None else config.aggregator.queries,
            num_queries,
        ),
        orders,
        plan,
        prior,
        prior_rdp,
        functools.partial(eps_of, config),
    )


def records_summary(
    run: Run, spec, inputs: RecordsInputs, events, progress, *, answered, charging, **mechanism_part
) -> dict:
    """``aggregate.json`` of a mechanism that reads the private records after the rounds so far:
    the realised cost of ``events`` is their data-independent one, no sanitized release;
    ``mechanism_part`` the mechanism's own entry (e.g. ``knn={...}``)."""
    from pate import analysis

    config, orders, priv = run.config, inputs.orders, run.config.privacy
    rdp = sum((e.rdp_data_independent for e in events), np.zeros(orders.size))
    eps, order = analysis.eps_from_rdp(
        rdp, orders=orders, delta=priv.delta, conversion=priv.conversion
    )
    return {
        "mechanism": spec.name,
        "params": dict(inputs.params),
        "budget_eps": priv.budget_eps,
        "delta": priv.delta,
        "budget_basis": config.aggregator.budget_basis.replace("-", "_"),
        "conversion": priv.conversion,
        "queries_asked": int(progress.asked),
        "queries_answered": int(answered),
        "eps_data_independent": float(eps),
        "order_data_independent": float(order),
        "eps_data_dependent": float(eps),
        "order_data_dependent": float(order),
        "prior_included": False,
        **charged_part(
            config,
            charging,
            events=events,
            queries=inputs.queries,
            plan=inputs.plan,
            rounds=progress,
        ),
        "release": None,
        **mechanism_part,
        "prior": inputs.prior,
    }
