"""Benchmark: torch's default threads vs pate.core.threads' policy, idle and beside busy neighbours.

Two workloads of ``make demo``, a few seconds each on an idle 2-core machine:

* ``student``: SGD steps of the digits student (zoo ``cnn8``, 1x8x8 images) on FixMatch-sized
  batches (64 labelled + 2 x 3 x 64 unlabelled views);
* ``teachers``: steps of 10 ``cnn8`` teachers trained at once with ``torch.func`` (``vmap`` of
  ``grad`` over stacked weights, batch 32 each), as the vectorized teacher trainer does.

Each is timed, in a fresh Python process (the OpenMP wait policy is read when torch loads), under

* ``old``: torch's defaults (one thread per core of the machine, OpenMP threads spin while they
  wait; ``OMP_WAIT_POLICY`` etc. removed from the child's environment);
* ``new``: :func:`pate.core.threads.configure` (the usable CPUs, idle threads sleep);
* ``new-1``: the new policy with one thread (``threads=1``): what lowering the count by the load
  average would give;

in three conditions: ``idle``; ``busy1``: one neighbour core kept busy by
``python3 -c "while True: pass"``; ``torch2``: two neighbours, each a 2-thread torch matmul loop
with torch's defaults (as two other engineers' runs would be). Each measurement runs up to
``--steps`` steps (default 200) or ``--max-seconds`` (default 6), whichever comes first, after 5
untimed steps. Writes the steps per second, the slowdowns beside neighbours (each policy's
steps/s with no neighbour over its steps/s beside them) and the speed-ups over torch's defaults
(per condition) into ``benchmarks/results/threads.json`` with the facts
(CPU count, affinity, cgroup quota, the load average before the run and before each condition).
The machine may be shared: the load is recorded so that a reader can judge the numbers.

    env -u OMP_NUM_THREADS .venv/bin/python benchmarks/threads.py     # ~2-3 min on 2 cores
    env -u OMP_NUM_THREADS .venv/bin/python benchmarks/threads.py --max-seconds 3  # quicker

OMP_NUM_THREADS must be unset (the ``old`` policy is torch's default; ``new`` would take it as
the user's choice); the script refuses otherwise. Run on demand, never as a test.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "threads.json"
if str(ROOT) not in sys.path:  # this checkout's pate, also where another one is installed
    sys.path.insert(0, str(ROOT))
POLICIES = ("old", "new", "new-1")
CONDITIONS = ("idle", "busy1", "torch2")
WORKLOADS = ("student", "teachers")
#: The environment variables the ``old`` policy removes (torch's defaults apply).
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OMP_WAIT_POLICY",
    "GOMP_SPINCOUNT",
    "KMP_BLOCKTIME",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
)

# The child: times one workload under one policy; prints {"steps", "seconds", "steps_per_s",
# "threads"} as JSON.
CHILD = r"""
import json, sys, time
policy, workload, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
if policy != "old":
    from pate.core import threads
    record = threads.configure(explicit=1 if policy == "new-1" else None, explicit_source="flag")
import torch
from torch.func import functional_call, grad, vmap
from pate.teachers.models import build_model
torch.manual_seed(0)
net = build_model("cnn8", input_shape=(1, 8, 8), num_classes=10)
loss_fn = torch.nn.functional.cross_entropy
if workload == "student":
    opt = torch.optim.SGD(net.parameters(), lr=0.03, momentum=0.9)
    x, y = torch.randn(64 + 6 * 64, 1, 8, 8), torch.randint(0, 10, (64 + 6 * 64,))
    def step():
        opt.zero_grad()
        loss_fn(net(x), y).backward()
        opt.step()
else:
    teachers = 10
    params = {k: v.detach().unsqueeze(0).repeat(teachers, *[1] * v.dim())
              for k, v in net.named_parameters()}
    x, y = torch.randn(teachers, 32, 1, 8, 8), torch.randint(0, 10, (teachers, 32))
    def loss(p, xb, yb):
        return loss_fn(functional_call(net, p, (xb,)), yb)
    grads = vmap(grad(loss))
    def step():
        g = grads(params, x, y)
        for k in params:
            params[k].sub_(0.01 * g[k])
for _ in range(5):
    step()
limit = float(sys.argv[4])
done, t0 = 0, time.perf_counter()
while done < steps and (done == 0 or time.perf_counter() - t0 < limit):
    step()
    done += 1
