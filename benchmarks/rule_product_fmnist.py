"""A class-means student combined with its own labelling rule (a product of experts), measured.

A class-means run (``configs/fashion_mnist_class_means.toml``) publishes its labelling rule's
class scores on the public items (``rundir.LABEL_SCORES``) and keeps the embeddings in its
``private/`` folder (``rundir.KNN_EMBEDDINGS``; this script reads only its ``public`` member, the
public items' embeddings). Both rules of :mod:`pate.core.mean_release` are affine in a public map of the
embedding e: the logistic rule in the clipped, scaled u(e), LDA in the whitened w(e). So the
rule's coefficients are the exact least-squares solution of

    scores = [x(public), 1] @ coef        (x = u or w; n public rows, d + 1 unknowns per class)

and this script recovers them with ``pate.core.labelling_rules.recover_rule`` (refused unless the fit is
exact to 1e-8 relative, which needs n >= d + 1 public rows of full rank). Nothing private is
read: the rule and the student are both post-processing of the one release and of public data,
so combining them costs no privacy. A run with ``[student] combine_with_rule = true`` releases
this product itself (``pate.student.rule_product``); this script measures it on runs whose
student was saved alone (it skips the others). The combined model predicts

    argmax_j  log p_student(j | x) + log softmax(T * rule scores(e(x)))_j

for each temperature T of ``--temperatures`` (1, and 10 = the config's soft-target temperature).
The evaluation items are embedded by the run's own front-end (ScatterNet, standardised with
public statistics, PCA of the public rows; recomputed here from the public split and checked
against the run's public embeddings). For each run directory it prints the accuracy of the
student, of the rule and of the products on the evaluation split.

    .venv/bin/python benchmarks/rule_product_fmnist.py runs/u-r3/class-means-eps1 [...] --json OUT

Run on demand, never as a test (about a minute for the front-end, then seconds per run). The
combination was looked at on private data before this script existed (docs/benchmarks.md
lists it); the script itself reads only the run directories (of their private files, the public
embeddings and the aggregate summary's eps, ``rundir.AGGREGATE``), the public and the evaluation
split.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np


def _checked_runs(parser, run_dirs):
    """(path, config) per run directory, refused before any work unless each is a finished
    class-means run with a PCA front-end."""
    from pate.run import rundir  # the run directory's file names

    runs = []
    for name in run_dirs:
        path = pathlib.Path(name)
        missing = [
            f
            for f in (
                rundir.CONFIG,
                rundir.KNN_EMBEDDINGS,
                rundir.LABEL_SCORES,
                rundir.LABELS,
                rundir.STUDENT_WEIGHTS,
            )
            if not (path / f).is_file()
        ]
        if missing:
            parser.error(
                f"run directory {name!r} has no {', '.join(missing)} (a finished "
                "class-means run: `pate run --config fashion-mnist-class-means`)"
            )
        config = json.loads((path / rundir.CONFIG).read_text())
        mechanism = config.get("aggregator", {}).get("mechanism")
        if mechanism != "class-means":
            parser.error(f"run directory {name!r}: mechanism {mechanism!r}, not 'class-means'")
        knn = config.get("knn", {})
        if knn.get("features", "scatternet") not in ("scatternet", "none"):
            parser.error(
                f"run directory {name!r}: [knn] features = {knn.get('features')!r}; "
                "only the PCA front-ends ('scatternet', 'none') are recomputed here"
            )
        runs.append((path, config))
    return runs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="finished class-means runs")
    parser.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 10.0])
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    for t in args.temperatures:
        if not t > 0:
            parser.error(f"--temperatures must be > 0, got {t}")
    runs = _checked_runs(parser, args.run_dirs)

    import torch

    from pate.core.labelling_rules import recover_rule
    from pate.run import rundir
    from pate.student.rule_product import product_log_proba
    from pate.student.train import Student
    from pate.teachers.data import load_pate_data
    from pate.teachers.public_embedding import PublicFrontEnd

    torch.set_num_threads(2)
    fronts, rows = {}, []
    for path, config in runs:
        knn = config.get("knn", {})
        key = (config["data"]["name"], knn.get("features", "scatternet"), int(knn.get("dims", 64)))
        if key not in fronts:
            data = load_pate_data(key[0], root=config["data"].get("root"))
            front, public = PublicFrontEnd.fit_transform(
                data.public.x, features=key[1], dims=key[2]
            )
            fronts[key] = (data, public, front.embed(data.evaluation.x))
        data, pub_emb, ev_emb = fronts[key]
        saved = np.load(path / rundir.KNN_EMBEDDINGS, allow_pickle=False)["public"]
        if saved.shape != pub_emb.shape or np.abs(saved - pub_emb).max() > 1e-4:
            print(
                f"{path}: its public embeddings differ from the recomputed front-end; skipped",
                file=sys.stderr,
            )
            continue
        labels = np.load(path / rundir.LABELS, allow_pickle=False)
        scores = np.load(path / rundir.LABEL_SCORES, allow_pickle=False)
        answered = labels >= 0
        rule_name = knn.get("rule", "lda")
        rule_ev = recover_rule(
            saved, np.where(answered[:, None], scores, np.nan), rule=rule_name
        ).scores(ev_emb)
        student = Student.load(path / rundir.STUDENT_WEIGHTS)
        if student.rule_product_ is not None:
            print(
                f"{path}: its student is already released times its rule "
                "([student] combine_with_rule); its student metrics have both; skipped",
                file=sys.stderr,
            )
            continue
        proba = student.predict_proba(data.evaluation.x)
        y = np.asarray(data.evaluation.y)
        aggregate = json.loads((path / rundir.AGGREGATE).read_text())
        row = {
            "run_dir": str(path),
            "eps": aggregate.get("eps_data_independent"),
            "rule": rule_name,
            "label_accuracy": float(
                np.mean(labels[answered] == np.asarray(data.public.y)[: len(labels)][answered])
            ),
            "student": float(np.mean(proba.argmax(axis=1) == y)),
            "labelling_rule": float(np.mean(rule_ev.argmax(axis=1) == y)),
        }
        for t in args.temperatures:
            row[f"product_t{t:g}"] = float(
                np.mean(product_log_proba(proba, rule_ev, temperature=t).argmax(axis=1) == y)
            )
        rows.append(row)
        print(
            f"{str(path):34s} eps {row['eps']:.4f}  labels {row['label_accuracy']:.4f}  "
            f"student {row['student']:.3f}  rule {row['labelling_rule']:.3f}  "
            + "  ".join(f"product T={t:g} {row[f'product_t{t:g}']:.3f}" for t in args.temperatures),
            flush=True,
        )
    if args.json:
        import datetime
        import platform

        meta = {
            "command": "python benchmarks/rule_product_fmnist.py "
            + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": datetime.date.today().isoformat(),
            "machine": f"{platform.machine()}, {platform.python_version()}, torch "
            f"{torch.__version__}, numpy {np.__version__}",
            "split": "accuracies on the evaluation split (the last 1000 Fashion-MNIST test "
            "images); label_accuracy on the public items' true labels",
            "tuned_on": "the product of experts and its two temperatures were first looked "
            "at in a development check on 10000 PRIVATE training images and the "
            "evaluation split (benchmarks/utility.py TUNED_ON); both "
            "temperatures are listed; the class-means config uses 10, the soft "
            "targets' temperature, which also scored higher",
        }
        pathlib.Path(args.json).write_text(
            json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n"
        )
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
