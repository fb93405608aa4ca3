"""Benchmark: `make demo`'s job end to end, idle and beside busy neighbours (issue #33).

`make demo` runs ``pate run --config configs/fashion_mnist.toml``. This script runs that config
(fresh run directory, no ledger, fresh noise) once per condition, side by side on the same
machine, and records each run's wall time, peak RSS (``/usr/bin/time -f %M``), every stage's
seconds and threads (its summary in ``rundir.STAGE_DIR``) and the student's accuracy (from
``rundir.ANALYSIS``: the operator's internal figure, in the run's ``private/`` folder):

* ``idle``: nothing else started by this script;
* ``busy1``: one neighbour core kept busy by ``python3 -c "while True: pass"``;
* ``torch2``: two neighbours, each a 2-thread torch matmul loop with torch's defaults;

(the neighbours of ``benchmarks/threads.py``). The slowdown of a condition is its wall time over
the idle run's. The issue's bar: busy1 at most 2x, torch2 at most 3x, idle at most 2 minutes.
The feature cache is used as the run finds it ($PATE_FEATURE_CACHE or ``--feature-cache``); a
cold cache makes the first run compute the ScatterNet features (``--warm-up`` runs once untimed
first). The load average before each run is recorded: the machine may be shared.

    .venv/bin/python benchmarks/demo_neighbours.py                     # ~10-15 min on 2 cores
    .venv/bin/python benchmarks/demo_neighbours.py --conditions idle   # the idle time only
    .venv/bin/python benchmarks/demo_neighbours.py --wait spin30k --out /tmp/spin30k.json

``--wait`` runs under another OpenMP wait policy of ``benchmarks/threads.py`` (``WAIT_ENV``:
``spin30k`` / ``spin300k`` / ``active`` put ``GOMP_SPINCOUNT`` / ``OMP_WAIT_POLICY`` in the runs'
environment, which pate keeps) instead of pate's own (``passive``), to compare the policies end
to end; ``--threads N`` passes ``--threads N`` to ``pate run``.

Run on demand, never as a test; OMP_NUM_THREADS is removed from the runs' environment (pate
chooses its threads: ``pate.core.threads``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import threads as neighbours  # noqa: E402  (benchmarks/threads.py: the same neighbours)

CONFIG = "configs/fashion_mnist.toml"
CONDITIONS = neighbours.CONDITIONS
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "demo_neighbours.json"
#: The issue's bars: wall time over the idle run's, per condition.
BARS = {"busy1": 2.0, "torch2": 3.0}
IDLE_BAR_SECONDS = 120.0


def run_env(cache: str | None, *, wait: str = "passive") -> dict:
    """The runs' environment: no thread settings of the caller's, the wait policy's variables
    (none for pate's own, ``passive``), this checkout first on the path, the feature cache."""
    if wait != "passive" and wait not in neighbours.WAIT_ENV:
        raise ValueError(
            f"wait must be 'passive' or one of {', '.join(neighbours.WAIT_ENV)}, got {wait!r}"
        )
    env = {k: v for k, v in os.environ.items() if k not in neighbours.THREAD_VARIABLES}
    env.update(neighbours.WAIT_ENV.get(wait, {}))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if cache is not None:
        env["PATE_FEATURE_CACHE"] = cache
    return env


def run_once(
    config: str,
    run_dir: pathlib.Path,
    cache: str | None,
    *,
    wait: str = "passive",
    threads: int | None = None,
) -> dict:
    """One ``pate run`` of ``config`` into the fresh ``run_dir``: wall seconds, peak RSS (MiB),
    the stages' seconds and threads, the student's accuracy. ``wait``: ``"passive"`` (pate's
    own) or a policy of ``benchmarks/threads.py``'s ``WAIT_ENV``; ``threads``: ``--threads``."""
    env = run_env(cache, wait=wait)
    cmd = [
        "/usr/bin/time",
        "-f",
        "TIME %e %M",
        sys.executable,
        "-m",
        "pate",
        "run",
        "--config",
        config,
        "--run-dir",
        str(run_dir),
        "--no-ledger",
        "--no-progress",
        *([] if threads is None else ["--threads", str(threads)]),
    ]
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    lines = [line for line in out.stderr.splitlines() if line.startswith("TIME ")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    _, wall, rss_kb = lines[-1].split()
    from pate.run import rundir  # the run directory's file names

    stages = {}
    for path in sorted((run_dir / rundir.STAGE_DIR).glob("*.json")):
        summary = json.loads(path.read_text())
        stages[path.stem] = {
            "seconds": summary.get("seconds"),
            "threads": (summary.get("threads") or {}).get("count"),
            "wait_policy": (summary.get("threads") or {}).get("wait_policy"),
            # the other processes' threads pate saw, and the student's processes
            "others": (summary.get("threads") or {}).get("others"),
            "processes": summary.get("processes"),
        }
    analysis = json.loads((run_dir / rundir.ANALYSIS).read_text())
    return {
        "wall_seconds": float(wall),
        "peak_rss_mib": round(int(rss_kb) / 1024, 1),
        "stages": stages,
        "student_accuracy": analysis["utility"]["student_accuracy"],
        "eps_guarantee": analysis["privacy"]["eps_guarantee"],
    }


def slowdowns(runs: dict) -> dict:
    """Wall time of each condition over the idle run's (None without an idle run)."""
    idle = (runs.get("idle") or {}).get("wall_seconds")
    return {
        c: (None if idle is None else round(r["wall_seconds"] / idle, 2)) for c, r in runs.items()
    }


def _commit() -> str | None:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() or None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=CONFIG)
    parser.add_argument("--conditions", nargs="+", choices=CONDITIONS, default=list(CONDITIONS))
    parser.add_argument("--feature-cache", default=os.environ.get("PATE_FEATURE_CACHE"))
    parser.add_argument("--warm-up", action="store_true", help="one untimed run first")
    parser.add_argument(
        "--wait",
        choices=("passive", *neighbours.WAIT_ENV),
        default="passive",
        help="the OpenMP wait policy of the runs (passive: pate's own)",
    )
    parser.add_argument("--threads", type=int, default=None, help="pate run --threads N")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    args = parser.parse_args(argv)
    work = pathlib.Path(tempfile.mkdtemp(prefix="pate-demo-neighbours-"))
    runs, load = {}, {}
    try:
        if args.warm_up:
            run_once(
                args.config,
                work / "warm-up",
                args.feature_cache,
                wait=args.wait,
                threads=args.threads,
            )
        for condition in args.conditions:
            procs = neighbours._neighbours(condition)
            try:
                load[condition] = list(os.getloadavg())
                runs[condition] = run_once(
                    args.config,
                    work / condition,
                    args.feature_cache,
                    wait=args.wait,
                    threads=args.threads,
                )
            finally:
                neighbours._stop(procs)
            print(
                f"{condition}: {runs[condition]['wall_seconds']:.1f} s, "
                f"{runs[condition]['peak_rss_mib']:.0f} MiB, student "
                f"{runs[condition]['student_accuracy']:.3f}",
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "machine": neighbours.machine_facts(),
        "load_average_before": load,
        "config": args.config,
        "wait": args.wait,
        "threads": args.threads,
        "runs": runs,
        "slowdown_vs_idle": slowdowns(runs),
        "bars": {"slowdown": BARS, "idle_seconds": IDLE_BAR_SECONDS},
        "command": "python benchmarks/demo_neighbours.py " + " ".join(argv or sys.argv[1:]),
        "commit": _commit(),
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    pathlib.Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["slowdown_vs_idle"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