seconds = time.perf_counter() - t0
print(json.dumps({"steps": done, "seconds": seconds, "steps_per_s": done / seconds,
                  "threads": torch.get_num_threads()}))
"""

# A neighbour: a 2-thread torch matmul loop with torch's defaults (spinning OpenMP threads).
TORCH_NEIGHBOUR = r"""
import torch
torch.set_num_threads(2)
a = torch.randn(384, 384)
while True:
    a = torch.tanh(a @ a)
"""


def _clean_env(policy: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _time(policy: str, workload: str, steps: int, limit: float) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, policy, workload, str(steps), str(limit)],
        env=_clean_env(policy),
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{policy}/{workload} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _neighbours(condition: str) -> list[subprocess.Popen]:
    if condition == "idle":
        return []
    if condition == "busy1":
        cmds = [["python3", "-c", "while True: pass"]]
    else:
        cmds = [[sys.executable, "-c", TORCH_NEIGHBOUR]] * 2
    env = _clean_env("old")
    procs = [
        subprocess.Popen(c, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for c in cmds
    ]
    time.sleep(1.5 if condition == "busy1" else 4.0)  # started (torch imported) before timing
    return procs


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:  # only the processes this script started
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def machine_facts() -> dict:
    from pate.core import threads

    quota = threads.cgroup_cpus()
    return {
        "cpu_count": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)),
        "cgroup_quota_cpus": None if quota is None else quota[0],
        "load_average_before": list(os.getloadavg()),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": _cpu_model(),
    }


def _cpu_model() -> str | None:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def ratios(rate: dict) -> dict:
    """From ``{workload: {policy: {condition: steps/s}}}``: ``slowdown_vs_idle`` (how many times
    longer a step takes beside the neighbours than with none, same policy) and ``speedup_vs_old``
    (the policy's steps/s over torch's defaults', same condition)."""
    return {
        "slowdown_vs_idle": {
            w: {
                p: {c: round(rate[w][p]["idle"] / rate[w][p][c], 2) for c in CONDITIONS}
                for p in POLICIES
            }
            for w in rate
        },
        "speedup_vs_old": {
            w: {
                p: {c: round(rate[w][p][c] / rate[w]["old"][c], 2) for c in CONDITIONS}
                for p in POLICIES
            }
            for w in rate
        },
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="timed steps per measurement")
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=6.0,
        help="stop a measurement after this long (its steps/s is kept)",
    )
    parser.add_argument("--repeats", type=int, default=1, help="measurements per cell (median)")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    if os.environ.get("OMP_NUM_THREADS"):
        parser.error(
            "unset OMP_NUM_THREADS: the old policy is torch's default and the new one "
            "would take it as the user's choice"
        )
    facts = machine_facts()
    print(f"machine: {facts}", flush=True)
    rate: dict = {}  # steps/s
    loads: dict = {}
    for condition in CONDITIONS:
        loads[condition] = list(os.getloadavg())
        procs = _neighbours(condition)
        try:
            for workload in WORKLOADS:
                for policy in POLICIES:
                    runs = sorted(
                        (
                            _time(policy, workload, args.steps, args.max_seconds)
                            for _ in range(args.repeats)
                        ),
                        key=lambda r: r["steps_per_s"],
                    )
                    r = runs[len(runs) // 2]
                    rate.setdefault(workload, {}).setdefault(policy, {})[condition] = round(
                        r["steps_per_s"], 2
                    )
                    print(
                        f"{condition:7s} {workload:9s} {policy:6s} {r['steps_per_s']:7.1f} "
                        f"steps/s ({r['steps']} steps in {r['seconds']:.2f} s, "
                        f"{r['threads']} threads)",
                        flush=True,
                    )
        finally:
            _stop(procs)
    doc = {
        "machine": facts,
        "load_average_per_condition": loads,
        "max_steps": args.steps,
        "max_seconds": args.max_seconds,
        "repeats": args.repeats,
        "steps_per_s": rate,
        **ratios(rate),
        "command": "python benchmarks/threads.py " + " ".join(argv or sys.argv[1:]),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    for key in ("slowdown_vs_idle", "speedup_vs_old"):
        for w in WORKLOADS:
            for p in POLICIES:
                print(
                    f"{key} {w:9s} {p:6s} "
                    + "  ".join(f"{c} {doc[key][w][p][c]:5.2f}x" for c in CONDITIONS)
                )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
