"""`pate train-student`: train the student on the public split and the released labels.

Reads ``<run_dir>/labels.npy`` (int64, -1 = unanswered, written by ``pate aggregate``; if it
covers only the first ``q`` public items -- the papers' first-k protocol -- the other public
items are used unlabelled) and the *public* and *evaluation* splits of the dataset named by
``--dataset`` (or the config). The private split is never handed to the student. Writes, into
the run directory and atomically: ``student.pt`` (the weights: a run output, never commit it),
``student_metrics.json`` (accuracy, per-class accuracy and confusion matrix on the evaluation
split, the training settings and history) and, after every epoch, ``student_checkpoint.pt``
(``--resume`` continues from it).

Configuration: ``--config FILE.toml`` (the layout of ``pate train-teachers`` / ``pate run``)
may set ``dataset``, ``data_root``, ``public_size``, ``eval_size``, ``seed`` and ``device`` at
the top level (or ``name``, ``root``, ``download``, ``public_size``, ``eval_size`` in a
``[data]`` table, ``seed``/``device`` in ``[run]``) and any student setting in a
``[student]`` table (``method``, ``model``, ``epochs``, ``steps_per_epoch``, ``batch_size``,
``unlabeled_ratio``, ``threshold``, ``unlabeled_weight``, ``learning_rate``, ``momentum``,
``weight_decay``, ``ema_decay``, ``flip``, ``pad``, ``strong_ops``, ``cutout``). Flags
override the file. torch is imported only inside :func:`run`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

LABELS_FILENAME = "labels.npy"
WEIGHTS_FILENAME = "student.pt"
METRICS_FILENAME = "student_metrics.json"

# [student] keys of the config file -> type.
_STUDENT_KEYS = {"method": str, "model": str, "epochs": int, "steps_per_epoch": int, "batch_size": int,
                 "unlabeled_ratio": int, "threshold": float, "unlabeled_weight": float,
                 "learning_rate": float, "momentum": float, "weight_decay": float,
                 "ema_decay": float, "flip": bool, "pad": int, "strong_ops": int, "cutout": float}
# top-level key -> (setting, type); [data] key -> (setting, type).
_TOP_KEYS = {"dataset": ("dataset", str), "data_root": ("data_root", str),
             "public_size": ("public_size", int), "eval_size": ("eval_size", int),
             "seed": ("seed", int), "device": ("device", str)}
_DATA_KEYS = {"name": ("dataset", str), "dataset": ("dataset", str), "root": ("data_root", str),
              "data_root": ("data_root", str), "download": ("download", bool),
              "public_size": ("public_size", int), "eval_size": ("eval_size", int)}


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "train-student",
        help="train the student (FixMatch or supervised) on the public split and released labels",
        description=(
            "Train the student -- the only model PATE releases -- on the public inputs and the "
            "labels released by `pate aggregate` (<run-dir>/labels.npy, -1 = unanswered), "
            "semi-supervised (FixMatch: the unanswered public items are unlabelled data) or "
            "supervised. Evaluates on the held-out evaluation split and writes student.pt and "
            "student_metrics.json into the run directory."))
    p.add_argument("--run-dir", required=True, help="run directory holding labels.npy")
    p.add_argument("--config", help="TOML file (top-level dataset/seed/device, [data], [student])")
    p.add_argument("--labels", help=f"released labels (.npy; default <run-dir>/{LABELS_FILENAME})")
    p.add_argument("--dataset", help="dataset name, e.g. fashion-mnist, digits, npz:PATH")
    p.add_argument("--data-root", help="dataset root directory (see teachers.data.load_pate_data)")
    p.add_argument("--public-size", type=int, help="size of the public split (default: protocol)")
    p.add_argument("--eval-size", type=int, help="size of the evaluation split (default: protocol)")
    p.add_argument("--method", choices=("fixmatch", "supervised"), help="default fixmatch")
    p.add_argument("--model", help="model name (auto, cnn28, cnn32, cnn8, mlp, module:factory)")
    p.add_argument("--epochs", type=int)
    p.add_argument("--steps-per-epoch", type=int)
    p.add_argument("--batch-size", type=int, help="labelled items per step")
    p.add_argument("--unlabeled-ratio", type=int, help="FixMatch mu: unlabelled batch = mu x batch size")
    p.add_argument("--threshold", type=float, help="FixMatch pseudo-label confidence threshold")
    p.add_argument("--unlabeled-weight", type=float, help="FixMatch lambda_u")
    p.add_argument("--learning-rate", "--lr", dest="learning_rate", type=float)
    p.add_argument("--weight-decay", type=float)
    p.add_argument("--ema-decay", type=float, help="EMA of the weights for prediction (default: off)")
    flip = p.add_mutually_exclusive_group()
    flip.add_argument("--flip", dest="flip", action="store_true", default=None,
                      help="random horizontal flips (default: on for fashion-mnist and cifar10)")
    flip.add_argument("--no-flip", dest="flip", action="store_false")
    p.add_argument("--device", help="auto (default), cpu, cuda or cuda:N")
    p.add_argument("--seed", type=int, help="root seed (the student uses its 'student' stream)")
    p.add_argument("--resume", action="store_true", help="continue from student_checkpoint.pt")
    p.add_argument("--overwrite", action="store_true",
                   help="replace student.pt / student_metrics.json of an earlier run")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--json", action="store_true", help="print the metrics summary as JSON on stdout")
    p.set_defaults(func=run)


def _check_type(path, where: str, value, want):
    # The same typing rules and messages as `pate train-teachers` (float accepts ints, bool is
    # never an int).
    from pate.commands.train_teachers import _check_type as check

    return check(path, where, "", value, want)


def _read_config(path: str | None) -> tuple[dict, dict]:
    """(data/run settings, [student] settings) from a TOML file, strictly checked.

    Same layout as ``pate train-teachers`` and ``pate run``: top-level ``dataset``,
    ``data_root``, ``public_size``, ``eval_size``, ``seed``, ``device``; a ``[data]`` table
    (``name``, ``root``, ``download``, ``public_size``, ``eval_size``); ``seed``/``device`` of a
    ``[run]`` table; a ``[student]`` table. Unknown keys in ``[data]`` and ``[student]`` are
    errors; other tables belong to other commands.
    """
    if path is None:
        return {}, {}
    from analysis.errors import ConfigError
    from pate.config import read_toml

    cfg = read_toml(path)
    top: dict = {}
    for table in ("data", "run", "student"):
        if table in cfg and not isinstance(cfg[table], dict):
            raise ConfigError(f"--config {path}: [{table}] must be a table")
    run_table = cfg.get("run", {})
    for key in ("seed", "device"):
        if key in run_table:
            top[key] = _check_type(path, f"[run] {key}", run_table[key], _TOP_KEYS[key][1])
    for key, (name, want) in _TOP_KEYS.items():
        if key in cfg:
            top[name] = _check_type(path, key, cfg[key], want)
    for key, value in cfg.get("data", {}).items():
        if key not in _DATA_KEYS:
            raise ConfigError(f"--config {path}: unknown key {key!r} in [data]; valid keys: "
                              f"{', '.join(sorted(_DATA_KEYS))}")
        name, want = _DATA_KEYS[key]
        top[name] = _check_type(path, f"[data] {key}", value, want)
    settings = {}
    for key, value in cfg.get("student", {}).items():
        if key in ("seed", "device"):
            top[key] = _check_type(path, f"[student] {key}", value, _TOP_KEYS[key][1])
            continue
        if key not in _STUDENT_KEYS:
            raise ConfigError(f"--config {path}: unknown key {key!r} in [student]; valid keys: "
                              f"{', '.join(sorted(_STUDENT_KEYS))}, seed, device")
        settings[key] = _check_type(path, f"[student] {key}", value, _STUDENT_KEYS[key])
    return top, settings


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from analysis.validation import check_int

    # ---- gather and validate the settings before loading data or training
    top, settings = _read_config(args.config)
    for key in _STUDENT_KEYS:
        value = getattr(args, key, None)
        if value is not None:
            settings[key] = value
    dataset = args.dataset or top.get("dataset")
    if not dataset:
        raise ValueError("no dataset: pass --dataset NAME (e.g. fashion-mnist, digits) or set "
                         "dataset in --config")
    data_root = args.data_root or top.get("data_root")
    public_size = args.public_size if args.public_size is not None else top.get("public_size")
    eval_size = args.eval_size if args.eval_size is not None else top.get("eval_size")
    seed = args.seed if args.seed is not None else top.get("seed")
    if seed is not None:
        seed = check_int(seed, "--seed", minimum=0)
    device = args.device or top.get("device", "auto")
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"--run-dir {str(run_dir)!r} is not a directory; pass the run "
                                "directory where `pate aggregate` wrote labels.npy")
    labels_path = Path(args.labels) if args.labels else run_dir / LABELS_FILENAME
    if not labels_path.is_file():
        raise FileNotFoundError(f"no released labels at {labels_path}; run `pate aggregate` first "
                                "(or pass --labels FILE.npy)")
    weights_path, metrics_path = run_dir / WEIGHTS_FILENAME, run_dir / METRICS_FILENAME
    existing = [str(p) for p in (weights_path, metrics_path) if p.exists()]
    if existing and not (args.overwrite or args.resume):
        raise ValueError(f"{', '.join(existing)} already exist(s); pass --overwrite to retrain "
                         "from scratch, --resume to continue, or use a new --run-dir")
    labels = np.load(labels_path, allow_pickle=False)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"{labels_path} must hold a 1-D integer array of released labels "
                         f"(-1 = unanswered), got shape {labels.shape} and dtype {labels.dtype}")

    from student.augment import FLIP_DATASETS
    from student.train import CHECKPOINT_NAME, Student
    from teachers.data import load_pate_data

    flip = settings.pop("flip", None)
    if flip is None:
        flip = dataset in FLIP_DATASETS
    student = Student(**settings, flip=bool(flip), device=device, progress=not args.no_progress,
                      checkpoint_dir=run_dir, resume=bool(args.resume))
    student._validated()  # bad settings fail before the data is read

    # ---- data: only the public inputs and the evaluation split are used
    data = load_pate_data(dataset, root=data_root, download=bool(top.get("download", False)),
                          public_size=public_size, eval_size=eval_size)
    public_x = data.public.x
    num_public = public_x.shape[0]
    if labels.shape[0] > num_public:
        raise ValueError(f"{labels_path} has {labels.shape[0]} labels but the public split of "
                         f"{dataset} has {num_public} items; was it aggregated for another dataset "
                         "or --public-size?")
    if labels.shape[0] < num_public:
        print(f"pate train-student: {labels_path.name} covers the first {labels.shape[0]} of "
              f"{num_public} public items; the others are used unlabelled", file=sys.stderr)
        labels = np.concatenate([labels.astype(np.int64),
                                 np.full(num_public - labels.shape[0], -1, dtype=np.int64)])
    if student.num_classes is None:
        student.set_params(num_classes=data.num_classes)
    if student.random_state is None and seed is not None:
        from pate.rng import make_streams
        student.set_params(random_state=make_streams(seed).student)

    # ---- train (torch is imported by student.train) and evaluate
    from student.evaluate import evaluation_metrics, save_json

    if args.overwrite and not args.resume:
        (run_dir / CHECKPOINT_NAME).unlink(missing_ok=True)
    t0 = time.perf_counter()
    student.fit(public_x, labels.astype(np.int64))
    seconds = time.perf_counter() - t0
    metrics = evaluation_metrics(data.evaluation.y, student.predict(data.evaluation.x),
                                 num_classes=data.num_classes)
    student.save(weights_path)
    report = {
        "dataset": dataset, "method": student.settings_["method"], "model": student.model_name_,
        "num_public": int(num_public), "num_labelled": int(np.sum(labels >= 0)),
        "labels": str(labels_path), "weights": str(weights_path),
        "device": str(student.device_), "seed": seed, "student_seed": student.seed_,
        "train_seconds": seconds, "settings": student.settings_, "history": student.history_,
        "evaluation": metrics,
    }
    save_json(report, metrics_path)
    if args.json:
        print(json.dumps({k: report[k] for k in ("dataset", "method", "model", "num_public",
                                                  "num_labelled", "train_seconds")}
                         | {"accuracy": metrics["accuracy"]}, sort_keys=True))
    else:
        print(f"student ({report['method']}, {report['model']}): accuracy {metrics['accuracy']:.4f} "
              f"on {metrics['num_examples']} evaluation items; trained on {report['num_labelled']} "
              f"labelled of {num_public} public items in {seconds:.1f} s")
        print(f"wrote {weights_path} and {metrics_path}")
    return 0
