"""benchmarks/public_features_fmnist.py: the public patch codebook is deterministic and its
features are triangle activations summed over four quadrants."""

from __future__ import annotations

import numpy as np


def _images():
    return np.random.default_rng(0).random((30, 12, 12)).astype(np.float32)


def test_the_codebook_is_the_same_for_a_seed(load_benchmark):
    features = load_benchmark("public_features_fmnist")
    first = features.fit_codebook(_images(), patch=3, centroids=5, samples=500, seed=1)
    again = features.fit_codebook(_images(), patch=3, centroids=5, samples=500, seed=1)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    assert first[0].shape == (5, 9) and first[2].shape == (9, 9)


def test_features_are_quadrant_sums_of_triangle_activations(load_benchmark):
    features = load_benchmark("public_features_fmnist")
    images = _images()
    codebook = features.fit_codebook(images, patch=3, centroids=5, samples=500, seed=1)
    out = features.patch_features(images, codebook, patch=3, rows=7)
    assert out.shape == (30, 4 * 5) and out.dtype == np.float32
    assert np.all(out >= 0) and np.any(out > 0)
    # one image, its top-left quadrant (patch positions 0..4 of 10 in each direction) by hand
    centres, mean, zca = codebook
    windows = np.stack(
        [images[0, r : r + 3, c : c + 3].ravel() for r in range(5) for c in range(5)]
    )
    centred = windows - windows.mean(axis=1, keepdims=True)
    z = (centred / np.sqrt(centred.var(axis=1, keepdims=True) + 0.01) - mean) @ zca
    distance = np.linalg.norm(z[:, None, :] - centres[None], axis=2)
    expected = np.maximum(distance.mean(axis=1, keepdims=True) - distance, 0).sum(axis=0)
    np.testing.assert_allclose(out[0, :5], expected, rtol=1e-3, atol=1e-3)
