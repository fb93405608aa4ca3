"""`pate train-teachers`: train one teacher per shard of ``<run_dir>/partition.npz``.

Reads the partition written by ``pate partition`` (its record count must equal the private
split's), loads the dataset (:func:`teachers.data.load_pate_data`) and trains the ensemble
(:func:`teachers.ensemble.train_teachers`) into ``<run_dir>/teachers/``: checkpoints after each
epoch, trained weights per chunk, ``predictions.npz`` (teacher labels on the public and
evaluation splits) and ``metrics.json`` (per-teacher and plurality-vote accuracy on the
evaluation split). Then run ``pate vote`` to build the vote matrix.

Configuration: ``--config FILE.toml`` with a ``[data]`` table (``name``, ``root``, ``download``,
``public_size``, ``eval_size``) and a ``[teachers]`` table (``model``, ``model_params``,
``epochs``, ``batch_size``, ``lr``, ``optimizer``, ``weight_decay``, ``momentum``, ``augment``,
``label_smoothing``, ``trainer``, ``device``, ``chunk_size``, ``memory_budget_mb``,
``checkpoint``, ``checkpoint_every_s``, ``amp``, ``n_jobs``, ``seed``). Unknown keys in these two
tables are errors; other tables (``[student]``, ...) belong to other commands. Top-level ``seed``, ``device``,
``dataset`` and ``data_root`` are accepted too. Flags override the file.

Seeds: teacher ``t`` gets ``make_streams(seed).teacher_seeds(K)[t]``; the seed defaults to the
partition's. torch is imported only inside :func:`run`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

TEACHERS_DIRNAME = "teachers"

_DATA_KEYS = {"name": str, "dataset": str, "root": str, "data_root": str, "download": bool,
              "public_size": int, "eval_size": int}
_TEACHER_KEYS = {"model": str, "model_params": dict, "epochs": int, "batch_size": int,
                 "lr": float, "optimizer": str, "weight_decay": float, "momentum": float,
                 "augment": str, "label_smoothing": float, "trainer": str, "device": str,
                 "chunk_size": int, "memory_budget_mb": float, "checkpoint": str,
                 "checkpoint_every_s": float, "amp": bool, "n_jobs": int, "seed": int}
_TOP_KEYS = {"seed": int, "device": str, "dataset": str, "data_root": str}


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "train-teachers",
        help="train one teacher per shard of the partition (all teachers at once)",
        description=(
            "Train one model per shard of <run-dir>/partition.npz on the private split of the "
            "dataset. Same-architecture torch teachers are trained simultaneously with torch.func "
            "(vmap), in chunks that fit in memory; other models one after another; scikit-learn "
            "estimators (--model sklearn:package.module.Class) with joblib. Checkpoints after "
            "every epoch; --resume continues an interrupted run to the same teachers. Writes "
            "<run-dir>/teachers/{predictions.npz,metrics.json,chunk_*.pt} and prints per-teacher "
            "and plurality-vote accuracy on the evaluation split."))
    p.add_argument("--run-dir", required=True, help="run directory holding partition.npz")
    p.add_argument("--config", help="TOML file with [data] and [teachers] tables")
    p.add_argument("--data", help="dataset: fashion-mnist, mnist, kmnist, cifar10, svhn, digits, "
                                  "npz:PATH, csv:PATH or imagefolder:PATH")
    p.add_argument("--data-root", help="torchvision-style dataset root (default for fashion-mnist: "
                                       "/usr/share/datasets/fashion-mnist)")
    p.add_argument("--download", action="store_true", default=None,
                   help="let torchvision download a missing dataset into --data-root")
    p.add_argument("--public-size", type=int, help="public split size (default 9000 for images)")
    p.add_argument("--eval-size", type=int, help="evaluation split size (default 1000 for images)")
    p.add_argument("--model", help="auto (default), cnn28, cnn32, cnn8, mlp, module:factory or "
                                   "sklearn:package.module.Class")
    p.add_argument("--model-params", help="JSON object of scikit-learn estimator parameters")
    p.add_argument("--epochs", type=int, help="training epochs per teacher (default 20)")
    p.add_argument("--batch-size", type=int, help="records per step per teacher (default 32)")
    p.add_argument("--lr", type=float, help="learning rate (default 2e-3)")
    p.add_argument("--optimizer", help="adam (default), adamw or sgd")
    p.add_argument("--weight-decay", type=float, help="weight decay (default 0)")
    p.add_argument("--momentum", type=float, help="SGD momentum (default 0.9)")
    p.add_argument("--augment", help="auto (default), none, shift, flip or shift+flip")
    p.add_argument("--label-smoothing", type=float, help="label smoothing (default 0)")
    p.add_argument("--trainer", help="auto (default: vectorized when the model allows), "
                                     "vectorized or sequential")
    p.add_argument("--device", help="auto (default), cpu, cuda or cuda:N")
    p.add_argument("--chunk-size", type=int,
                   help="teachers trained together (default: chosen from available memory)")
    p.add_argument("--memory-budget-mb", type=float,
                   help="memory for one chunk (default: half the free memory, at most 2 GiB on CPU)")
    p.add_argument("--checkpoint", help="epoch (default) or chunk")
    p.add_argument("--checkpoint-every-s", type=float,
                   help="with --checkpoint epoch: mid-chunk checkpoints at most this often "
                        "(seconds; default 0 = after every epoch)")
    p.add_argument("--no-amp", dest="amp", action="store_false", default=None,
                   help="no bfloat16 autocast on CUDA")
    p.add_argument("--n-jobs", type=int, help="joblib workers for scikit-learn teachers")
    p.add_argument("--seed", type=int, help="root seed (default: the partition's seed)")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted run in <run-dir>/teachers")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--json", action="store_true", help="print the metrics summary as JSON")
    p.set_defaults(func=run)


def _check_type(path, table, key, value, want):
    from analysis.errors import ConfigError

    ok = (isinstance(value, bool) if want is bool else
          (isinstance(value, want) and not isinstance(value, bool)) or
          (want is float and isinstance(value, int) and not isinstance(value, bool)))
    if not ok:
        raise ConfigError(f"--config {path}: {table}{key} must be {want.__name__}, got {value!r}")
    return value


def read_config(path: str | None) -> tuple[dict, dict]:
    """``(data settings, teacher settings)`` from a TOML file, strictly checked."""
    if path is None:
        return {}, {}
    from analysis.errors import ConfigError
    from pate.config import read_toml

    cfg = read_toml(path)
    data, teachers = {}, {}
    for key, want in _TOP_KEYS.items():
        if key in cfg and not isinstance(cfg[key], dict):
            value = _check_type(path, "", key, cfg[key], want)
            target = {"seed": teachers, "device": teachers}.get(key, data)
            target[{"dataset": "name", "data_root": "root"}.get(key, key)] = value
    for table, keys, target in (("data", _DATA_KEYS, data), ("teachers", _TEACHER_KEYS, teachers)):
        section = cfg.get(table, {})
        if not isinstance(section, dict):
            raise ConfigError(f"--config {path}: [{table}] must be a table")
        for key, value in section.items():
            if key not in keys:
                raise ConfigError(f"--config {path}: unknown key {key!r} in [{table}]; valid keys: "
                                  f"{', '.join(sorted(keys))}")
            _check_type(path, f"[{table}] ", key, value, keys[key])
            target[{"dataset": "name", "data_root": "root"}.get(key, key)] = value
    return data, teachers


def run(args: argparse.Namespace) -> int:
    from analysis.validation import check_int

    # ---- settings: file, then flags; all validated before any data is read or work done
    data_cfg, teacher_cfg = read_config(args.config)
    flag_map = {"data": ("data", "name"), "data_root": ("data", "root"),
                "download": ("data", "download"), "public_size": ("data", "public_size"),
                "eval_size": ("data", "eval_size")}
    for attr, (_, key) in flag_map.items():
        value = getattr(args, attr)
        if value is not None:
            data_cfg[key] = value
    for key in _TEACHER_KEYS:
        value = getattr(args, key, None)
        if value is not None and key != "model_params":
            teacher_cfg[key] = value
    if args.model_params is not None:
        try:
            params = json.loads(args.model_params)
        except ValueError as exc:
            raise ValueError(f"--model-params must be a JSON object, got {args.model_params!r} "
                             f"({exc})") from None
        if not isinstance(params, dict):
            raise ValueError(f"--model-params must be a JSON object, got {args.model_params!r}")
        teacher_cfg["model_params"] = params
    name = data_cfg.get("name")
    if not name:
        raise ValueError("no dataset: pass --data NAME (e.g. fashion-mnist, digits) or set "
                         "name in the [data] table of --config")
    seed = teacher_cfg.pop("seed", None)
    if seed is not None:
        seed = check_int(seed, "--seed", minimum=0)

    from teachers.ensemble import TeacherConfig

    config = TeacherConfig(**teacher_cfg)  # validates every recipe field
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"--run-dir {str(run_dir)!r} is not a directory; run "
                                "`pate partition --run-dir DIR ...` first")
    out_dir = run_dir / TEACHERS_DIRNAME
    if (out_dir / "state.json").exists() and not args.resume:
        from analysis.errors import ConfigError
        raise ConfigError(f"{str(out_dir)!r} already holds teachers (or an interrupted run); pass "
                          "--resume to continue it, or use a new --run-dir")

    from pate.partition import PARTITION_FILENAME, Partition
    from teachers.data import load_pate_data

    partition = Partition.load(run_dir / PARTITION_FILENAME)
    data = load_pate_data(name, root=data_cfg.get("root"), download=bool(data_cfg.get("download", False)),
                          public_size=data_cfg.get("public_size"), eval_size=data_cfg.get("eval_size"))
    if partition.num_records != len(data.private):
        raise ValueError(f"the partition covers {partition.num_records} records but the private "
                         f"split of {name} has {len(data.private)}; re-run `pate partition` with "
                         f"--num-records {len(data.private)} (or the labels of this dataset)")

    seeds = _teacher_seeds(out_dir, args.resume, seed, partition)

    from teachers.ensemble import train_teachers

    result = train_teachers(data, partition.shards, seeds, config, out_dir=out_dir,
                            resume=bool(args.resume), progress=not args.no_progress)
    summary = dict(result.summary(), dataset=name, out_dir=str(out_dir))
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        print()
    else:
        import numpy as np

        acc = result.teacher_accuracy
        print(f"teachers: {result.num_teachers} x {config.resolved(data).model!r} on {name} "
              f"({result.trainer}, {result.device}, chunks of {result.chunk_size}, "
              f"{result.train_seconds:.1f} s)")
        print(f"evaluation accuracy ({len(data.evaluation)} items): teachers mean "
              f"{100 * acc.mean():.2f} % (std {100 * acc.std():.2f}, min {100 * acc.min():.2f}, "
              f"max {100 * acc.max():.2f}); plurality vote {100 * result.plurality_accuracy:.2f} %")
        if result.num_teachers <= 20:
            print("per-teacher accuracy (%): " + " ".join(f"{100 * a:.1f}" for a in acc))
        else:
            q = np.percentile(100 * acc, [10, 25, 50, 75, 90])
            print("per-teacher accuracy percentiles 10/25/50/75/90 (%): "
                  + " / ".join(f"{v:.1f}" for v in q))
        print(f"per-teacher accuracy: {out_dir / 'metrics.json'}; public predictions: "
              f"{out_dir / 'predictions.npz'}; next: pate vote --run-dir {run_dir}")
    return 0


def _teacher_seeds(out_dir: Path, resume: bool, seed, partition) -> list[int]:
    """Seeds saved by an interrupted run, else from ``seed`` (default: the partition's)."""
    from pate.rng import make_streams

    state_path = out_dir / "state.json"
    if resume and state_path.exists():
        try:
            saved = json.loads(state_path.read_text()).get("seeds")
        except (OSError, ValueError):
            saved = None
        if saved is not None and len(saved) == partition.num_teachers:
            if seed is None or saved == make_streams(seed).teacher_seeds(partition.num_teachers):
                return [int(s) for s in saved]
    if seed is None:
        seed = partition.seed
    if seed is None:
        print("train-teachers: the partition has no seed (secure) and no --seed was given: "
              "teacher seeds are drawn from OS entropy (saved for --resume)", file=sys.stderr)
    return make_streams(seed).teacher_seeds(partition.num_teachers)
