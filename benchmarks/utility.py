"""Privacy-utility benchmark on Fashion-MNIST: the PATE student vs DP-SGD (Opacus), at the same
(eps, delta), evaluated on the same 1000 images.

Protocol (the pipeline's): private = the 60000 training images; public = the first 9000 test
images (unlabelled for PATE); evaluation = the last 1000 test images.

PATE. One run of the pipeline up to the vote matrix (partition, 500 teachers of 120 images each,
votes) is shared by all budgets; for each target eps the run is forked (:func:`pate.pipeline.fork_run`) and finished by
the pipeline itself -- noisy answers, FixMatch student, analysis with the sanitized release,
report -- exactly as ``pate run`` does. For each target:

* the release parameters (order lambda, beta = 0.4 / lambda, sigma_ss) are chosen from public
  quantities only (:func:`release_parameters`): the order that leaves the most room for queries,
  ``(target - fixed costs) / lambda``, where the fixed costs are the GNSS release and the
  RDP-to-(eps, delta) conversion;
* the aggregator (:func:`choose_aggregator`) is one of two Confident-GNMax settings: a quiet one
  (sigma1 = 100, sigma2 = 40: few, accurate answers) unless its plan answers fewer than 200
  queries, then a loud one (sigma1 = 250, sigma2 = 120: at small targets several times more
  answers, less accurate but from every class). **Looks at the votes** like the next point;
* the number of public items offered (:func:`plan_queries`) is the larger of two routes: the
  largest prefix k whose sanitized epsilon -- its centre plus one standard deviation of its
  smooth-sensitivity noise -- stays within the target, or no release at all and the online
  aggregator stopping itself at the target on the data-independent epsilon (better at small
  targets, where the release's fixed cost leaves too little room). **That choice looks at the
  teachers' votes** (as in Papernot et al. 2018, whose query counts were chosen the same way);
  it is not covered by the reported eps;
* the reported eps is the *sanitized* eps that the run's analysis releases (or, without a
  release, the data-independent one), with the tight RDP conversion -- the one Opacus' RDP
  accountant uses; the data-independent eps of the same answers is printed beside it.

DP-SGD. Opacus (``pip install 'pate-learn[bench]'``) trains the teachers' architecture on all 60000
private images with per-example clipping and Gaussian noise calibrated by Opacus' RDP accountant
to the same (eps, delta) (``make_private_with_epsilon``), Poisson sampling.

    .venv/bin/python benchmarks/utility.py                          # the full benchmark
    .venv/bin/python benchmarks/utility.py --targets 1 --skip-dpsgd # one PATE budget
    .venv/bin/python benchmarks/utility.py --base-run runs/fashion-mnist  # reuse a run's votes

Writes ``results.json``, ``results.md`` (the table) and ``utility.png`` (accuracy vs eps) into
``--out`` (default ``runs/utility``). Run on demand, never as a test; see the README for the
measured table and times.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import time

import numpy as np

TARGETS = (0.5, 1.0, 2.0, 4.0)
#: Confident GNMax for 500 teachers, little noise: few, accurate answers, paid for with the
#: data-dependent analysis and the sanitized release (T = 300: 60 % of the votes; a higher
#: threshold answers almost no item of the classes the teachers confuse, such as shirts).
AGGREGATOR = {"mechanism": "confident-gnmax", "threshold": 300.0, "sigma1": 100.0, "sigma2": 40.0}
#: Much more noise: each answer costs less data-independent RDP (lambda / sigma2^2), so a small
#: budget buys several times more answers -- less accurate, but from every class.
LOUD_AGGREGATOR = {"mechanism": "confident-gnmax", "threshold": 350.0, "sigma1": 250.0, "sigma2": 120.0}
#: The loud aggregator is used where the quiet one's plan answers fewer queries than this (the
#: student needs a few hundred labels; README, student section).
MIN_ANSWERS = 200
#: Teachers of the base run: 500 x 120 images (more, weaker teachers answer more queries per eps).
TEACHERS = 500
#: The release order's candidates (public).
RELEASE_ORDERS = tuple(float(x) for x in (3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 25, 30, 40, 50, 64))


def release_parameters(target: float, *, delta: float, conversion: str = "tight") -> dict:
    """(order, beta, sigma_ss) of the sanitized release for a target eps, from public numbers only.

    beta = 0.4 / order (Theorem 23 of [P18] needs order < 1/(2 beta)); sigma_ss makes the
    release's first cost term, order e^{2 beta} / sigma_ss^2, a tenth of the target. Among the
    candidate orders, the one with the most room left per unit of order,
    (target - gnss_rdp - conversion term) / order, wins: a query's RDP grows about linearly
    with the order, so that is the order that affords the most queries.
    """
    from pate import analysis

    best = None
    for order in RELEASE_ORDERS:
        beta = 0.4 / order
        sigma_ss = math.sqrt(order * math.exp(2 * beta) / (0.1 * target))
        fixed = (analysis.gnss_rdp(beta=beta, sigma_ss=sigma_ss, order=order)
                 + analysis.conversion_term(order=order, delta=delta, conversion=conversion))
        room = (target - fixed) / order
        if room > 0 and (best is None or room > best["room"]):
            best = {"order": order, "beta": beta, "sigma_ss": round(sigma_ss, 6), "room": room,
                    "fixed_eps": fixed}
    if best is None:
        raise ValueError(f"target eps {target} is too small for any release order in "
                         f"{RELEASE_ORDERS} at delta={delta}")
    return best


def noise_params(aggregator: dict) -> dict:
    """The Confident-GNMax keyword arguments of an aggregator setting."""
    return {k: aggregator[k] for k in ("threshold", "sigma1", "sigma2")}


def planning_draw(votes, *, seed: int, aggregator: dict):
    """The planning draw of the aggregator's noise over all the votes (its
    ``confident_gnmax`` result): what :func:`plan_queries` counts answers on."""
    from pate.aggregators import confident_gnmax

    return confident_gnmax(votes, rng=np.random.default_rng(seed), **noise_params(aggregator))


class _OneStd:
    """A generator-like whose every normal draw is +1: the release it is given reports its
    centre plus one noise standard deviation."""

    @staticmethod
    def normal(*args):
        return 1.0


def _largest_prefix(fits, n: int) -> int:
    """The largest k in [0, n] with fits(k), for a predicate that holds up to some k (bisection)."""
    if fits(n):
        return n
    lo, hi = 0, n  # fits(lo) (k = 0 always fits), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def plan_queries(votes, *, target: float, release: dict, delta: float, conversion: str,
                 seed: int, aggregator: dict = AGGREGATOR) -> dict:
    """How many public items to offer for a target eps, and whether to release a sanitized eps.

    Two routes, on one planning draw of the aggregator's noise (``seed``):

    * ``release``: the largest prefix k whose sanitized eps -- the release's centre plus one
      noise standard deviation -- is at most ``target``. **Looks at the votes** (see the module
      docstring).
    * ``data-independent``: no release; the pipeline's online aggregator itself stops when the
      data-independent eps would pass ``target`` (a rigorous stop; the prefix here only counts
      the answers it would get).

    The route with more answered queries in the planning draw wins.
    """
    from pate import analysis

    params = noise_params(aggregator)
    answered = planning_draw(votes, seed=seed, aggregator=aggregator).answered_mask

    def release_fits(k: int) -> bool:
        if k == 0:
            return True
        out = analysis.release_sanitized_epsilon(
            votes[:k], answered=answered[:k], order=release["order"], beta=release["beta"],
            sigma_ss=release["sigma_ss"], delta=delta, num_teachers=int(votes[0].sum()),
            rng=_OneStd(), conversion=conversion, **params)
        return out["eps_sanitized"] <= target

    orders = analysis.DEFAULT_ORDERS

    def independent_fits(k: int) -> bool:
        rdp = analysis.confident_gnmax_rdp(votes[:k], answered=answered[:k], orders=orders,
                                           data_dependent=False, **params)
        return analysis.eps_from_rdp(rdp, orders=orders, delta=delta, conversion=conversion)[0] <= target

    k_release = _largest_prefix(release_fits, votes.shape[0])
    k_independent = _largest_prefix(independent_fits, votes.shape[0])
    if int(answered[:k_independent].sum()) >= int(answered[:k_release].sum()):
        return {"route": "data-independent", "queries": int(votes.shape[0]),
                "planned_answered": int(answered[:k_independent].sum())}
    return {"route": "release", "queries": max(k_release, 1),
            "planned_answered": int(answered[:k_release].sum())}


def scaled_threshold(aggregator: dict, *, num_teachers: int) -> dict:
    """A candidate aggregator for ``num_teachers``: its threshold is set for ``TEACHERS`` teachers
    and scales with their number (the same fraction of the votes); the noise does not."""
    return dict(aggregator, threshold=aggregator["threshold"] * num_teachers / TEACHERS)


def choose_aggregator(votes, *, target: float, release: dict, delta: float, conversion: str,
                      seed: int, candidates=(AGGREGATOR, LOUD_AGGREGATOR),
                      min_answers: int = MIN_ANSWERS) -> tuple[dict, dict]:
    """The aggregator for a target eps and its plan: the first candidate whose plan answers at
    least ``min_answers`` queries, else the one whose plan answers the most. Thresholds are
    scaled to the number of teachers (:func:`scaled_threshold`).

    **Looks at the votes** (through :func:`plan_queries`; see the module docstring). Returns
    ``(aggregator, plan)``.
    """
    best = None
    for candidate in candidates:  # planned one at a time: later candidates only when needed
        aggregator = scaled_threshold(candidate, num_teachers=int(votes[0].sum()))
        plan = plan_queries(votes, target=target, release=release, delta=delta,
                            conversion=conversion, seed=seed, aggregator=aggregator)
        if plan["planned_answered"] >= min_answers:
            return aggregator, plan
        if best is None or plan["planned_answered"] > best[1]["planned_answered"]:
            best = (aggregator, plan)
    return best


def pate_budget(base_dir: pathlib.Path, base_config: dict, target: float, *, delta: float,
                conversion: str, out: pathlib.Path, aggregator: dict | None = None) -> dict:
    """Fork the base run, choose the aggregator (:func:`choose_aggregator`, unless ``aggregator``
    fixes it), the release and the number of queries; finish the pipeline."""
    from pate import analysis
    from pate import config as C
    from pate.aggregators import OnlineAggregator
    from pate.pipeline import Pipeline, fork_run

    votes = np.load(base_dir / "votes.npy", allow_pickle=False)
    release = release_parameters(target, delta=delta, conversion=conversion)
    t0 = time.perf_counter()
    planning = dict(target=target, release=release, delta=delta, conversion=conversion,
                    seed=base_config["run"]["seed"] + 1)
    if aggregator is None:
        aggregator, plan = choose_aggregator(votes, **planning)
    else:
        plan = plan_queries(votes, aggregator=aggregator, **planning)
    config = json.loads(json.dumps(base_config))
    config["aggregator"].update(aggregator, queries=plan["queries"], budget_basis="data-independent")
    config["privacy"].update(delta=delta, conversion=conversion, ledger=False,
                             release=plan["route"] == "release", release_order=release["order"],
                             release_beta=release["beta"], release_sigma_ss=release["sigma_ss"])
    orders = C.orders(config)
    if plan["route"] == "release":
        # A data-independent budget that lets all k queries be asked (and answered) and keeps the
        # release (the pipeline skips a release costing over half the budget): the constraint
        # here is the sanitized eps, not this one (both are reported).
        worst = OnlineAggregator(
            "confident-gnmax", budget_eps=1.0, delta=delta, rng=np.random.default_rng(0),
            orders=orders, conversion=conversion,
            **noise_params(aggregator)).worst_case_query_rdp()
        gnss = analysis.gnss_rdp_curve(beta=release["beta"], sigma_ss=release["sigma_ss"], orders=orders)
        di_eps = analysis.eps_from_rdp(plan["queries"] * worst + gnss, orders=orders, delta=delta,
                                       conversion=conversion)[0]
        release_eps = analysis.eps_from_rdp(gnss, orders=orders, delta=delta, conversion=conversion)[0]
        config["privacy"]["budget_eps"] = max(float(di_eps) * (1 + 1e-6), 2.5 * target,
                                              2.0 * float(release_eps) * (1 + 1e-6))
    else:
        config["privacy"]["budget_eps"] = target  # the online aggregator stops at the target
    config["run"]["run_dir"] = str(out / f"pate-eps{target:g}")
    config = C.from_dict(config)
    fork_run(base_dir, config)
    report = Pipeline(config, resume=True, progress=False).run()
    p, q, u = report["privacy"], report["queries"], report["utility"]
    return {"method": "PATE", "target_eps": target, "eps": p["eps_sanitized"],
            "eps_data_independent": p["eps_data_independent"], "delta": p["delta"],
            "accuracy": u["student_accuracy"], "route": plan["route"],
            "queries_offered": plan["queries"],
            "asked": q["asked"], "answered": q["answered"],
            "label_accuracy": u["label_accuracy_answered"], "aggregator": aggregator,
            "release": ({k: release[k] for k in ("order", "beta", "sigma_ss")}
                        if plan["route"] == "release" else None),
            "seconds": round(time.perf_counter() - t0, 1)}


def dpsgd_budget(data, target: float, *, delta: float, epochs: int, batch_size: int, lr: float,
                 clip: float, model_name: str, seed: int, device: str, mode: str = "ghost") -> dict:
    """DP-SGD with Opacus at (target, delta) on the whole private split."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    try:
        from opacus import PrivacyEngine
    except ImportError:
        raise SystemExit("DP-SGD needs Opacus: pip install 'pate-learn[bench]' (or --skip-dpsgd)")
    from pate.teachers.models import build_model

    t0 = time.perf_counter()
    torch.manual_seed(seed)
    model = build_model(model_name, input_shape=data.input_shape,
                        num_classes=data.num_classes).to(device)
    x = torch.from_numpy(data.private.x)
    y = torch.from_numpy(data.private.y).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    engine = PrivacyEngine(accountant="rdp")
    # Ghost clipping (default): per-example gradient norms without materialising per-example
    # gradients -- the same clipped-and-noised update as Opacus' "hooks", several times faster here.
    common = dict(module=model, optimizer=optimizer, data_loader=loader, target_epsilon=target,
                  target_delta=delta, epochs=epochs, max_grad_norm=clip,
                  noise_generator=torch.Generator(device=device).manual_seed(seed + 1))
    if mode == "ghost":
        model, optimizer, criterion, loader = engine.make_private_with_epsilon(
            **common, criterion=torch.nn.CrossEntropyLoss(), grad_sample_mode="ghost")
    else:
        model, optimizer, loader = engine.make_private_with_epsilon(**common, grad_sample_mode="hooks")
        criterion = torch.nn.CrossEntropyLoss()
    model.train()
    for _ in range(epochs):
        for xb, yb in loader:
            if len(xb) == 0:  # Poisson sampling can draw an empty batch
                continue
            optimizer.zero_grad(set_to_none=True)
            criterion(model(xb.to(device)), yb.to(device)).backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        xe = torch.from_numpy(data.evaluation.x).to(device)
        pred = torch.cat([model(xe[i:i + 500]).argmax(1) for i in range(0, len(xe), 500)]).cpu()
    accuracy = float((pred.numpy() == data.evaluation.y).mean())
    return {"method": "DP-SGD", "target_eps": target, "eps": float(engine.get_epsilon(delta)),
            "delta": delta, "accuracy": accuracy, "noise_multiplier": float(optimizer.noise_multiplier),
            "epochs": epochs, "batch_size": batch_size, "lr": lr, "clip": clip, "mode": mode,
            "seconds": round(time.perf_counter() - t0, 1)}


