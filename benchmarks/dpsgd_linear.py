"""DP-SGD on ScatterNet features + a linear model (Tramer & Boneh 2021), with closed-form
per-example gradients, and its reproduction under the published protocol (issue #34).

Tramer & Boneh ("Differentially Private Learning Needs Better Features (or Much More Data)",
ICLR 2021, Table 1) publish 89.7 % test accuracy for ScatterNet + linear on Fashion-MNIST at
(eps = 3, delta = 1e-5): 60000 training images, the 10000 test images. Their recipe (their
repository's README and ``baselines.py``): ScatterNet J = 2, L = 8 on the [0, 1] images (81 x 7 x
7 coefficients), **group normalisation** of each image's coefficients (27 groups of 3 channels,
no affine part: a per-image transform, free of privacy cost), a linear layer (PyTorch's default
initialisation), SGD with momentum 0.9, learning rate 16, logical batch 8192, clipping norm 0.1,
noise multiplier 4.05, 40 epochs of ``60000 // 8192 = 7`` steps (280 steps). Their accountant
(Opacus 0.x's RDP, the classic conversion eps = rdp + log(1/delta) / (order - 1), orders
1.1-10.9 and 12-63) gives eps = 3.00 for these 280 steps at sampling rate 8192 / 60000.

Here the same recipe runs on this repository's ScatterNet front-end (:mod:`pate.teachers.features`,
the same kymatio filters) with **Poisson sampling** (each step takes every record with
probability q = 8192 / 60000, the sampling the accountant assumes; T&B's code shuffled fixed-size
batches). A linear model's per-example gradient is the outer product of the softmax residual and
the input, so every per-example norm is ``|p_i - e_y| * sqrt(|x_i|^2 + 1)`` (bias included) and
the sum of clipped gradients is one matrix product: no Opacus needed. Noise N(0, (clip * z)^2)
is added to the sum, which is divided by the expected batch size (as Opacus does).

Protocols (``--protocol``):

* ``tramer-boneh``: train on the 60000 training images, score on the 10000 test images, noise
  multiplier 4.05 (eps 3.00 under T&B's accounting; this repository's tight conversion,
  Balle et al. 2020, gives 2.59 for the same run). ``--calibrate`` instead calibrates the noise to
  eps = 3 under the tight conversion (less noise, same guarantee).
* ``pate``: the pipeline's protocol: private = the 60000 training images, evaluation = the last
  1000 test images; per target eps in ``--targets`` the noise multiplier whose 280 steps cost
  exactly the target (tight conversion, :data:`pate.analysis.DEFAULT_ORDERS`). With
  ``--holdout``, the last 10000 private images are held out (private = the first 50000, the
  steps and the sampling rate follow from 50000) and the model is scored on both the 1000
  evaluation images and the 10000 held-out ones.

Each run is a row of ``--out`` (a JSON file of ``{"runs": [...], "meta": {...}}``), rewritten
after every run so that a stop loses nothing; rows already there for the same protocol, target,
holdout and seed are replaced.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/dpsgd_linear.py --protocol tramer-boneh --seeds 0 1 2
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/dpsgd_linear.py --protocol pate --targets 0.5 1 2 4 --seeds 0 1 2

The ScatterNet features are computed once into the feature cache (``$PATE_FEATURE_CACHE`` or
``--feature-cache``; 1.1 GB for the 70000 images) and memory-mapped by later runs.
"""

import argparse
import dataclasses
import datetime
import json
import logging
import math
import os
import pathlib
import platform
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # this checkout's pate, also where another one is installed
    sys.path.insert(0, str(ROOT))
if str(ROOT / "benchmarks") not in sys.path:  # the sibling module below
    sys.path.insert(0, str(ROOT / "benchmarks"))

import utility_common  # noqa: E402

logger = logging.getLogger("benchmarks.dpsgd_linear")

