"""Teachers that earn their votes, and a release with more dimensions (issue #52), measured on CPU.

The held-out protocol of ``benchmarks/release_ceiling_fmnist.py`` (private = the FIRST 50000
training images, scored on the LAST 10000; public = the first 9000 test images) over the
class-means config's features: ScatterNet, standardised with public statistics, the public
principal axes, clipped and scaled with the public geometry (u, ||u|| <= 1). Every teacher is a
linear model on those features, trained on its shard of the private rows with scikit-learn or
L-BFGS; no pipeline run, no CNN: these measure what the votes can carry, not a shipped config.

* ``teachers``: T teachers (one disjoint shard of the 50000 each) on the first ``dims``
  public axes (``u`` times sqrt(512), so the ridge C means the same at every width). Their mean
  accuracy and the plurality of their votes on the held-out and public images, and for each
  Confident-GNMax setting ``eps/threshold/sigma1/sigma2``: the answers a target eps buys on the
  public items (the utility benchmark's planner, ``utility_planning.plan_queries``: the better of
  the sanitized release and the data-independent stop, one planning draw), how many are right,
  and a logistic-regression student on the answered items' features (C = 0.05) on the held-out
  images.
* ``hybrid``: the class-means release at eps 1 labels the public items with its logistic rule;
  on its 10 / 20 / 30 % least certain items (smallest gap between its two best class scores),
  the rule's accuracy against the teachers' plurality, and the teachers' median vote gap
  there. Confident GNMax answering only there pays off only if the teachers are right more
  often than the rule where it is unsure, with gaps large enough to be cheap.
* ``prior teachers``: teachers that start from the eps-1 release's rule (public once released:
  post-processing) and minimise their shard's cross entropy plus lam / 2 ||W - W_rule||^2:
  their plurality against the rule alone (before any cost of the votes).
* ``dims``: the release's logistic rule at 512 / 1024 / 2048 public axes, from the exact class
  sums and at eps 1 / 2 / 4 (two draws): whether a wider release keeps gaining with eps.

Run on demand, never as a test (about 15 minutes on 2 cores with the feature cache warm):

    .venv/bin/python benchmarks/votes_fmnist.py --cache runs/.feature-cache \\
        --out benchmarks/results/votes_fmnist.json

Every setting here (teachers, dims, C, lam, the aggregator settings) was chosen looking at the
held-out or the public images' labels: the rows are measurements, not tuned results.
"""

from __future__ import annotations

import json
import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the benchmarks beside this script
DELTA, COUNT_WEIGHT, BASE_DIMS = 1e-5, 0.3, 512
#: (teachers, dims, C, aggregator settings "eps/threshold/sigma1/sigma2")
TEACHER_DESIGNS = (
    (250, 128, 0.1, ("2/200/150/40", "2/190/120/60")),
    (1000, 32, 1.0, ("1/700/400/100", "2/700/400/100", "2/600/300/150")),
)
PRIOR_RIDGES = (1e-2, 1e-3)
WIDE_DIMS = (512, 1024, 2048)


def shards(n: int, teachers: int, seed: int = 0) -> list[np.ndarray]:
    """``teachers`` disjoint shards of ``range(n)``, dealt at random."""
    return np.array_split(np.random.default_rng(seed).permutation(n), teachers)


def vote_counts(predictions, num_classes: int) -> np.ndarray:
    """(items, classes) counts of the teachers' ``predictions`` (teachers, items)."""
    predictions = np.asarray(predictions)
    counts = np.zeros((predictions.shape[1], num_classes), dtype=np.int64)
    for row in predictions:
        counts[np.arange(len(row)), row] += 1
    return counts


def prior_logistic(u, y, weights, bias, *, lam: float):
    """argmin_W,b mean cross entropy of (W u + b) on (u, y) + lam / 2 ||W - weights||^2,
    from (weights, bias): a teacher that starts from the released rule. The ridge towards
    ``weights`` is the plain ridge with the moments shifted by lam * weights, so this is
    :func:`release_ceiling_fmnist.fit_objective` over the labelled rows."""
    from release_ceiling_fmnist import fit_objective

    m, d = weights.shape
    onehot = np.eye(m)[y]
    theta = fit_objective(
        u,
        onehot.T @ u / len(u) + lam * np.asarray(weights),
        onehot.mean(axis=0),
        ridge=lam,
        start=np.concatenate([np.ravel(weights), bias]),
    )
    return theta[: m * d].reshape(m, d), theta[m * d :]


def _answers(votes, setting: str):
    import utility_planning

    target, threshold, sigma1, sigma2 = map(float, setting.split("/"))
    aggregator = {
        "mechanism": "confident-gnmax",
        "threshold": threshold,
        "sigma1": sigma1,
        "sigma2": sigma2,
    }
    release = utility_planning.release_parameters(target, delta=DELTA, conversion="tight")
    plan = utility_planning.plan_queries(
        votes,
        target=target,
        release=release,
        delta=DELTA,
        conversion="tight",
        seed=1,
        aggregator=aggregator,
    )
    drawn = utility_planning.planning_draw(votes, seed=1, aggregator=aggregator)
    answered = np.flatnonzero(drawn.answered_mask)[: plan["planned_answered"]]
    return plan["route"], answered, drawn.labels[answered]


def _release_rule(sums, geometry, public, eps, seed):
    from pate.analysis.class_means import calibrate_class_means_sigma
    from pate.core.labelling_rules import public_logistic
    from pate.core.mean_release import release_from_statistic

    if eps is None:
        noisy, sigma = sums, 1e-12
    else:
        sigma = calibrate_class_means_sigma(
            eps=eps, delta=DELTA, count_weight=COUNT_WEIGHT, conversion="tight"
        )
        noisy = sums + sigma * np.random.default_rng(seed).standard_normal(sums.shape)
    release = release_from_statistic(
        noisy, geometry=geometry, sigma=sigma, count_weight=COUNT_WEIGHT
    )
    return public_logistic(release, public)


