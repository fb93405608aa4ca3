"""Benchmark: thread counts and OpenMP wait policies, idle and beside busy neighbours.

Four workloads, a few seconds each on an idle 2-core machine:

* ``student``: SGD steps of the digits student (zoo ``cnn8``, 1x8x8 images) on FixMatch-sized
  batches (64 labelled + 2 x 3 x 64 unlabelled views);
* ``teachers``: steps of 10 ``cnn8`` teachers trained at once with ``torch.func`` (``vmap`` of
  ``grad`` over stacked weights, batch 32 each), as the vectorized teacher trainer does;
* ``student28``: ``make demo``'s student step (zoo ``cnn28``, channels-last as
  :func:`pate.student.trainer.build_network` keeps it on the CPU; a no-gradient forward of the 96
  weak unlabelled views, a forward and backward of the 32 labelled + 96 strong views, Nesterov
  SGD and the EMA update), without the augmentations;
* ``teachers_linear``: ``make demo``'s teachers step: 50 ``linear`` teachers on 81x7x7 ScatterNet
  features trained at once (``vmap`` of ``grad``, batch 32 each).

Each is timed, in a fresh Python process (the OpenMP wait policy is read when torch loads), under
a policy (``POLICIES``):

* ``old``: torch's defaults (one thread per core of the machine, OpenMP threads spin while they
  wait; ``OMP_WAIT_POLICY`` etc. removed from the child's environment);
* ``new``: :func:`pate.core.threads.configure` (the usable CPUs, idle threads sleep);
* ``new-1``: the new policy with one thread (``threads=1``);
* ``new-interop1``: the new policy with one inter-op thread (torch's inter-op pool serves only
  ``torch.jit.fork``-style parallelism, which eager training does not use);
* ``spin30k``, ``spin300k``, ``active``: the usable CPUs with idle threads spinning before they
  sleep: ``GOMP_SPINCOUNT`` 30 000, 300 000 (GNU OpenMP's default, about 0.3-3 ms) and
  ``OMP_WAIT_POLICY=ACTIVE`` (GNU OpenMP spins up to minutes);

in the conditions ``idle`` (no neighbour started by this script); ``busy1``: one neighbour core
kept busy by ``python3 -c "while True: pass"``; ``torch2``: two neighbours, each a 2-thread torch
matmul loop with torch's defaults (as two other engineers' runs would be). Each measurement runs
up to ``--steps`` steps (default 200) or ``--max-seconds`` (default 6), whichever comes first,
after 5 untimed steps; with ``--repeats`` the policies take turns (one measurement of each, then
the next round) and the median is kept. Writes the steps per second, the slowdowns beside
neighbours (each policy's steps/s with no neighbour over its steps/s beside them) and the
speed-ups over the first policy given (``old`` by default; per condition) into
``benchmarks/results/threads.json`` with the facts (CPU count, affinity, cgroup quota, the load
average before the run and before each condition). The machine may be shared: the load is
recorded so that a reader can judge the numbers.

    env -u OMP_NUM_THREADS .venv/bin/python benchmarks/threads.py     # ~2-3 min on 2 cores
    env -u OMP_NUM_THREADS .venv/bin/python benchmarks/threads.py --max-seconds 3  # quicker
    env -u OMP_NUM_THREADS .venv/bin/python benchmarks/threads.py --workloads student28 \
        teachers_linear --policies new spin30k spin300k active new-1 --conditions idle torch2 \
        --repeats 3 --out benchmarks/results/threads_wait.json     # make demo's wait policies

OMP_NUM_THREADS must be unset (the ``old`` policy is torch's default; ``new`` would take it as
the user's choice); the script refuses otherwise. Run on demand, never as a test.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "threads.json"
if str(ROOT) not in sys.path:  # this checkout's pate, also where another one is installed
    sys.path.insert(0, str(ROOT))
POLICIES = ("old", "new", "new-1", "new-interop1", "spin30k", "spin300k", "active")
CONDITIONS = ("idle", "busy1", "torch2")
WORKLOADS = ("student", "teachers", "student28", "teachers_linear")
#: The wait settings a policy puts in its child's environment (before torch loads); the others
#: get pate's (``new``: passive) or torch's (``old``: none).
WAIT_ENV = {
    "spin30k": {"GOMP_SPINCOUNT": "30000", "KMP_BLOCKTIME": "1"},
    "spin300k": {"GOMP_SPINCOUNT": "300000", "KMP_BLOCKTIME": "200"},
    "active": {"OMP_WAIT_POLICY": "ACTIVE"},
}
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
record = None
if policy != "old":
    from pate.core import threads
    record = threads.configure(explicit=1 if policy == "new-1" else None, explicit_source="flag")
import torch
from torch.func import functional_call, grad, vmap
from pate.teachers.models import build_model
if policy == "new-interop1":
    torch.set_num_interop_threads(1)
torch.manual_seed(0)
loss_fn = torch.nn.functional.cross_entropy

def vmapped(name, shape, teachers):
    net = build_model(name, input_shape=shape, num_classes=10)
    params = {k: v.detach().unsqueeze(0).repeat(teachers, *[1] * v.dim())
              for k, v in net.named_parameters()}
    x, y = torch.randn(teachers, 32, *shape), torch.randint(0, 10, (teachers, 32))
    def loss(p, xb, yb):
        return loss_fn(functional_call(net, p, (xb,)), yb)
    grads = vmap(grad(loss))
    def step():
        g = grads(params, x, y)
        for k in params:
            params[k].sub_(0.01 * g[k])
    return step

def fixmatch28():
    net = build_model("cnn28", input_shape=(1, 28, 28), num_classes=10)
    net = net.to(memory_format=torch.channels_last)
    ema = [p.detach().clone() for p in net.parameters()]
    opt = torch.optim.SGD(net.parameters(), lr=0.03, momentum=0.9, nesterov=True,
                          weight_decay=5e-4)
    weak, train = torch.rand(96, 1, 28, 28), torch.rand(128, 1, 28, 28)
    y = torch.randint(0, 10, (128,))
    def step():
        with torch.no_grad():
            net(weak).softmax(dim=1).max(dim=1)
        opt.zero_grad()
        loss_fn(net(train), y).backward()
        opt.step()
        with torch.no_grad():
            torch._foreach_mul_(ema, 0.99)
            torch._foreach_add_(ema, [p.detach() for p in net.parameters()], alpha=0.01)
    return step

if workload == "student":
    net = build_model("cnn8", input_shape=(1, 8, 8), num_classes=10)
    opt = torch.optim.SGD(net.parameters(), lr=0.03, momentum=0.9)
    x, y = torch.randn(64 + 6 * 64, 1, 8, 8), torch.randint(0, 10, (64 + 6 * 64,))
    def step():
        opt.zero_grad()
        loss_fn(net(x), y).backward()
        opt.step()
elif workload == "teachers":
    step = vmapped("cnn8", (1, 8, 8), 10)
elif workload == "teachers_linear":
    step = vmapped("linear", (81, 7, 7), 50)
else:
    step = fixmatch28()
for _ in range(5):
    step()
limit = float(sys.argv[4])
done, t0 = 0, time.perf_counter()
while done < steps and (done == 0 or time.perf_counter() - t0 < limit):
    step()
    done += 1
seconds = time.perf_counter() - t0
print(json.dumps({"steps": done, "seconds": seconds, "steps_per_s": done / seconds,
                  "threads": torch.get_num_threads(), "choice": record}))
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
    """The child's environment: no thread settings of the caller's, the policy's wait settings
    (:data:`WAIT_ENV`), this checkout first on the path."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    env.update(WAIT_ENV.get(policy, {}))
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


