"""Benchmark: wall time and peak memory of a config as its private split grows (issue #33).

For each size factor (x1, x4, x8, ...) the config's private split is enlarged with
label-preserving copies of every private image (copy k of image i is a fixed transformation of
it: a horizontal flip, shifts by 2 pixels, and flips of the shifted images; the public and
evaluation splits are unchanged), written to an ``npz:`` file, and the config is run on it with
``pate run`` in a child process (``--until`` a stage, default ``votes``: the stage whose
front-end features grow with the private split). Each size is run twice on one feature cache:
``cold`` (an empty cache: every split's features computed and written) and ``warm`` (the same
run again in a new run directory: the features read from the cache). A third child only loads the
data (``data-only``): the memory the data itself takes, whatever the pipeline does.

With ``--per-stage`` every stage up to ``--until`` is its own child (``pate run --until STAGE``,
then ``--resume --until`` the next one in the same run directory): one row per stage, whose peak
is that stage's (with the data loading and imports every child does).

Reported per run: wall seconds, peak resident memory of the child (``/usr/bin/time -f %M``: the
largest resident set, file-backed pages of memory maps included), the votes stage's
feature-cache hits and misses and front-end seconds, and ``os.getloadavg()`` before and after
(the machine is shared: other jobs slow every number down); with the machine's facts. The child's
own ``ru_maxrss`` from ``os.wait4`` is not used: Python starts children with ``vfork``, and the
kernel carries the parent's resident set (this harness holds the enlarged data) into the
child's maximum.

    .venv/bin/python benchmarks/scale_data.py --sizes 1 --json benchmarks/results/scale_data.json
    .venv/bin/python benchmarks/scale_data.py --sizes 1 4 8 --until student   # hours on 2 cores
    .venv/bin/python benchmarks/scale_data.py --config fashion-mnist --sizes 1 --until teachers \
        --per-stage --runs warm --work DIR      # make demo's config, stage by stage
    PATE_FEATURE_CACHE=DIR .venv/bin/python benchmarks/scale_data.py ...  # one cache for all sizes

The enlarged data, the runs and the cache go to a temporary folder (``--work DIR`` to keep them;
x8 of Fashion-MNIST is a 1.5 GB npz file and 7.6 GB of cached features). The ledger is a fresh
one per run (each run is charged as a new dataset). Run on demand, never as a test.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

#: Copy k (1-based) of every private image: (horizontal flip, shift down, shift right), in pixels.
TRANSFORMS = (
    (True, 0, 0),
    (False, 2, 0),
    (False, 0, 2),
    (False, -2, 0),
    (False, 0, -2),
    (True, 2, 0),
    (True, 0, 2),
    (True, -2, 0),
    (True, 0, -2),
    (False, 2, 2),
    (False, -2, -2),
    (True, 2, 2),
    (True, -2, -2),
    (False, 2, -2),
    (False, -2, 2),
)
MAX_FACTOR = len(TRANSFORMS) + 1


def transformed(x: np.ndarray, flip: bool, dy: int, dx: int) -> np.ndarray:
    """Images (N, C, H, W) flipped left-right and shifted by (dy, dx), zero-filled (the
    background of Fashion-MNIST and MNIST): the class of every image is kept."""
    out = x[..., ::-1] if flip else x
    out = np.roll(out, (dy, dx), axis=(2, 3))
    if dy > 0:
        out[:, :, :dy] = 0
    elif dy < 0:
        out[:, :, dy:] = 0
    if dx > 0:
        out[:, :, :, :dx] = 0
    elif dx < 0:
        out[:, :, :, dx:] = 0
    return np.ascontiguousarray(out, dtype=np.float32)


def enlarged_npz(data, factor: int, path: pathlib.Path) -> int:
    """Write ``data`` with its private split ``factor`` times as large to ``path``; returns the
    number of private records."""
    if not 1 <= factor <= MAX_FACTOR:
        raise ValueError(f"factor must be in 1..{MAX_FACTOR}, got {factor}")
    xp, yp = data.private.x, data.private.y
    if xp.ndim != 4:
        raise ValueError(f"scale_data enlarges image data (N, C, H, W); got {xp.shape}")
    xs = [xp] + [transformed(xp, *TRANSFORMS[k]) for k in range(factor - 1)]
    arrays = {
        "x_private": np.concatenate(xs),
        "y_private": np.tile(yp, factor),
        "x_public": data.public.x,
        "y_public": data.public.y,
        "x_evaluation": data.evaluation.x,
        "y_evaluation": data.evaluation.y,
    }
    if data.class_names:
        arrays["class_names"] = np.asarray(data.class_names)
    np.savez(path, **arrays)
    return len(arrays["y_private"])


def scaled_config(
    config: str, npz: pathlib.Path, cache: pathlib.Path, out: pathlib.Path, *, records: int
) -> None:
    """The config's TOML with ``[data] name = "npz:..."``, the ``records`` private records the
    file holds declared (``[data] records``: own data declares its size) and ``[run]
    feature_cache``."""
    from pate.run.config import resolve_config

    text = pathlib.Path(resolve_config(config)).read_text()
    # the [data] table's name (a [run] table may have the same name line)
    text, n = re.subn(
        r'(?m)^(\[data\]\s*\n(?:(?!\[).*\n)*?)name\s*=\s*"fashion-mnist"\s*$',
        lambda m: f'{m.group(1)}name = "npz:{npz}"\nrecords = {int(records)}',
        text,
    )
    if n != 1:
        raise ValueError(f'{config}: expected one [data] name = "fashion-mnist" line, found {n}')
    text, n = re.subn(r"(?m)^\[run\]\s*$", f'[run]\nfeature_cache = "{cache}"', text)
    if n != 1:
        raise ValueError(f"{config}: expected one [run] table, found {n}")
    out.write_text(text)


TIME = "/usr/bin/time"  # GNU time: forks its child from a small process of its own


def measured(argv: list[str], log: pathlib.Path) -> dict:
    """Run ``argv`` as a child; its wall seconds, peak RSS (MiB) and exit status."""
    if not os.access(TIME, os.X_OK):
        raise SystemExit(
            f"{TIME} (GNU time) is needed to measure a child's peak memory: "
            "install the 'time' package"
        )
    load_before = os.getloadavg()
    peak_file = log.with_suffix(".maxrss")
    t0 = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.Popen(
            [TIME, "-f", "%M", "-o", str(peak_file), *argv],
            stdout=f,
            stderr=subprocess.STDOUT,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        status = proc.wait()
    lines = peak_file.read_text().split()
    return {
        "wall_s": round(time.perf_counter() - t0, 1),
        "peak_rss_mb": round(int(lines[-1]) / 1024, 1),  # MiB (GNU time's %M is in KiB)
        "exit_status": status,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }


def _cache_summary(run_dir: pathlib.Path, stage: str = "votes") -> dict:
    """The feature-cache hits and misses of the votes (or teachers) stage, and the votes
    stage's front-end seconds: whether a run found the features cached."""
    from pate.run import rundir  # the run directory's file names

    path = run_dir / rundir.STAGE_DIR / f"{stage}.json"
    if not path.exists():
        return {}
    info = json.loads(path.read_text())
    info = info.get("summary", info)
    cache = info.get("feature_cache") or {}
    out = {"cache_hits": cache.get("hits"), "cache_misses": cache.get("misses")}
    return {"front_end_s": info.get("front_end_seconds"), **out} if stage == "votes" else out


