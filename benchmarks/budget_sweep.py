"""Student accuracy against the privacy budget, reusing one finished run's teachers and votes.

For each budget, copies the run directory's partition, teachers and votes into
``<run-dir>-eps<E>/``, sets ``[privacy] budget_eps = E`` (the ledger is off for these runs), and
resumes the pipeline from the aggregate stage: noisy answers until the budget stops them, the
student, the analysis (with the sanitized release) and the report -- the same code as ``pate run``.

    .venv/bin/python benchmarks/budget_sweep.py --run-dir runs/fashion-mnist --budgets 1 2 4 8

Prints one row per budget: asked/answered queries, label accuracy of the answers, the
data-independent, sanitized and guarantee epsilons (delta from the config) and the student's
accuracy on the evaluation split. Run on demand (about a minute per budget on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True, help="a finished `pate run` directory")
    parser.add_argument("--budgets", type=float, nargs="+", required=True)
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args()

    from pate.run import rundir
    from pate.run.config import build
    from pate.run.pipeline import Pipeline, fork_run

    source = pathlib.Path(args.run_dir)
    base = json.loads((source / rundir.CONFIG).read_text())
    rows = []
    for budget in args.budgets:
        config = json.loads(json.dumps(base))
        config["privacy"]["budget_eps"] = float(budget)
        config["privacy"]["ledger"] = False
        config["run"]["run_dir"] = str(source.parent / f"{source.name}-eps{budget:g}")
        config = build(config)
        fork_run(source, config)
        t0 = time.perf_counter()
        report = Pipeline(config, resume=True, progress=False).run(internal=True)
        p, q, u = report["privacy"], report["queries"], report["utility"]
        row = {
            "budget_eps": budget,
            "asked": q["asked"],
            "answered": q["answered"],
            "label_accuracy": u["label_accuracy_answered"],
            "eps_data_independent": p["eps_data_independent"],
            "eps_sanitized": p["eps_sanitized"],
            "eps_guarantee": p["eps_guarantee"],
            "student_accuracy": u["student_accuracy"],
            "delta": p["delta"],
            "seconds": round(time.perf_counter() - t0, 1),
        }
        rows.append(row)
        print(
            f"budget {budget:g}: asked {row['asked']}, answered {row['answered']} (label accuracy "
            f"{row['label_accuracy']:.3f}); eps data-independent {row['eps_data_independent']:.3f}, "
            f"sanitized {row['eps_sanitized']:.3f}, guarantee {row['eps_guarantee']:.3f} "
            f"(delta {row['delta']:g}); student accuracy {row['student_accuracy']:.4f}; "
            f"{row['seconds']:.0f} s",
            flush=True,
        )
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=2))
    print(json.dumps(rows), file=sys.stderr)


if __name__ == "__main__":
    main()