def ratios(rate: dict, *, base: str = "old") -> dict:
    """From ``{workload: {policy: {condition: steps/s}}}``: ``slowdown_vs_idle`` (how many times
    longer a step takes beside the neighbours than with none, same policy; only where ``idle``
    was measured) and ``speedup_vs_<base>`` (the policy's steps/s over ``base``'s, same
    condition)."""
    out: dict = {"slowdown_vs_idle": {}, f"speedup_vs_{base}": {}}
    for w, per_policy in rate.items():
        for p, per_condition in per_policy.items():
            if "idle" in per_condition:
                out["slowdown_vs_idle"].setdefault(w, {})[p] = {
                    c: round(per_condition["idle"] / v, 2) for c, v in per_condition.items()
                }
            if base in per_policy:
                out[f"speedup_vs_{base}"].setdefault(w, {})[p] = {
                    c: round(v / per_policy[base][c], 2) for c, v in per_condition.items()
                }
    return out


def measure_condition(
    condition: str, workloads, policies, *, steps: int, limit: float, repeats: int
) -> dict:
    """``{workload: {policy: steps/s}}`` beside ``condition``'s neighbours: ``repeats`` rounds,
    each policy once per round (so a change of the machine's load hits every policy alike), the
    median kept."""
    samples: dict = {}
    procs = _neighbours(condition)
    try:
        for workload in workloads:
            for _ in range(repeats):
                for policy in policies:
                    r = _time(policy, workload, steps, limit)
                    samples.setdefault(workload, {}).setdefault(policy, []).append(r)
                    print(
                        f"{condition:7s} {workload:15s} {policy:12s} {r['steps_per_s']:7.1f} "
                        f"steps/s ({r['steps']} steps in {r['seconds']:.2f} s, "
                        f"{r['threads']} threads)",
                        flush=True,
                    )
    finally:
        _stop(procs)
    return {
        w: {
            p: round(statistics.median(r["steps_per_s"] for r in runs), 2) for p, runs in ps.items()
        }
        for w, ps in samples.items()
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
    parser.add_argument("--policies", nargs="+", choices=POLICIES, default=["old", "new", "new-1"])
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--conditions", nargs="+", choices=CONDITIONS, default=list(CONDITIONS))
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
    for condition in args.conditions:
        loads[condition] = list(os.getloadavg())
        measured = measure_condition(
            condition,
            args.workloads,
            args.policies,
            steps=args.steps,
            limit=args.max_seconds,
            repeats=args.repeats,
        )
        for w, per_policy in measured.items():
            for p, value in per_policy.items():
                rate.setdefault(w, {}).setdefault(p, {})[condition] = value
    doc = {
        "machine": facts,
        "load_average_per_condition": loads,
        "max_steps": args.steps,
        "max_seconds": args.max_seconds,
        "repeats": args.repeats,
        "steps_per_s": rate,
        **ratios(rate, base=args.policies[0]),
        "command": "python benchmarks/threads.py " + " ".join(argv or sys.argv[1:]),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    for key in ("slowdown_vs_idle", f"speedup_vs_{args.policies[0]}"):
        for w, per_policy in doc[key].items():
            for p, per_condition in per_policy.items():
                print(
                    f"{key} {w:15s} {p:12s} "
                    + "  ".join(f"{c} {v:5.2f}x" for c, v in per_condition.items())
                )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