def _stage_seconds(run_dir: pathlib.Path, stage: str) -> dict:
    """The stage's own seconds (its summary in ``rundir.STAGE_DIR``), without the child's
    start-up."""
    from pate.run import rundir  # the run directory's file names

    path = run_dir / rundir.STAGE_DIR / f"{stage}.json"
    if not path.exists():
        return {}
    info = json.loads(path.read_text())
    return {"stage_s": info["seconds"]} if "seconds" in info else {}


def _runs(args, folder, config, name) -> list[dict]:
    """One child (``pate run --until``), or with ``--per-stage`` one child per stage."""
    from pate.run import rundir

    run_dir = folder / "runs" / name
    base = [
        sys.executable,
        "-m",
        "pate",
        "run",
        "--config",
        str(config),
        "--run-dir",
        str(run_dir),
        "--ledger",
        str(folder / f"ledger-{name}.sqlite3"),
        "--no-progress",
    ]
    stages = rundir.STAGES[: rundir.STAGES.index(args.until) + 1]
    if not args.per_stage:
        argv = base + ([] if args.until == "report" else ["--until", args.until])
        row = measured(argv, folder / f"{name}.log")
        return [{"run": name, "until": args.until, **row, **_cache_summary(run_dir)}]
    rows = []
    for i, stage in enumerate(stages):
        argv = (
            base + (["--resume"] if i else []) + ([] if stage == "report" else ["--until", stage])
        )
        row = measured(argv, folder / f"{name}-{stage}.log")
        extra = {
            **_stage_seconds(run_dir, stage),
            **(_cache_summary(run_dir, stage) if stage in ("teachers", "votes") else {}),
        }
        rows.append({"run": name, "stage": stage, **row, **extra})
        if row["exit_status"] != 0:
            break
    return rows


