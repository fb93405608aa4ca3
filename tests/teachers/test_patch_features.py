"""pate.teachers.patch_features: k-means patch features fitted on public images only --
deterministic, quadrant sums of triangle activations, standardised with public statistics,
and a clear error for images too small for a patch grid."""

from __future__ import annotations

import numpy as np
import pytest

from pate.analysis.errors import InputError
from pate.teachers.patch_features import PatchFeatures, patch_width


def _images(n=40, channels=1, side=12, seed=0):
    return np.random.default_rng(seed).random((n, channels, side, side)).astype(np.float32)


def test_the_map_is_the_same_for_the_same_public_images():
    first = PatchFeatures.fit(_images(), patch=3, centroids=5, samples=800, seed=1)
    again = PatchFeatures.fit(_images(), patch=3, centroids=5, samples=800, seed=1)
    for name in ("centres", "mean", "zca", "column_mean", "column_std"):
        np.testing.assert_array_equal(getattr(first, name), getattr(again, name))
    assert first.centres.shape == (5, 9) and first.width == 20


def test_features_are_quadrant_sums_of_triangle_activations():
    images = _images(channels=2)
    patches = PatchFeatures.fit(images, patch=3, centroids=5, samples=800, seed=1)
    raw = patches.activations(images)
    assert raw.shape == (40, 20) and np.all(raw >= 0) and np.any(raw > 0)
    # image 3's top-left quadrant (patch positions 0..4 of 10 each way), channel-major patches
    windows = np.stack(
        [images[3, :, r : r + 3, c : c + 3].ravel() for r in range(5) for c in range(5)]
    ).astype(np.float64)
    centred = windows - windows.mean(axis=1, keepdims=True)
    z = (centred / np.sqrt(centred.var(axis=1, keepdims=True) + 0.01) - patches.mean) @ patches.zca
    distance = np.linalg.norm(z[:, None, :] - patches.centres[None], axis=2)
    expected = np.maximum(distance.mean(axis=1, keepdims=True) - distance, 0).sum(axis=0)
    np.testing.assert_allclose(raw[3, :5], expected, rtol=1e-9, atol=1e-9)


def test_features_are_standardised_with_the_public_images_statistics():
    public = _images()
    patches = PatchFeatures.fit(public, patch=3, centroids=5, samples=800, seed=1)
    out = patches.transform(public)
    np.testing.assert_allclose(out.mean(axis=0), 0, atol=1e-9)
    np.testing.assert_allclose(out.std(axis=0), 1, atol=1e-4)
    other = patches.transform(_images(seed=7))  # other images: the same public statistics
    np.testing.assert_allclose(
        other, (patches.activations(_images(seed=7)) - patches.column_mean) / patches.column_std
    )


def test_images_too_small_for_a_patch_grid_are_refused_with_their_shape():
    with pytest.raises(InputError, match=r"H and W at least 7.*\(1, 6, 6\)"):
        patch_width((1, 6, 6))
    with pytest.raises(InputError, match="images"):
        PatchFeatures.fit(np.zeros((4, 30)), patch=6)
    assert patch_width((1, 28, 28)) == 1600
