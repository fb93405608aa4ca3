"""Benchmark: the shipped Fashion-MNIST configs end to end on a CUDA GPU (issue #33).

Each run is ``pate run --config NAME --device cuda`` in a child process with its own run
directory and a fresh ledger; per run it records the wall time, every stage's own seconds and
peak GPU memory (its summary in ``rundir.STAGE_DIR``: torch's allocator,
:mod:`pate.core.gpu_memory`), the card's memory in use at its peak as ``nvidia-smi`` sampled it
every 0.2 s (the CUDA context and everything else of the process included), the child's peak
resident memory (``os.wait4``), the teachers' trainer and accuracy, the student's accuracy (from
the internal report, ``rundir.REPORT_INTERNAL_JSON``), the guarantee epsilon and the feature
cache's hits and misses. The runs, in order:

- ``demo``: ``make demo``'s config (``fashion-mnist``), on an empty feature cache (cold);
- ``class-means``: ``fashion-mnist-class-means`` (the CPU config, its student on the GPU) on an
  empty cache of its own (cold);
- ``teachers-bf16`` and ``teachers-fp32``: ``make demo``'s config ``--until teachers`` on the
  demo's now warm cache, as shipped (``[teachers] amp`` default: bfloat16 autocast on CUDA) and
  with ``amp = false`` (float32), side by side: the teachers stage alone, its front-end read from
  the cache;
- ``class-means-gpu``: ``fashion-mnist-class-means-gpu`` (WRN-16-4 student) on that cache (warm).

    python benchmarks/gpu_end_to_end.py --json benchmarks/results/gpu_end_to_end.json
    python benchmarks/gpu_end_to_end.py --runs demo teachers-bf16 teachers-fp32 --work DIR
    python benchmarks/gpu_end_to_end.py --check-features ...  # CPU vs GPU ScatterNet first

The data is Fashion-MNIST where the built-in loader finds it (Debian's dataset-fashion-mnist).
Run on demand on a machine with a CUDA GPU, never as a test; without one every run is refused
by ``pate run`` before anything is written (``device = "cuda"``).
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
import threading
import time

#: name -> (config, extra TOML lines for [teachers], --until stage or None, cache folder name)
RUNS = {
    "demo": ("fashion-mnist", "", None, "cache-demo"),
    "class-means": ("fashion-mnist-class-means", "", None, "cache-class-means"),
    "teachers-bf16": ("fashion-mnist", "", "teachers", "cache-demo"),
    "teachers-fp32": ("fashion-mnist", "amp = false", "teachers", "cache-demo"),
    "class-means-gpu": ("fashion-mnist-class-means-gpu", "", None, "cache-class-means"),
}
COMPUTING_STAGES = ("partition", "teachers", "votes", "aggregate", "student", "analysis", "report")


class GpuSampler:
    """The largest ``memory.used`` (MiB) of GPU 0 that ``nvidia-smi`` reports while it runs
    (None when nvidia-smi is missing)."""

    def __init__(self, interval_ms: int = 200):
        self.peak_mib: int | None = None
        try:
            self.proc = subprocess.Popen(
                [
                    "nvidia-smi",
                    "--query-gpu=memory.used",
                    "--format=csv,noheader,nounits",
                    "-lms",
                    str(interval_ms),
                    "--id=0",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        except OSError:
            self.proc = None
            return
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip().isdigit():
                self.peak_mib = max(self.peak_mib or 0, int(line))

    def stop(self) -> int | None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()
            self.thread.join(timeout=5)
        return self.peak_mib


def config_file(name: str, teachers_extra: str, folder: pathlib.Path) -> str:
    """The shipped config ``name``, or a copy of it with lines added to its [teachers] table."""
    if not teachers_extra:
        return name
    from pate.run.config import resolve_config

    text = pathlib.Path(resolve_config(name)).read_text()
    text, n = re.subn(r"(?m)^\[teachers\]\s*$", f"[teachers]\n{teachers_extra}", text)
    if n != 1:
        raise ValueError(f"{name}: expected one [teachers] table, found {n}")
    path = folder / f"{name}-{re.sub(r'[^a-z0-9]+', '-', teachers_extra)}.toml"
    path.write_text(text)
    return str(path)


def _json(path: pathlib.Path) -> dict:
    try:
        out = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return out if isinstance(out, dict) else {}


def summarise(run_dir: pathlib.Path) -> dict:
    """Stage seconds and GPU peaks, the teachers' and the student's figures, epsilon."""
    from pate.run import rundir  # the run directory's file names

    stages = {}
    for stage in COMPUTING_STAGES:
        info = _json(run_dir / rundir.STAGE_DIR / f"{stage}.json")
        info = info.get("summary", info) if isinstance(info.get("summary"), dict) else info
        if not info or info.get("skipped"):
            continue
        row = {"seconds": info.get("seconds")}
        for peak in info.get("gpu_memory") or []:
            row["gpu_peak_reserved_mib"] = round(peak["peak_reserved_bytes"] / 2**20)
            row["gpu_peak_allocated_mib"] = round(peak["peak_allocated_bytes"] / 2**20)
        cache = info.get("feature_cache")
        if isinstance(cache, dict):
            row["cache_hits"], row["cache_misses"] = cache.get("hits"), cache.get("misses")
        stages[stage] = row
    teachers = _json(run_dir / rundir.STAGE_DIR / "teachers.json")
    # the operator's own measurement: the internal report (docs/publishing.md); the public
    # report.json holds only the publishable figures
    report = _json(run_dir / rundir.REPORT_INTERNAL_JSON)
    utility, privacy = report.get("utility") or {}, report.get("privacy") or {}
    out = {
        "stages": stages,
        "teachers_trainer": teachers.get("trainer"),
        "teachers_device": teachers.get("device"),
        "teacher_accuracy_mean": teachers.get("teacher_accuracy_mean"),
        "plurality_accuracy": teachers.get("plurality_accuracy"),
    }
    if report:
        out.update(
            student_accuracy=utility.get("student_accuracy"),
            answered_labels=utility.get("answered_labels"),
            eps_guarantee=privacy.get("eps_guarantee"),
        )
    return out


def run_one(name: str, work: pathlib.Path) -> dict:
    config, extra, until, cache = RUNS[name]
    run_dir = work / "runs" / name
    argv = [sys.executable, "-m", "pate", "run", "--config", config_file(config, extra, work)]
    argv += ["--device", "cuda", "--run-dir", str(run_dir), "--no-progress"]
    argv += ["--ledger", str(work / f"ledger-{name}.sqlite3")]
    if until:
        argv += ["--until", until]
    env = {**os.environ, "PATE_FEATURE_CACHE": str(work / cache)}
    log = work / f"{name}.log"
    sampler = GpuSampler()
    t0 = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    row = {
        "name": name,
        "command": " ".join(["pate", *argv[3:]]),
        "exit_status": os.waitstatus_to_exitcode(status),
        "wall_s": round(wall, 1),
        "peak_rss_mib": round(usage.ru_maxrss / 1024),
        "gpu_peak_used_mib_nvidia_smi": sampler.stop(),
        **summarise(run_dir),
    }
    if row["exit_status"] != 0:
        row["log_tail"] = log.read_text()[-3000:]
    print(json.dumps(row), flush=True)
    return row


def front_end_agreement(rows: int = 8192) -> dict:
    """The ScatterNet features of the first ``rows`` Fashion-MNIST test images on the CPU and on
    the GPU (``computing_on``): the seconds of each and how far apart they are."""
    import numpy as np
    import torch

    from pate.teachers import features
    from pate.teachers.builtin_datasets import DEFAULT_FASHION_MNIST_DIR, read_idx

    images = read_idx(DEFAULT_FASHION_MNIST_DIR / "t10k-images-idx3-ubyte.gz")[:rows]
    x = (images[:, None].astype(np.float32) / 255.0).astype(np.float32)
    out = {"rows": int(len(x))}
    results = {}
    for device in ("cpu", "cuda:0"):
        with features.computing_on(device):
            features.scatter(x[:1024])  # warm-up (cuFFT plans, threads)
            if device != "cpu":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            results[device] = features.scatter(x)
            out[f"{device.split(':')[0]}_s"] = round(time.perf_counter() - t0, 3)
    diff = np.abs(results["cpu"] - results["cuda:0"])
    out["max_abs_diff"] = float(diff.max())
    out["max_rel_diff"] = float(diff.max() / np.abs(results["cpu"]).max())
    return out


def machine() -> dict:
    import torch

    out = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "cuda_available": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        out.update(gpu=props.name, gpu_memory_mib=props.total_memory // 2**20)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", nargs="+", choices=list(RUNS), default=list(RUNS))
    ap.add_argument("--work", type=pathlib.Path, help="keep the runs and caches here")
    ap.add_argument("--json", type=pathlib.Path, help="write the results here")
    ap.add_argument(
        "--check-features", action="store_true", help="also compare CPU and GPU features first"
    )
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pate-gpu-") as tmp:
        work = args.work or pathlib.Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        result = {
            "benchmark": "benchmarks/gpu_end_to_end.py",
            "command": "python benchmarks/gpu_end_to_end.py " + " ".join(argv or sys.argv[1:]),
            "machine": machine(),
            "runs": [],
        }
        if args.check_features:
            result["front_end"] = front_end_agreement()
            print(json.dumps(result["front_end"]), flush=True)
        for name in args.runs:  # the file is rewritten after each run: a cut-off run keeps some
            result["runs"].append(run_one(name, work))
            if args.json:
                args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if all(r["exit_status"] == 0 for r in result["runs"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
