"""One method of the utility benchmark at one target eps (benchmarks/utility.py's module
docstring describes each): a row of accuracy, eps and the settings that made it.

``base_run`` runs a config up to its votes (the part every target shares); ``pate_budget``,
``knn_budget``, ``knn_rounds_budget`` and ``class_means_budget`` fork it per target and finish the
pipeline; ``dpsgd_cnn_budget`` (Opacus) and ``dpsgd_scatter_budget`` (benchmarks/dpsgd_linear.py)
train the DP-SGD baselines; ``scatter_ceiling`` is the true-label ceiling of the ScatterNet
features. A class-means run of the held-out protocol (benchmarks/utility_holdout.py) is also
scored on the held-out images.
"""

from __future__ import annotations

import json
import pathlib
import time

from utility_planning import largest_prefix

CONVERSION = "tight"
TEACHER_RECIPE = {"features": "scatternet", "model": "auto", "epochs": 20, "lr": 2e-3}
#: PATE ensembles: number of teachers -> Confident GNMax (threshold, sigma1, sigma2).
#: 250: the pipeline's default ensemble with Papernot et al. 2018's published MNIST noise (the
#: config's), fixed before any data was seen. 1000: chosen in a development simulation that
#: LOOKED AT PRIVATE DATA (teachers trained on the private shards, their votes on the public
#: items, scored with the public items' true labels; grid over 250/1000/2000 teachers, threshold
#: 0.4-0.7 x teachers, sigma2 0.1-0.2 x teachers, sigma1 = 2 or 3.75 x sigma2, at eps = 1): an
#: earlier look outside the reported eps, listed in TUNED_ON.
PATE_ENSEMBLES = {
    250: {"threshold": 200.0, "sigma1": 150.0, "sigma2": 40.0},
    1000: {"threshold": 600.0, "sigma1": 300.0, "sigma2": 150.0},
}
#: Public items offered to the label-based methods (all of them; the budget stops the aggregator).
QUERIES = 9000
#: DP-SGD settings, one each, fixed a priori.
DPSGD_CNN = {"epochs": 15, "batch_size": 1024, "lr": 2.0, "clip": 0.1}


def _copy(base_config) -> dict:
    """The on-disk form of a run's config (a :class:`pate.run.config.RunConfig`), to edit."""
    return base_config.to_dict()


def _eps_fields(report: dict) -> tuple[float, float | None]:
    p = report["privacy"]
    eps = p.get("eps_guarantee", p["eps_data_independent"])
    return float(eps), (
        None if p.get("eps_data_dependent") is None else float(p["eps_data_dependent"])
    )