#: T&B's orders (their dp_utils.ORDERS), for their accounting of their protocol.
TB_ORDERS = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)))
TB_PUBLISHED_ACCURACY = 0.897
TB_EPS, TB_DELTA = 3.0, 1e-5
TB_NOISE_MULTIPLIER = 4.05
PROTOCOLS = ("tramer-boneh", "pate")
HOLDOUT = 10000


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A DP-SGD recipe for a linear model on group-normalised ScatterNet features."""

    batch_size: int = 8192
    epochs: int = 40
    lr: float = 16.0
    momentum: float = 0.9
    clip: float = 0.1
    groups: int = 27

    def steps(self, n: int) -> int:
        """T&B's step count: ``n // batch_size`` steps per epoch."""
        return (n // self.batch_size) * self.epochs

    def sampling_rate(self, n: int) -> float:
        return self.batch_size / n


#: Tramer & Boneh's Fashion-MNIST ScatterNet + linear recipe (their README's command line).
TRAMER_BONEH_FMNIST = Recipe()


def group_normalise(features: np.ndarray, *, groups: int, chunk: int = 4096) -> np.ndarray:
    """Per-image group normalisation (``torch.nn.GroupNorm(groups, C, affine=False)``, eps 1e-5)
    of (N, C, H, W) features, flattened to float32 (N, C * H * W). Looks at each image alone."""
    features = np.asarray(features) if not isinstance(features, np.memmap) else features
    n, c = features.shape[:2]
    if groups < 1 or c % groups:
        raise ValueError(f"groups must divide the {c} channels, got groups={groups}")
    out = np.empty((n, int(np.prod(features.shape[1:]))), dtype=np.float32)
    for i in range(0, n, chunk):
        block = np.asarray(features[i : i + chunk], dtype=np.float32).reshape(
            -1, groups, out.shape[1] // groups
        )
        mean = block.mean(axis=2, keepdims=True)
        var = block.var(axis=2, keepdims=True)
        out[i : i + chunk] = ((block - mean) / np.sqrt(var + 1e-5)).reshape(len(block), -1)
    return out


def dpsgd_eps(
    *,
    noise_multiplier: float,
    sampling_rate: float,
    steps: int,
    delta: float,
    orders,
    conversion: str,
) -> float:
    """(eps at ``delta``) of ``steps`` Poisson-subsampled Gaussian steps (RDP, [MTZ19])."""
    from pate.analysis import eps_from_rdp
    from pate.analysis.private_knn import sampled_gaussian_rdp

    orders = np.asarray(orders, dtype=np.float64)
    rdp = steps * sampled_gaussian_rdp(
        sampling_rate=sampling_rate, noise_multiplier=noise_multiplier, orders=orders
    )
    return float(eps_from_rdp(rdp, orders=orders, delta=delta, conversion=conversion)[0])


def calibrate_noise(
    *, eps: float, sampling_rate: float, steps: int, delta: float, orders, conversion: str
) -> float:
    """The smallest noise multiplier (to 1e-4 relative, rounded up) whose ``steps`` cost at
    most ``eps``: bisection on the accountant, which is decreasing in the noise."""

    def cost(z):
        return dpsgd_eps(
            noise_multiplier=z,
            sampling_rate=sampling_rate,
            steps=steps,
            delta=delta,
            orders=orders,
            conversion=conversion,
        )

    lo, hi = 0.3, 1.0
    while cost(hi) > eps:
        lo, hi = hi, 2 * hi
        if hi > 1e4:
            raise ValueError(f"no noise multiplier up to 1e4 reaches eps = {eps}")
    while hi / lo - 1 > 1e-4:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if cost(mid) <= eps else (mid, hi)
    return hi  # cost(hi) <= eps throughout the bisection


def clipped_gradient_sum(w, b, xb, yb, *, clip: float, sq=None):
    """The sum over the rows of ``xb`` of each example's cross-entropy gradient of the linear
    model (w, b), clipped to norm ``clip`` (Opacus' factor min(1, clip / (norm + 1e-6))).
    Closed form: example i's gradient is r_i x_i^T for W and r_i for b, r_i = softmax - e_y, so
    its norm is |r_i| sqrt(|x_i|^2 + 1). ``sq``: the rows' |x_i|^2 + 1 if known."""
    import torch

    r = torch.softmax(xb @ w.T + b, dim=1)
    r[torch.arange(len(xb)), yb] -= 1.0  # dloss/dlogits of each example
    if sq is None:
        sq = (xb * xb).sum(1) + 1.0
    r *= (clip / (r.norm(dim=1) * sq.sqrt() + 1e-6)).clamp(max=1.0)[:, None]
    return r.T @ xb, r.sum(0)


def train_linear(
    x: np.ndarray,
    y: np.ndarray,
    *,
    recipe: Recipe,
    noise_multiplier: float,
    seed: int,
    num_classes: int,
):
    """DP-SGD (Poisson sampling, per-example clipping, Gaussian noise, momentum SGD) of a linear
    model on rows ``x`` (N, D) float32; returns (W (K, D), b (K,)) as torch tensors."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    layer = torch.nn.Linear(x.shape[1], num_classes)  # PyTorch's default initialisation, as T&B
    w, b = layer.weight.detach().clone(), layer.bias.detach().clone()
    vw, vb = torch.zeros_like(w), torch.zeros_like(b)
    xt, yt = torch.from_numpy(x), torch.from_numpy(np.asarray(y, dtype=np.int64))
    sq = (xt * xt).sum(1) + 1.0  # |x_i|^2 + 1: the bias's part of the gradient norm
    n, q, scale = len(x), recipe.sampling_rate(len(x)), recipe.clip * noise_multiplier
    for _ in range(recipe.steps(n)):
        idx = (torch.rand(n, generator=gen) < q).nonzero().squeeze(1)
        sw, sb = clipped_gradient_sum(w, b, xt[idx], yt[idx], clip=recipe.clip, sq=sq[idx])
        gw = (sw + scale * torch.randn(w.shape, generator=gen)) / recipe.batch_size
        gb = (sb + scale * torch.randn(b.shape, generator=gen)) / recipe.batch_size
        vw.mul_(recipe.momentum).add_(gw)  # torch.optim.SGD's momentum (no dampening)
        vb.mul_(recipe.momentum).add_(gb)
        w -= recipe.lr * vw
        b -= recipe.lr * vb
    return w, b


def accuracy(w, b, x: np.ndarray, y: np.ndarray) -> float:
    import torch

    with torch.no_grad():
        pred = (torch.from_numpy(x) @ w.T + b).argmax(1).numpy()
    return float((pred == np.asarray(y)).mean())


# ------------------------------------------------------------------------------ protocols


def load_features(*, data_root=None, cache_root=None):
    """Group-normalised flattened ScatterNet features and labels of the pipeline's three
    Fashion-MNIST splits: {"private": (x, y), "public": ..., "evaluation": ...}."""
    from pate.teachers import feature_cache
    from pate.teachers.data import load_pate_data
    from pate.teachers.features import scatter_features

    data = load_pate_data("fashion-mnist", root=data_root)
    root = cache_root or os.environ.get(feature_cache.ENV)
    cache = feature_cache.FeatureCache(root) if root else None
    out = {}
    for name in ("private", "public", "evaluation"):
        split = getattr(data, name)
        feats = scatter_features(split.x, cache=cache).array
        out[name] = (group_normalise(feats, groups=TRAMER_BONEH_FMNIST.groups), split.y)
    return out


def run_tramer_boneh(
    splits, *, seed: int, recipe: Recipe = TRAMER_BONEH_FMNIST, calibrate: bool = False
) -> dict:
    """One run under T&B's protocol: 60000 training images, the 10000 test images (the public
    and evaluation splits, in order), eps 3 at delta 1e-5."""
    from pate.analysis import DEFAULT_ORDERS

    x, y = splits["private"]
    xt = np.concatenate([splits["public"][0], splits["evaluation"][0]])
    yt = np.concatenate([splits["public"][1], splits["evaluation"][1]])
    n, steps, q = len(x), recipe.steps(len(x)), recipe.sampling_rate(len(x))
    z = (
        calibrate_noise(
            eps=TB_EPS,
            sampling_rate=q,
            steps=steps,
            delta=TB_DELTA,
            orders=DEFAULT_ORDERS,
            conversion="tight",
        )
        if calibrate
        else TB_NOISE_MULTIPLIER
    )
    t0 = time.perf_counter()
    w, b = train_linear(x, y, recipe=recipe, noise_multiplier=z, seed=seed, num_classes=10)
    common = dict(noise_multiplier=z, sampling_rate=q, steps=steps, delta=TB_DELTA)
    return {
        "protocol": "tramer-boneh" + (" (noise calibrated, tight conversion)" if calibrate else ""),
        "method": "DP-SGD ScatterNet+linear",
        "kind": "guarantee",
        "target_eps": TB_EPS,
        "eps": dpsgd_eps(orders=DEFAULT_ORDERS, conversion="tight", **common),
        "eps_tramer_boneh_accounting": dpsgd_eps(orders=TB_ORDERS, conversion="classic", **common),
        "delta": TB_DELTA,
        "accuracy": accuracy(w, b, xt, yt),
        "evaluation": "test-10000",
        "train_size": n,
        "noise_multiplier": z,
        "steps": steps,
        "sampling_rate": q,
        "recipe": dataclasses.asdict(recipe),
        "seed": seed,
        "holdout": False,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def run_pate_protocol(
    splits,
    *,
    target: float,
    delta: float,
    seed: int,
    holdout: bool,
    recipe: Recipe = TRAMER_BONEH_FMNIST,
) -> dict:
    """One run in the pipeline's protocol at ``target`` eps (tight conversion): trained on the
    private split (its first 50000 with ``holdout``), scored on the 1000 evaluation images (and
    on the 10000 held-out private images)."""
    from pate.analysis import DEFAULT_ORDERS

    x, y = splits["private"]
    xh = yh = None
    if holdout:
        x, y, xh, yh = x[:-HOLDOUT], y[:-HOLDOUT], x[-HOLDOUT:], y[-HOLDOUT:]
    n, steps, q = len(x), recipe.steps(len(x)), recipe.sampling_rate(len(x))
    z = calibrate_noise(
        eps=target,
        sampling_rate=q,
        steps=steps,
        delta=delta,
        orders=DEFAULT_ORDERS,
        conversion="tight",
    )
    t0 = time.perf_counter()
    w, b = train_linear(x, y, recipe=recipe, noise_multiplier=z, seed=seed, num_classes=10)
    row = {
        "protocol": "pate",
        "method": "DP-SGD ScatterNet+linear",
        "kind": "guarantee",
        "target_eps": target,
        "eps": dpsgd_eps(
            noise_multiplier=z,
            sampling_rate=q,
            steps=steps,
            delta=delta,
            orders=DEFAULT_ORDERS,
            conversion="tight",
        ),
        "delta": delta,
        "accuracy": accuracy(w, b, *splits["evaluation"]),
        "evaluation": "evaluation-1000",
        "train_size": n,
        "noise_multiplier": z,
        "steps": steps,
        "sampling_rate": q,
        "recipe": dataclasses.asdict(recipe),
        "seed": seed,
        "holdout": holdout,
    }
    if holdout:
        row["accuracy_holdout"] = accuracy(w, b, xh, yh)
    row["seconds"] = round(time.perf_counter() - t0, 1)
    return row


def _key(row: dict) -> tuple:
    return (row["protocol"], row["target_eps"], row["holdout"], row["seed"])


def save(rows: list[dict], path: pathlib.Path, meta: dict) -> None:
    """Write ``rows`` into ``path``, replacing earlier rows of the same protocol, target, holdout
    and seed (atomically: a temporary file renamed over the old one)."""
    old = json.loads(path.read_text())["runs"] if path.exists() else []
    keys = {_key(r) for r in rows}
    runs = [r for r in old if _key(r) not in keys] + rows
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"runs": runs, "meta": meta}, indent=1) + "\n")
    tmp.replace(path)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--protocol", choices=PROTOCOLS, required=True)
    p.add_argument(
        "--targets",
        type=float,
        nargs="+",
        default=[0.5, 1.0, 2.0, 4.0],
        help="target eps of the pate protocol (default 0.5 1 2 4)",
    )
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument(
        "--holdout",
        action="store_true",
        help="pate protocol: train on the first 50000 private images, score also on the last 10000",
    )
    p.add_argument(
        "--calibrate",
        action="store_true",
        help="tramer-boneh protocol: noise for eps 3 under the tight conversion "
        "instead of T&B's 4.05",
    )
    p.add_argument("--out", default="benchmarks/results/utility_fmnist_dpsgd.json")
    p.add_argument("--feature-cache", help="feature cache folder (default $PATE_FEATURE_CACHE)")
    p.add_argument("--data-root", help="Fashion-MNIST directory (default: Debian's location)")
    p.add_argument("--threads", type=int, default=1)
    return p


def main(argv=None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    utility_common.check_budget_args(
        p,
        targets=args.targets,
        delta=args.delta,
        threads=args.threads,
        seeds={"--seeds": args.seeds},
    )
    if args.protocol == "tramer-boneh" and args.holdout:
        p.error("--holdout applies to --protocol pate only (T&B train on all 60000 images)")

    import torch

    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out = pathlib.Path(args.out)
    meta = {
        "command": "benchmarks/dpsgd_linear.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "commit": utility_common.commit(),
        "device": "cpu",
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "node": platform.node(),
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
        },
        "load_average_at_start": [round(v, 2) for v in os.getloadavg()],
    }
    t0 = time.perf_counter()
    splits = load_features(data_root=args.data_root, cache_root=args.feature_cache)
    logger.info("features: %.0f s", time.perf_counter() - t0)
    rows = []
    for seed in args.seeds:
        if args.protocol == "tramer-boneh":
            todo = [lambda seed=seed: run_tramer_boneh(splits, seed=seed, calibrate=args.calibrate)]
        else:
            todo = [
                lambda seed=seed, t=t: run_pate_protocol(
                    splits, target=t, delta=args.delta, seed=seed, holdout=args.holdout
                )
                for t in args.targets
            ]
        for job in todo:
            row = dict(job(), command=meta["command"], commit=meta["commit"], device="cpu")
            rows.append(row)
            save(rows, out, meta)  # each run kept as it ends
            logger.info(
                "%s eps %.3f seed %d: accuracy %.4f%s (%.0f s)",
                row["protocol"],
                row["eps"],
                seed,
                row["accuracy"],
                f", held out {row['accuracy_holdout']:.4f}" if "accuracy_holdout" in row else "",
                row["seconds"],
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