def measure(cache_dir=None) -> dict:
    import warnings

    from release_ceiling_fmnist import embeddings
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    from pate.core.mean_release import class_sums, clipped_scaled, public_geometry

    warnings.filterwarnings("ignore", category=ConvergenceWarning)
    public, private, y, held, y_held = embeddings(cache_dir, BASE_DIMS)
    from pate.teachers.data import load_pate_data

    y_public = np.asarray(load_pate_data("fashion-mnist").public.y)
    geometry = public_geometry(public)
    m = int(y.max()) + 1
    u_priv, u_held, u_pub = (
        clipped_scaled(np.asarray(a, np.float64), geometry) for a in (private, held, public)
    )
    sums = class_sums(private, y, num_classes=m, geometry=geometry, count_weight=COUNT_WEIGHT)
    rule = _release_rule(sums, geometry, public, 1.0, seed=0)
    rule_public = rule.scores(public)
    results: dict = {"teachers": [], "hybrid": [], "prior_teachers": [], "dims": []}

    def log(part, row):
        results[part].append(row)
        print(part, json.dumps(row), file=sys.stderr, flush=True)

    scale = np.sqrt(BASE_DIMS)
    for teachers, dims, c, settings in TEACHER_DESIGNS:
        parts = [a[:, :dims] * scale for a in (u_priv, u_held, u_pub)]
        fitted = [
            LogisticRegression(C=c, max_iter=300).fit(parts[0][s], y[s])
            for s in shards(len(y), teachers)
        ]
        on_held = np.stack([f.predict(parts[1]) for f in fitted])
        votes = vote_counts(np.stack([f.predict(parts[2]) for f in fitted]), m)
        design = f"{teachers} teachers, {dims} axes, C {c:g}"
        row = {
            "design": design,
            "teacher_accuracy_holdout": round(float(np.mean(on_held == y_held)), 4),
            "plurality_holdout": round(
                float(np.mean(vote_counts(on_held, m).argmax(1) == y_held)), 4
            ),
            "plurality_public": round(float(np.mean(votes.argmax(1) == y_public)), 4),
            "answers": [],
        }
        for setting in settings:
            route, answered, labels = _answers(votes, setting)
            student = LogisticRegression(C=0.05, max_iter=500).fit(u_pub[answered] * scale, labels)
            row["answers"].append(
                {
                    "setting": setting,
                    "route": route,
                    "answered": int(answered.size),
                    "label_accuracy": round(float(np.mean(labels == y_public[answered])), 4),
                    "student_holdout": round(float(student.score(u_held * scale, y_held)), 4),
                }
            )
        log("teachers", row)
        ordered = np.sort(rule_public, axis=1)
        unsure = np.argsort(ordered[:, -1] - ordered[:, -2])
        gaps = np.diff(np.sort(votes, axis=1)[:, -2:], axis=1)[:, 0]
        for fraction in (0.1, 0.2, 0.3):
            items = unsure[: int(fraction * len(unsure))]
            log(
                "hybrid",
                {
                    "design": design,
                    "least_certain_fraction": fraction,
                    "rule_accuracy": round(
                        float(np.mean(rule_public[items].argmax(1) == y_public[items])), 4
                    ),
                    "teachers_accuracy": round(
                        float(np.mean(votes[items].argmax(1) == y_public[items])), 4
                    ),
                    "median_vote_gap": float(np.median(gaps[items])),
                },
            )

    base = {"rule_holdout": round(float(np.mean(rule.predict(held) == y_held)), 4)}
    for lam in PRIOR_RIDGES:
        on_held = []
        for s in shards(len(y), 250):
            w, b = prior_logistic(u_priv[s], y[s], rule.weights, rule.bias, lam=lam)
            on_held.append((u_held @ w.T + b).argmax(1))
        on_held = np.stack(on_held)
        log(
            "prior_teachers",
            {
                **base,
                "teachers": 250,
                "lam": lam,
                "teacher_accuracy_holdout": round(float(np.mean(on_held == y_held)), 4),
                "plurality_holdout": round(
                    float(np.mean(vote_counts(on_held, m).argmax(1) == y_held)), 4
                ),
            },
        )

    for dims in WIDE_DIMS:
        wide_public, wide_private, _, wide_held, _ = embeddings(cache_dir, dims)
        wide_geometry = public_geometry(wide_public)
        wide_sums = class_sums(
            wide_private, y, num_classes=m, geometry=wide_geometry, count_weight=COUNT_WEIGHT
        )
        row = {"dims": dims}
        for eps in (None, 1.0, 2.0, 4.0):
            draws = [0] if eps is None else [0, 1]
            accuracy = [
                np.mean(
                    _release_rule(
                        wide_sums, wide_geometry, wide_public, eps, seed=1000 * draw + 7
                    ).predict(wide_held)
                    == y_held
                )
                for draw in draws
            ]
            row["exact" if eps is None else f"eps {eps:g}"] = round(float(np.mean(accuracy)), 4)
        log("dims", row)
    return results


def main(argv=None) -> int:
    from release_ceiling_fmnist import run_script

    return run_script(
        measure,
        doc=__doc__,
        script="votes_fmnist.py",
        tuned_on="every setting here (teachers, dims, C, lam, aggregator settings) looked at the held-out or public images' labels",
        argv=argv,
    )


if __name__ == "__main__":
    sys.exit(main())