def feature_cache_dir(args, folder: pathlib.Path) -> pathlib.Path:
    """``--feature-cache``, else ``$PATE_FEATURE_CACHE`` (one cache for every size and config:
    the public and evaluation splits' entries are shared), else a cache of this size's own."""
    chosen = args.feature_cache or os.environ.get("PATE_FEATURE_CACHE")
    return pathlib.Path(chosen).expanduser().resolve() if chosen else folder / "feature-cache"


def run_size(data, factor: int, args, work: pathlib.Path) -> list[dict]:
    folder = work / f"x{factor}"
    folder.mkdir(parents=True, exist_ok=True)
    npz = folder / "data.npz"
    private = enlarged_npz(data, factor, npz)
    config = folder / "config.toml"
    scaled_config(args.config, npz, feature_cache_dir(args, folder), config, records=private)
    rows = []
    loader = (
        "from pate.teachers.data import load_pate_data; "
        f"d = load_pate_data('npz:{npz}'); print(len(d.private))"
    )
    row = measured([sys.executable, "-c", loader], folder / "data-only.log")
    rows.append({"size": f"x{factor}", "private_records": private, "run": "data-only", **row})
    print(json.dumps(rows[-1]), flush=True)
    for name in args.runs:
        for row in _runs(args, folder, config, name):
            rows.append({"size": f"x{factor}", "private_records": private, **row})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="fashion-mnist-class-means")
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 8])
    p.add_argument(
        "--until",
        default="votes",
        choices=("partition", "teachers", "votes", "aggregate", "student", "report"),
    )
    p.add_argument(
        "--per-stage",
        action="store_true",
        help="one child per stage (its own peak RSS), resumed in one run directory",
    )
    p.add_argument(
        "--runs",
        nargs="+",
        default=["cold", "warm"],
        choices=("cold", "warm"),
        help="cold: the first run on the cache; warm: again, in a new run directory "
        "(a kept --work cache may already be warm for 'cold')",
    )
    p.add_argument("--work", help="keep the data, runs and cache here (default: a temp folder)")
    p.add_argument(
        "--feature-cache",
        help="the feature cache of every run (default: $PATE_FEATURE_CACHE, else one per size "
        "under the work folder)",
    )
    p.add_argument(
        "--json", help="write the results here (e.g. benchmarks/results/scale_data.json)"
    )
    p.add_argument(
        "--append",
        action="store_true",
        help="add this invocation and its rows to the --json file's (same machine)",
    )
    p.add_argument(
        "--label", default="", help="what code was measured (e.g. a commit), recorded in every row"
    )
    args = p.parse_args(argv)
    from pate.run.config import load
    from pate.teachers.data import load_pate_data

    source = load(args.config, ledger=False)
    data = load_pate_data(source.data.name, **source.data.loader_settings())
    rows = []
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(args.work or tmp)
        for factor in args.sizes:
            rows += run_size(data, factor, args, work)
    rows = [{"config": args.config, "code": args.label, **row} for row in rows]
    invocation = {
        "command": " ".join(
            ["python", "benchmarks/scale_data.py", *(sys.argv[1:] if argv is None else argv)]
        ),
        "started": started,
        "code": args.label,
    }
    result = {
        "benchmark": "scale_data",
        "invocations": [invocation],
        "rows": rows,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        },
        "notes": "OMP_NUM_THREADS=1; peak_rss_mb is the child's peak resident set from "
        "/usr/bin/time -f %M, in MiB; the machine is shared (see "
        "loadavg_before/after)",
    }
    if args.json:
        path = pathlib.Path(args.json)
        if args.append and path.exists():
            before = json.loads(path.read_text())
            if before.get("machine") != result["machine"]:
                raise SystemExit(f"{path} holds results of another machine; write another file")
            result["invocations"] = before.get("invocations", []) + result["invocations"]
            result["rows"] = before.get("rows", []) + result["rows"]
        path.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
