"""Features learned on the public images alone (issue #52), measured on CPU: what single-layer
k-means patch features (Coates, Ng & Lee 2011), fitted on the public split only, add to the
ScatterNet features of the class-means release.

The held-out protocol of ``benchmarks/release_ceiling_fmnist.py`` (private = the FIRST 50000
training images, scored on the LAST 10000; public = the first 9000 test images, no labels read).
The patch features are the library's (:mod:`pate.teachers.patch_features`, the
``[knn] features = "scatternet+patches"`` front-end): 6 x 6 patches, K = 400 centroids fitted on
the public images only, 1600 features; nothing about them reads a private image or any label.
Each feature set is standardised with public statistics (ScatterNet per channel, as the
pipeline does; the patch features per column), concatenated, projected on the public principal
axes (512 or 1024), clipped and scaled with the public geometry. Rows per feature set and
width:

* ``private logistic``: multinomial logistic regression on the private rows (ridge 1e-4,
  non-private): the linear ceiling, which bounds DP-SGD on the same features too;
* ``release exact``: the class-means release's logistic rule from the exact class sums;
* ``release eps E`` (two draws): the release at the config's count weight, noise calibrated to
  (E, 1e-5), its logistic rule;
* ``dpsgd``: DP-SGD on the same private rows with Tramer & Boneh's recipe as
  ``benchmarks/dpsgd_linear.py`` runs it (held-out protocol, tight conversion, two seeds at eps
  2 and 4), on their group-normalised ScatterNet features and with the patch features appended
  (normalised per image, as group normalisation does): whether the features that lift the
  release lift DP-SGD too. The recipe is theirs as published, not tuned to the wider features.

Run on demand, never as a test (about 10 minutes on 2 cores with the feature cache warm):

    .venv/bin/python benchmarks/public_features_fmnist.py --cache runs/.feature-cache \\
        --out benchmarks/results/public_features_fmnist.json

Every setting here (patch size, K, the widths) was chosen looking at the held-out images'
labels: the rows are measurements, not tuned results.
"""

from __future__ import annotations

import json
import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the benchmarks beside this script
PRIVATE, DELTA, COUNT_WEIGHT, DRAWS = 50_000, 1e-5, 0.3, 2
WIDTHS = (512, 1024)


def _scatter(data, cache_dir):
    from pate.teachers import feature_cache
    from pate.teachers.features import Standardizer, scatter_features

    cache = None if cache_dir is None else feature_cache.FeatureCache(pathlib.Path(cache_dir))
    raw_public = scatter_features(np.asarray(data.public.x, np.float32), cache=cache)
    raw_private = scatter_features(np.asarray(data.private.x, np.float32), cache=cache)
    standardizer = Standardizer.fit(raw_public)

    def flat(raw):
        return np.concatenate(
            [standardizer.transform(b).reshape(len(b), -1) for b in raw.chunks()]
        ).astype(np.float32)

    return flat(raw_public), flat(raw_private)