def _row(method: str, report: dict, target: float, *, delta: float, t0: float, **extra) -> dict:
    """A guarantee row of a label-based method from its run's INTERNAL report
    (``Pipeline(...).run(internal=True)``): the student's accuracy on an evaluation split not
    declared public is not in the publishable report.json."""
    eps, _ = _eps_fields(report)
    q, u = report["queries"], report["utility"]
    return {
        "method": method,
        "kind": "guarantee",
        "target_eps": target,
        "eps": eps,
        "delta": delta,
        "accuracy": u["student_accuracy"],
        "answered": q["answered"],
        "asked": q["asked"],
        "label_accuracy": u.get("label_accuracy_answered"),
        **extra,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def pate_budget(
    base_dir: pathlib.Path,
    base_config: dict,
    target: float,
    *,
    delta: float,
    out: pathlib.Path,
    teachers: int,
    seed: int | None = None,
    holdout=None,
) -> list[dict]:
    """Fork the PATE base run, answer until the data-independent eps reaches ``target`` with the
    fixed aggregator, train the student. Returns the guarantee row and the data-dependent row
    (same answers, same student; its eps looked at the votes). ``seed`` and ``holdout``: as
    :func:`class_means_budget`'s."""
    from pate.run.config import build
    from pate.run.pipeline import Pipeline, fork_run

    t0 = time.perf_counter()
    config = _copy(base_config)
    aggregator = dict(PATE_ENSEMBLES[teachers], mechanism="confident-gnmax")
    config["aggregator"] = dict(aggregator, queries=QUERIES, budget_basis="data-independent")
    config["privacy"].update(
        delta=delta, conversion=CONVERSION, ledger=False, release=False, budget_eps=target
    )
    config["run"]["run_dir"] = str(out / f"pate{teachers}-eps{target:g}{run_suffix(seed)}")
    config = build(config)
    fork_run(base_dir, config)
    report = Pipeline(config, resume=True, progress=False).run(internal=True)
    _, eps_dd = _eps_fields(report)
    row = _row(
        "PATE",
        report,
        target,
        delta=delta,
        t0=t0,
        aggregator=aggregator,
        teachers=teachers,
        **_run_fields(config, seed, holdout),
    )
    rows = [row]
    if eps_dd is not None:
        rows.append(
            dict(
                row,
                method="PATE (data-dependent eps of the same answers)",
                kind="data-dependent",
                eps=eps_dd,
            )
        )
    return rows


def base_run(config_path, run_dir: pathlib.Path, *, device, data_root=None, edit=None):
    """Run a config (ledger off; ``edit(config)`` may change it first) up to the votes stage,
    the part every target's fork shares; returns (the config, seconds)."""
    from pate.run.config import build, load
    from pate.run.pipeline import Pipeline

    config = load(config_path, device=device, run_dir=str(run_dir)).to_dict()
    config["privacy"]["ledger"] = False
    if data_root:
        config["data"]["root"] = data_root
    if edit is not None:
        edit(config)
    config = build(config)
    t0 = time.perf_counter()
    Pipeline(config, resume=True, progress=False).run(until="votes")
    return config, round(time.perf_counter() - t0, 1)


def knn_budget(
    base_dir: pathlib.Path,
    base_config: dict,
    target: float,
    *,
    delta: float,
    out: pathlib.Path,
    seed: int | None = None,
    holdout=None,
) -> dict:
    """Fork the Private-kNN base run, ask until the eps reaches ``target``, train the student.
    ``seed`` and ``holdout``: as :func:`class_means_budget`'s."""
    from pate.run.config import build
    from pate.run.pipeline import Pipeline, fork_run

    t0 = time.perf_counter()
    config = _copy(base_config)
    config["aggregator"].update(queries=QUERIES)
    config["privacy"].update(
        delta=delta, conversion=CONVERSION, ledger=False, release=False, budget_eps=target
    )
    config["run"]["run_dir"] = str(out / f"knn-eps{target:g}{run_suffix(seed)}")
    config = build(config)
    fork_run(base_dir, config)  # a Private-kNN base: its embeddings and skipped stages
    report = Pipeline(config, resume=True, progress=False).run(internal=True)
    agg = {
        k: base_config.aggregator.noise[k]
        for k in ("k", "sampling_rate", "threshold", "sigma1", "sigma2")
    }
    return _row(
        "Private-kNN",
        report,
        target,
        delta=delta,
        t0=t0,
        aggregator=agg,
        **_run_fields(config, seed, holdout),
    )


def knn_rounds_budget(
    base_dir: pathlib.Path,
    base_config: dict,
    target: float,
    *,
    delta: float,
    out: pathlib.Path,
    seed: int | None = None,
    holdout=None,
) -> dict:
    """Two Private-kNN rounds within ``target``: round 1 (a fork of the base run) spends half of
    it, round 2 embeds with round 1's student and stops when both rounds reach ``target``.
    ``seed`` and ``holdout``: as :func:`class_means_budget`'s (round 2's student is scored)."""
    from pate import mechanisms
    from pate.analysis import eps_from_rdp
    from pate.run.config import RunConfig, build
    from pate.run.pipeline import Pipeline, fork_run

    t0 = time.perf_counter()
    folder = out / f"knn2-eps{target:g}{run_suffix(seed)}"
    ledger = folder / "ledger.sqlite3"
    ledger.unlink(missing_ok=True)  # each target its own budget
    first = _copy(base_config)
    first["privacy"].update(
        delta=delta,
        conversion=CONVERSION,
        ledger=str(ledger.resolve()),
        release=False,
        budget_eps=target,
    )
    spec = mechanisms.get("private-knn")
    params = spec.validate(RunConfig.parse(first).aggregator_params())
    orders = base_config.privacy.order_grid()
    worst = spec.worst_case_query_rdp(params, orders=orders)
    half = largest_prefix(
        lambda n: (
            eps_from_rdp(n * worst, orders=orders, delta=delta, conversion=CONVERSION)[0]
            <= target / 2
        ),
        QUERIES,
    )
    if half == 0:
        raise ValueError(f"one Private-kNN query costs more than half of eps = {target:g}")
    first["aggregator"].update(queries=half)
    first["run"]["run_dir"] = str(folder / "round1")
    first = build(first)
    fork_run(base_dir, first)
    Pipeline(first, resume=True, progress=False).run()
    second = _copy(first)
    second["knn"] = {"features": "student", "student_run": str((folder / "round1").resolve())}
    second["aggregator"].update(queries=QUERIES)
    second["run"].update(run_dir=str(folder / "round2"), name=second["run"]["name"] + "-round2")
    second = build(second)
    report = Pipeline(second, resume=True, progress=False).run(internal=True)
    return _row(
        "Private-kNN, 2 rounds",
        report,
        target,
        delta=delta,
        t0=t0,
        round1_queries=half,
        **_run_fields(second, seed, holdout),
    )


def class_means_budget(
    base_dir: pathlib.Path,
    base_config: dict,
    target: float,
    *,
    delta: float,
    out: pathlib.Path,
    name_dims: bool = False,
    name_features: bool = False,
    seed: int | None = None,
    holdout=None,
) -> dict:
    """Fork the class-means base run, release the class sums once with the smallest sigma whose
    one release costs ``target`` (public arithmetic), label the public items, train the student.
    ``name_dims`` / ``name_features``: the method's name says the embedding's dims / features
    (``--class-means-dims`` / ``--class-means-features``).
    ``seed``: the base run's ``[run] seed`` (recorded; the release's noise is fresh OS entropy
    in every run). ``holdout``: the held-out split of the ``pate-holdout`` protocol
    (benchmarks/utility_holdout.py); the released model is then also scored on it."""
    from pate.run.pipeline import Pipeline

    t0 = time.perf_counter()
    config = _class_means_fork(
        base_dir,
        base_config,
        target,
        delta=delta,
        run_dir=out / f"class-means-eps{target:g}{run_suffix(seed)}",
    )
    report = Pipeline(config, resume=True, progress=False).run(internal=True)
    extra = _run_fields(config, seed, holdout)
    agg = {k: v for k, v in config.to_dict()["aggregator"].items() if k not in ("queries",)}
    model = config.student.model or "auto"
    temperature = config.student.soft_temperature()
    combined = bool(config.student.combine_with_rule)
    method = (
        "Noisy class means"
        + ("" if model in ("auto", "cnn28") else f", {model} student")
        + ("" if temperature is None else ", soft targets")
        + (", times its rule" if combined else "")
        + (f", {base_config.knn.dims} dims" if name_dims else "")
        + (f", {base_config.knn.features} features" if name_features else "")
    )
    return _row(
        method,
        report,
        target,
        delta=delta,
        t0=t0,
        aggregator=agg,
        dims=base_config.knn.dims,
        rule=base_config.knn.labelling_rule,
        student_model=model,
        student_targets="hard" if temperature is None else "soft",
        **({} if temperature is None else {"student_temperature": temperature}),
        **(
            {}
            if not combined
            else {"student_alone_accuracy": report["utility"]["student_alone_accuracy"]}
        ),
        **extra,
    )


def _class_means_fork(
    base_dir: pathlib.Path, base_config: dict, target: float, *, delta: float, run_dir
) -> dict:
    """A fork of the class-means base run into ``run_dir`` whose one release costs ``target``:
    the smallest such sigma (public arithmetic), ledger off; returns its config."""
    from pate import mechanisms
    from pate.analysis.class_means import calibrate_class_means_sigma
    from pate.run.config import build
    from pate.run.pipeline import fork_run

    config = _copy(base_config)
    orders = base_config.privacy.order_grid()
    count_weight = mechanisms.get("class-means").with_defaults(config["aggregator"])["count_weight"]
    sigma = calibrate_class_means_sigma(
        eps=target, delta=delta, count_weight=count_weight, orders=orders, conversion=CONVERSION
    )
    config["aggregator"].update(sigma=sigma, queries=QUERIES)
    config["privacy"].update(
        delta=delta, conversion=CONVERSION, ledger=False, release=False, budget_eps=target
    )
    config["run"]["run_dir"] = str(run_dir)
    config = build(config)
    fork_run(base_dir, config)  # a class-means base: its embeddings and skipped stages
    return config


def class_means_rule_budget(
    base_dir: pathlib.Path,
    base_config: dict,
    target: float,
    *,
    delta: float,
    out: pathlib.Path,
    repeat: int,
    splits: dict,
    name_features: bool = False,
) -> dict:
    """``--rule-alone``: a class-means run up to its labels (one fresh release costing
    ``target``), then its labelling rule -- recovered from the published class scores as the
    released product's second factor is (``[student] combine_with_rule``) -- scored on
    ``splits`` (name -> ArraySplit). No student: the rule alone is not what the config releases
    (row field ``released_model = False``), but it is post-processing of the release.
    ``name_features``: the method's name says the embedding's features."""

    import numpy as np
    import utility_holdout

    from pate.core.io import load_npy
    from pate.run import rundir
    from pate.run.pipeline import Pipeline
    from pate.run.rundir import Run
    from pate.run.stages.student import rule_head  # the head the released product carries

    t0 = time.perf_counter()
    run_dir = out / f"class-means-rule-eps{target:g}-r{repeat}"
    config = _class_means_fork(base_dir, base_config, target, delta=delta, run_dir=run_dir)
    Pipeline(config, resume=True, progress=False).run(until="aggregate")
    run = Run.open(run_dir, progress=False)
    labels = load_npy(run.path(rundir.LABELS))
    head = rule_head(run, labels)
    scores = {name: utility_holdout.factor_accuracy(head, split) for name, split in splits.items()}
    public = run.data.public
    aggregate = json.loads(run.path(rundir.AGGREGATE).read_text())
    return {
        "method": "Noisy class means"
        + (f", {base_config.knn.features} features" if name_features else "")
        + ", its labelling rule alone (not released)",
        "kind": "guarantee",
        "target_eps": target,
        "eps": float(aggregate["eps_data_independent"]),
        "delta": delta,
        "released_model": False,
        "repeat": repeat,
        "label_accuracy": float(np.mean(labels == public.y)) if (public.y >= 0).all() else None,
        "aggregator": {k: v for k, v in config.to_dict()["aggregator"].items() if k != "queries"},
        "dims": base_config.knn.dims,
        "features": base_config.knn.features,
        "rule": config.knn.rule,
        **{f"accuracy{utility_holdout.FIELD[name]}": acc for name, acc in scores.items()},
        "holdout": utility_holdout.HOLDOUT_SET in scores,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def run_suffix(seed: int | None) -> str:
    """A run directory's suffix for a base run's ``[run] seed`` (none for the config's own)."""
    return "" if seed is None else f"-s{seed}"


def _run_fields(config: dict, seed: int | None, holdout) -> dict:
    """The row fields of a finished pipeline run: its base run's seed (when one was given) and,
    on the held-out protocol, its released model's scores on the held-out images."""

    fields: dict = {} if seed is None else {"seed": seed}
    if holdout is not None:
        fields.update(_holdout_scores(config.run.directory(), holdout))
    return fields


def _holdout_scores(run_dir: pathlib.Path, heldout) -> dict:
    """The row fields of a held-out run: its released model (and a product's factors) scored on
    the 10000 held-out private images (benchmarks/utility_holdout.py)."""
    import utility_holdout

    scores = utility_holdout.score_released_model(run_dir, {utility_holdout.HOLDOUT_SET: heldout})
    fields = {"holdout": True, "accuracy_holdout": scores["released"][utility_holdout.HOLDOUT_SET]}
    for key in ("student_alone", "rule_alone"):
        if key in scores:
            fields[f"{key}_accuracy_holdout"] = scores[key][utility_holdout.HOLDOUT_SET]
    return fields


def _opacus_train(
    model,
    x,
    y,
    *,
    target: float,
    delta: float,
    epochs: int,
    batch_size: int,
    lr: float,
    clip: float,
    seed: int,
    device: str,
):
    """Opacus DP-SGD (RDP accountant, Poisson sampling, ghost clipping) at (target, delta);
    returns (model, privacy engine, optimizer)."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    try:
        from opacus import PrivacyEngine
    except ImportError:
        raise SystemExit(
            "DP-SGD needs Opacus: pip install 'pate-learn[bench]' (or --skip-dpsgd)"
        ) from None
    loader = DataLoader(
        TensorDataset(x, y),
        batch_size=batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    engine = PrivacyEngine(accountant="rdp")
    # Ghost clipping: per-example gradient norms without materialising per-example gradients.
    model, optimizer, criterion, loader = engine.make_private_with_epsilon(
        module=model,
        optimizer=optimizer,
        data_loader=loader,
        target_epsilon=target,
        target_delta=delta,
        epochs=epochs,
        max_grad_norm=clip,
        noise_generator=torch.Generator(device=device).manual_seed(seed + 1),
        criterion=torch.nn.CrossEntropyLoss(),
        grad_sample_mode="ghost",
    )
    model.train()
    for _ in range(epochs):
        for xb, yb in loader:
            if len(xb) == 0:  # Poisson sampling can draw an empty batch
                continue
            optimizer.zero_grad(set_to_none=True)
            criterion(model(xb.to(device)), yb.to(device)).backward()
            optimizer.step()
    model.eval()
    return model, engine, optimizer


def _evaluate(model, x, y, device: str) -> float:
    import torch

    with torch.no_grad():
        xe = torch.from_numpy(x).to(device)
        pred = torch.cat([model(xe[i : i + 500]).argmax(1) for i in range(0, len(xe), 500)]).cpu()
    return float((pred.numpy() == y).mean())


def dpsgd_cnn_budget(
    data, target: float, *, delta: float, seed: int, device: str, holdout=None
) -> dict:
    """DP-SGD with Opacus at (target, delta): cnn28 on the 60000 private images; with
    ``holdout`` (the held-out protocol's split, benchmarks/utility_holdout.py) on the first
    50000 only, scored also on the held-out 10000."""
    import torch

    from pate.teachers.models import build_model

    t0 = time.perf_counter()
    keep = len(data.private.x) - (0 if holdout is None else len(holdout.x))
    torch.manual_seed(seed)
    model = build_model("cnn28", input_shape=data.input_shape, num_classes=data.num_classes).to(
        device
    )
    model, engine, optimizer = _opacus_train(
        model,
        torch.from_numpy(data.private.x[:keep]),
        torch.from_numpy(data.private.y[:keep]).long(),
        target=target,
        delta=delta,
        seed=seed,
        device=device,
        **DPSGD_CNN,
    )
    return {
        "method": "DP-SGD CNN",
        "kind": "guarantee",
        "target_eps": target,
        "eps": float(engine.get_epsilon(delta)),
        "delta": delta,
        "accuracy": _evaluate(model, data.evaluation.x, data.evaluation.y, device),
        "answered": None,
        "noise_multiplier": float(optimizer.noise_multiplier),
        **DPSGD_CNN,
        "seed": seed,
        **(
            {}
            if holdout is None
            else {
                "holdout": True,
                "accuracy_holdout": _evaluate(model, holdout.x, holdout.y, device),
            }
        ),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def dpsgd_scatter_budget(
    splits, target: float, *, delta: float, seed: int, holdout: bool = False
) -> dict:
    """DP-SGD ScatterNet + linear at (target, delta) with Tramer & Boneh's recipe;
    ``splits``: :func:`dpsgd_linear.load_features`. See benchmarks/dpsgd_linear.py."""
    import dpsgd_linear

    return dpsgd_linear.run_pate_protocol(
        splits, target=target, delta=delta, seed=seed, holdout=holdout
    )


def scatter_ceiling(feats) -> dict:
    """ScatterNet + logistic regression (C = 0.01) on the 9000 public items with TRUE labels."""
    from sklearn.linear_model import LogisticRegression

    t0 = time.perf_counter()
    flat = lambda s: s.x.reshape(len(s.x), -1)  # noqa: E731
    clf = LogisticRegression(C=0.01, max_iter=300).fit(flat(feats.public), feats.public.y)
    return {
        "accuracy": float((clf.predict(flat(feats.evaluation)) == feats.evaluation.y).mean()),
        "labels": int(len(feats.public.y)),
        "C": 0.01,
        "seconds": round(time.perf_counter() - t0, 1),
    }
