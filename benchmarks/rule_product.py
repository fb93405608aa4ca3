"""A class-means student combined with its own labelling rule (a product of experts), measured.

A class-means run (``configs/fashion_mnist_class_means.toml``) publishes its labelling rule's
class scores on the public items (``label_scores.npy``) beside the public embeddings
(``knn_embeddings.npz``). Both rules of :mod:`pate.class_means` are affine in a public map of the
embedding e: the logistic rule in the clipped, scaled u(e), LDA in the whitened w(e). So the
rule's coefficients are the exact least-squares solution of

    scores = [x(public), 1] @ coef        (x = u or w; n public rows, d + 1 unknowns per class)

and this script recovers them (refused unless the fit is exact to 1e-8 relative, which needs
n >= d + 1 public rows of full rank). Nothing private is read: the rule and the student are
both post-processing of the one release and of public data, so combining them costs no
privacy. The combined model predicts

    argmax_j  log p_student(j | x) + log softmax(T * rule scores(e(x)))_j

for each temperature T of ``--temperatures`` (1, and 10 = the config's soft-target temperature).
The evaluation items are embedded by the run's own front-end (ScatterNet, standardised with
public statistics, PCA of the public rows; recomputed here from the public split and checked
against the run's public embeddings). For each run directory it prints the accuracy of the
student, of the rule and of the products on the evaluation split.

    .venv/bin/python benchmarks/rule_product.py runs/u-r3/class-means-eps1 [...] --json OUT

Run on demand, never as a test (about a minute for the front-end, then seconds per run). The
combination was looked at on private data before this script existed (docs/benchmarks.md
lists it); the script itself reads only the run directories, the public and the evaluation
split.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np

#: the largest relative residual of the least-squares recovery that counts as exact
EXACT = 1e-8


def rule_features(embeddings, geometry, rule: str) -> np.ndarray:
    """x(e) of ``rule`` for each row: the clipped, scaled u(e) ("logistic") or the whitened
    w(e) ("lda"), both from :mod:`pate.class_means` with the public ``geometry``."""
    from pate.class_means import LinearLabeller

    e = np.asarray(embeddings, dtype=np.float64)
    if rule == "lda":
        return geometry.whiten(e)
    if rule == "logistic":
        d = geometry.scale.shape[0]
        return LinearLabeller(weights=np.eye(d), bias=np.zeros(d), geometry=geometry).scores(e)
    raise ValueError(f"rule must be 'lda' or 'logistic', got {rule!r}")


def recover_rule(public, scores, *, rule: str):
    """The affine rule behind ``scores`` (n, m) on the ``public`` embeddings (n, d): a function
    from embeddings to class scores. Refused (ValueError) unless the least-squares fit
    reproduces ``scores`` to ``EXACT`` relative: scores that no affine rule of this kind gives,
    or too few public rows to pin it down."""
    from pate.class_means import public_geometry

    public = np.asarray(public, dtype=np.float64)
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 2 or scores.shape[0] != public.shape[0] or not np.all(np.isfinite(scores)):
        raise ValueError(f"scores must be finite, one row per public embedding ({public.shape[0]}); "
                         f"got shape {scores.shape}")
    geometry = public_geometry(public)
    design = np.hstack([rule_features(public, geometry, rule), np.ones((len(public), 1))])
    if np.linalg.matrix_rank(design) < design.shape[1]:
        raise ValueError(f"the {len(public)} public rows do not determine a rule in "
                         f"{design.shape[1] - 1} dims (rank {np.linalg.matrix_rank(design)})")
    coef, *_ = np.linalg.lstsq(design, scores, rcond=None)
    residual = float(np.abs(design @ coef - scores).max() / max(np.abs(scores).max(), 1e-300))
    if residual > EXACT:
        raise ValueError(f"the scores are not an affine {rule} rule of the public embeddings "
                         f"(relative residual {residual:.3g} > {EXACT:g})")

    def rule_scores(embeddings):
        return np.hstack([rule_features(embeddings, geometry, rule),
                          np.ones((len(embeddings), 1))]) @ coef

    return rule_scores


def product_predict(student_proba, rule_scores, *, temperature: float) -> np.ndarray:
    """argmax_j of log p_student + log softmax(temperature * rule scores), ties to the lower class."""
    from scipy.special import log_softmax

    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    logp = np.log(np.clip(np.asarray(student_proba, dtype=np.float64), 1e-300, None))
    return np.argmax(logp + log_softmax(temperature * np.asarray(rule_scores), axis=1), axis=1)


def _checked_runs(parser, run_dirs):
    """(path, config) per run directory, refused before any work unless each is a finished
    class-means run with a PCA front-end."""
    runs = []
    for name in run_dirs:
        path = pathlib.Path(name)
        missing = [f for f in ("config.json", "knn_embeddings.npz", "label_scores.npy",
                               "labels.npy", "student.pt") if not (path / f).is_file()]
        if missing:
            parser.error(f"run directory {name!r} has no {', '.join(missing)} (a finished "
                         "class-means run: `pate run --config fashion-mnist-class-means`)")
        config = json.loads((path / "config.json").read_text())
        mechanism = config.get("aggregator", {}).get("mechanism")
        if mechanism != "class-means":
            parser.error(f"run directory {name!r}: mechanism {mechanism!r}, not 'class-means'")
        knn = config.get("knn", {})
        if knn.get("features", "scatternet") not in ("scatternet", "none"):
            parser.error(f"run directory {name!r}: [knn] features = {knn.get('features')!r}; "
                         "only the PCA front-ends ('scatternet', 'none') are recomputed here")
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

    from pate.student.train import Student
    from pate.teachers.data import load_pate_data
    from pate.teachers.features import Standardizer, public_pca_embedding, scatter

    torch.set_num_threads(2)
    fronts, rows = {}, []
    for path, config in runs:
        knn = config.get("knn", {})
        key = (config["data"]["name"], knn.get("features", "scatternet"), int(knn.get("dims", 64)))
        if key not in fronts:
            data = load_pate_data(key[0], root=config["data"].get("root"))
            pub, ev = data.public.x, data.evaluation.x
            if key[1] == "scatternet":
                raw_pub, raw_ev = scatter(pub), scatter(ev)
                norm = Standardizer.fit(raw_pub)
                pub, ev = norm.transform(raw_pub), norm.transform(raw_ev)
            fronts[key] = (data, *public_pca_embedding(pub, ev, dims=key[2]))
        data, pub_emb, ev_emb = fronts[key]
        saved = np.load(path / "knn_embeddings.npz", allow_pickle=False)["public"]
        if saved.shape != pub_emb.shape or np.abs(saved - pub_emb).max() > 1e-4:
            print(f"{path}: its public embeddings differ from the recomputed front-end; skipped",
                  file=sys.stderr)
            continue
        labels = np.load(path / "labels.npy", allow_pickle=False)
        scores = np.load(path / "label_scores.npy", allow_pickle=False)
        answered = labels >= 0
        rule_name = knn.get("rule", "lda")
        rule = recover_rule(saved[answered], scores[answered], rule=rule_name)
        rule_ev = rule(ev_emb)
        student = Student.load(path / "student.pt")
        proba = student.predict_proba(data.evaluation.x)
        y = np.asarray(data.evaluation.y)
        aggregate = json.loads((path / "aggregate.json").read_text())
        row = {"run_dir": str(path), "eps": aggregate.get("eps_data_independent"),
               "rule": rule_name,
               "label_accuracy": float(np.mean(labels[answered] == np.asarray(data.public.y)[
                   :len(labels)][answered])),
               "student": float(np.mean(proba.argmax(axis=1) == y)),
               "labelling_rule": float(np.mean(rule_ev.argmax(axis=1) == y))}
        for t in args.temperatures:
            row[f"product_t{t:g}"] = float(np.mean(
                product_predict(proba, rule_ev, temperature=t) == y))
        rows.append(row)
        print(f"{str(path):34s} eps {row['eps']:.4f}  labels {row['label_accuracy']:.4f}  "
              f"student {row['student']:.3f}  rule {row['labelling_rule']:.3f}  "
              + "  ".join(f"product T={t:g} {row[f'product_t{t:g}']:.3f}"
                          for t in args.temperatures), flush=True)
    if args.json:
        import datetime
        import platform

        meta = {"command": "python benchmarks/rule_product.py " + " ".join(
                    argv if argv is not None else sys.argv[1:]),
                "date": datetime.date.today().isoformat(),
                "machine": f"{platform.machine()}, {platform.python_version()}, torch "
                           f"{torch.__version__}, numpy {np.__version__}",
                "split": "accuracies on the evaluation split (the last 1000 Fashion-MNIST test "
                         "images); label_accuracy on the public items' true labels",
                "tuned_on": "the product of experts and its two temperatures were first looked "
                            "at in a development check on 10000 PRIVATE training images and the "
                            "evaluation split (benchmarks/utility.py TUNED_ON); both "
                            "temperatures are listed, neither is chosen"}
        pathlib.Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