def measure(cache_dir=None) -> dict:
    from release_ceiling_fmnist import accuracy_of, fit_objective

    from pate.analysis.class_means import calibrate_class_means_sigma
    from pate.core.labelling_rules import public_logistic
    from pate.core.mean_release import (
        class_sums,
        clipped_scaled,
        public_geometry,
        release_from_statistic,
    )
    from pate.teachers.data import load_pate_data
    from pate.teachers.patch_features import PatchFeatures
    from pate.teachers.public_embedding import PublicPCA

    data = load_pate_data("fashion-mnist")
    y_all = np.asarray(data.private.y)
    y, y_held = y_all[:PRIVATE], y_all[PRIVATE:]
    scatter_public, scatter_private = _scatter(data, cache_dir)
    patches, patches_public = PatchFeatures.fit_transform(np.asarray(data.public.x, np.float32))
    patches_private_raw = patches.activations(np.asarray(data.private.x, np.float32))
    patches_private = (patches_private_raw - patches.column_mean) / patches.column_std
    sets = {
        "scatternet": (scatter_public, scatter_private),
        "scatternet + public patches": (
            np.hstack([scatter_public, patches_public]),
            np.hstack([scatter_private, patches_private]),
        ),
    }
    rows = []
    m = int(y.max()) + 1
    for name, (public_features, private_features) in sets.items():
        for dims in WIDTHS:
            pca = PublicPCA.fit_blocks([public_features], dims=dims)
            public = pca.project(public_features)
            embedded = np.concatenate(
                [pca.project(private_features[i : i + 5000]) for i in range(0, len(y_all), 5000)]
            )
            private, held = embedded[:PRIVATE], embedded[PRIVATE:]
            geometry = public_geometry(public)
            u_priv, u_held = clipped_scaled(private, geometry), clipped_scaled(held, geometry)
            prior = np.bincount(y, minlength=m) / len(y)
            moments = np.eye(m)[y].T @ u_priv / len(y)
            row = {"features": name, "dims": dims}
            row["private logistic"] = round(
                accuracy_of(fit_objective(u_priv, moments, prior, ridge=1e-4), u_held, y_held, m), 4
            )
            sums = class_sums(
                private, y, num_classes=m, geometry=geometry, count_weight=COUNT_WEIGHT
            )
            for eps in (None, 1.0, 2.0, 4.0):
                accuracy = []
                for draw in [0] if eps is None else range(DRAWS):
                    sigma = 1e-12
                    noisy = sums
                    if eps is not None:
                        sigma = calibrate_class_means_sigma(
                            eps=eps, delta=DELTA, count_weight=COUNT_WEIGHT, conversion="tight"
                        )
                        rng = np.random.default_rng(1000 * draw + int(10 * eps))
                        noisy = sums + sigma * rng.standard_normal(sums.shape)
                    release = release_from_statistic(
                        noisy, geometry=geometry, sigma=sigma, count_weight=COUNT_WEIGHT
                    )
                    accuracy.append(
                        np.mean(public_logistic(release, public).predict(held) == y_held)
                    )
                key = "release exact" if eps is None else f"release eps {eps:g}"
                row[key] = round(float(np.mean(accuracy)), 4)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return {"rows": rows, "dpsgd": _dpsgd(data, cache_dir, patches_private_raw)}


def _dpsgd(data, cache_dir, patches_private) -> list[dict]:
    """DP-SGD (``dpsgd_linear``'s recipe and protocol) on ScatterNet, and with the patches."""
    import dpsgd_linear

    from pate.teachers import feature_cache
    from pate.teachers.features import scatter_features

    cache = None if cache_dir is None else feature_cache.FeatureCache(pathlib.Path(cache_dir))
    recipe = dpsgd_linear.TRAMER_BONEH_FMNIST
    scatter = dpsgd_linear.group_normalise(
        scatter_features(np.asarray(data.private.x, np.float32), cache=cache).array,
        groups=recipe.groups,
    )
    centred = patches_private - patches_private.mean(axis=1, keepdims=True)
    per_image = (centred / np.sqrt(centred.var(axis=1, keepdims=True) + 1e-5)).astype(np.float32)
    y = np.asarray(data.private.y)
    rows = []
    for name, x in (
        ("scatternet", scatter),
        ("scatternet + public patches", np.hstack([scatter, per_image])),
    ):
        for eps in (2.0, 4.0):
            runs = [
                dpsgd_linear.run_pate_protocol(  # scored on the held-out 10000 only: the
                    {"private": (x, y), "evaluation": (x[:1], y[:1])},  # 1000 are not embedded
                    target=eps,
                    delta=DELTA,
                    seed=seed,
                    holdout=True,
                    recipe=recipe,
                )["accuracy_holdout"]
                for seed in (0, 1)
            ]
            rows.append({"features": name, "eps": eps, "accuracy_holdout": runs})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def main(argv=None) -> int:
    from release_ceiling_fmnist import run_script

    return run_script(
        measure,
        doc=__doc__,
        script="public_features_fmnist.py",
        tuned_on="every setting here (patch size, K, the widths) looked at the held-out images' labels",
        argv=argv,
        patch_features="pate.teachers.patch_features: 6 x 6 patches, K = 400, 200000 public "
        "patches, seed 0",
    )


if __name__ == "__main__":
    sys.exit(main())