def write_outputs(rows: list[dict], out: pathlib.Path, meta: dict, *, quiet: bool = False) -> None:
    """results.json, results.md (the table) and utility.png (accuracy vs eps) in ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    targets = sorted({r["target_eps"] for r in rows})
    by = {(r["method"], r["target_eps"]): r for r in rows}
    lines = ["| target eps | PATE sanitized eps (data-indep.) | PATE answered / asked | "
             "PATE label acc. | PATE student acc. | DP-SGD eps | DP-SGD acc. | PATE - DP-SGD |",
             "|---|---|---|---|---|---|---|---|"]
    for t in targets:
        p, d = by.get(("PATE", t)), by.get(("DP-SGD", t))
        cells = [f"{t:g}"]
        cells += ([f"{p['eps']:.3f} ({p['eps_data_independent']:.2f})",
                   f"{p['answered']} / {p['asked']}", f"{100 * p['label_accuracy']:.1f} %",
                   f"{100 * p['accuracy']:.1f} %"] if p else ["-"] * 4)
        cells += [f"{d['eps']:.3f}", f"{100 * d['accuracy']:.1f} %"] if d else ["-"] * 2
        cells.append(f"{100 * (p['accuracy'] - d['accuracy']):+.1f} points" if p and d else "-")
        lines.append("| " + " | ".join(cells) + " |")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    if not quiet:
        print("\n".join(lines))

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for method, marker in (("PATE", "o"), ("DP-SGD", "s")):
        pts = sorted((r["eps"], r["accuracy"]) for r in rows if r["method"] == method)
        if pts:
            ax.plot(*zip(*[(e, 100 * a) for e, a in pts]), marker=marker,
                    label=method + (" (student, sanitized eps)" if method == "PATE" else " (Opacus)"))
    ax.set_xscale("log", base=2)
    ax.set_xlabel(f"epsilon (delta = {meta['delta']:g})")
    ax.set_ylabel("accuracy on the 1000 evaluation images (%)")
    ax.set_title("Fashion-MNIST: accuracy vs privacy")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "utility.png", dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="configs/fashion_mnist.toml",
                   help="the PATE recipe (teachers, student, seed); the aggregator and the privacy "
                        "settings are the benchmark's")
    p.add_argument("--base-run", help="a run directory whose partition/teachers/votes are reused "
                                      "(default: trained into <out>/base with --config)")
    p.add_argument("--out", default="runs/utility")
    p.add_argument("--targets", type=float, nargs="+", default=list(TARGETS))
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--teacher-epochs", type=int, default=40,
                   help="teacher epochs of the base run (default 40)")
    p.add_argument("--teachers", type=int, default=TEACHERS,
                   help="number of teachers of the base run (default %(default)s)")
    p.add_argument("--threshold", type=float,
                   help="fix Confident GNMax's threshold T for every budget (with --sigma1/--sigma2; "
                        "default: per budget, the quiet aggregator T=%g, sigma1=%g, sigma2=%g unless its "
                        "plan answers fewer than %d queries, then the loud one T=%g, sigma1=%g, "
                        "sigma2=%g)" % (AGGREGATOR["threshold"], AGGREGATOR["sigma1"], AGGREGATOR["sigma2"],
                                        MIN_ANSWERS, LOUD_AGGREGATOR["threshold"],
                                        LOUD_AGGREGATOR["sigma1"], LOUD_AGGREGATOR["sigma2"]))
    p.add_argument("--sigma1", type=float, help="with --threshold: the threshold check's noise")
    p.add_argument("--sigma2", type=float, help="with --threshold: the answers' noise")
    p.add_argument("--skip-pate", action="store_true")
    p.add_argument("--skip-dpsgd", action="store_true")
    p.add_argument("--dpsgd-epochs", type=int, default=15)
    p.add_argument("--dpsgd-batch-size", type=int, default=1024)
    p.add_argument("--dpsgd-lr", type=float, default=2.0)
    p.add_argument("--dpsgd-clip", type=float, default=0.1)
    p.add_argument("--dpsgd-mode", choices=("ghost", "hooks"), default="ghost",
                   help="Opacus' per-example clipping: ghost clipping (default) or per-example "
                        "gradients (hooks); the same update, hooks is slower")
    p.add_argument("--device", default="auto")
    p.add_argument("--data-root", help="Fashion-MNIST directory (default: Debian's location)")
    args = p.parse_args(argv)
    for t in args.targets:
        if not (math.isfinite(t) and t > 0):
            p.error(f"--targets must be positive finite numbers, got {t}")
    if not 0 < args.delta < 1:
        p.error(f"--delta must be in (0, 1), got {args.delta}")
    fixed = {"threshold": args.threshold, "sigma1": args.sigma1, "sigma2": args.sigma2}
    if any(v is not None for v in fixed.values()):
        missing = [f"--{k}" for k, v in fixed.items() if v is None]
        if missing:
            p.error(f"--threshold, --sigma1 and --sigma2 fix the aggregator together; missing "
                    f"{', '.join(missing)}")
        for k, v in fixed.items():
            if not (math.isfinite(v) and v > 0):
                p.error(f"--{k} must be a positive finite number, got {v}")

    from pate import config as C
    from pate.pipeline import Pipeline
    from pate.teachers.data import load_pate_data
    from pate.teachers.ensemble import resolve_device

    device = resolve_device(args.device)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    recipe = C.load(args.config, device=device, run_dir=str(out / "base"))
    if args.base_run:  # its partition, teachers and votes; the student recipe from --config
        base_config = json.loads((pathlib.Path(args.base_run) / "config.json").read_text())
        base_config["student"] = recipe["student"]
        base_config["run"]["device"] = device
    else:
        base_config = recipe
        base_config["teachers"]["epochs"] = args.teacher_epochs
        base_config["partition"]["num_teachers"] = args.teachers
    if args.data_root:
        base_config["data"]["root"] = args.data_root
    base_config["privacy"]["ledger"] = False
    base_config = C.from_dict(base_config)
    aggregator = (None if args.threshold is None
                  else dict(AGGREGATOR, threshold=args.threshold, sigma1=args.sigma1, sigma2=args.sigma2))
    meta = {"delta": args.delta, "device": device, "config": args.config,
            "aggregator": aggregator or {"candidates": [AGGREGATOR, LOUD_AGGREGATOR],
                                         "min_answers": MIN_ANSWERS}, "teachers": base_config["teachers"],
            "student": base_config["student"], "argv": sys.argv[1:]}
    rows: list[dict] = []
    t_start = time.perf_counter()
    if not args.skip_pate:
        base_dir = pathlib.Path(args.base_run) if args.base_run else C.run_directory(base_config)
        t0 = time.perf_counter()
        if not args.base_run:
            Pipeline(base_config, resume=True, progress=True).run(until="votes")
        meta["base_seconds"] = round(time.perf_counter() - t0, 1)
        teachers = json.loads((base_dir / "stages" / "teachers.json").read_text())
        meta["teachers_result"] = teachers
        print(f"base run (partition, teachers, votes): {meta['base_seconds']:.0f} s", flush=True)
        for target in args.targets:
            row = pate_budget(base_dir, base_config, target, delta=args.delta,
                              conversion="tight", out=out, aggregator=aggregator)
            rows.append(row)
            write_outputs(rows, out, meta, quiet=True)  # partial results survive an interruption
            print(f"PATE target {target:g}: sanitized eps {row['eps']:.3f} (data-independent "
                  f"{row['eps_data_independent']:.2f}; route {row['route']}; T {row['aggregator']['threshold']:g}, "
                  f"sigma {row['aggregator']['sigma1']:g}/{row['aggregator']['sigma2']:g}), {row['answered']} answered "
                  f"of {row['asked']} asked (label accuracy {row['label_accuracy']:.3f}), "
                  f"student accuracy {row['accuracy']:.4f}, {row['seconds']:.0f} s", flush=True)
    if not args.skip_dpsgd:
        data = load_pate_data("fashion-mnist", root=args.data_root)
        for target in args.targets:
            row = dpsgd_budget(data, target, delta=args.delta, epochs=args.dpsgd_epochs,
                               batch_size=args.dpsgd_batch_size, lr=args.dpsgd_lr,
                               clip=args.dpsgd_clip, model_name=base_config["teachers"]["model"],
                               seed=base_config["run"]["seed"], device=device,
                               mode=args.dpsgd_mode)
            rows.append(row)
            write_outputs(rows, out, meta, quiet=True)
            print(f"DP-SGD target {target:g}: eps {row['eps']:.3f}, noise multiplier "
                  f"{row['noise_multiplier']:.3f}, accuracy {row['accuracy']:.4f}, "
                  f"{row['seconds']:.0f} s", flush=True)
    meta["total_seconds"] = round(time.perf_counter() - t_start, 1)
    write_outputs(rows, out, meta)
    print(f"wrote {out / 'results.json'}, {out / 'results.md'}, {out / 'utility.png'} "
          f"({meta['total_seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
