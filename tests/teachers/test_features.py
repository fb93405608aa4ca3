"""ScatterNet front-end: fixed filters, public statistics, teachers on features."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pate.teachers import features as teacher_features
from pate.teachers import public_embedding
from pate.teachers.data import ArraySplit, PateData
from pate.teachers.ensemble import TeacherConfig, train_teachers
from pate.teachers.models import build_model


def _images(n, side=8, seed=0):
    return np.random.default_rng(seed).random((n, 1, side, side)).astype(np.float32)


def _data(side=8, n_private=60, n_public=30, n_eval=20, seed=0):
    rng = np.random.default_rng(seed)

    def split(n):
        return ArraySplit(_images(n, side, int(rng.integers(1 << 30))), rng.integers(0, 3, n))

    return PateData(
        name="toy",
        private=split(n_private),
        public=split(n_public),
        evaluation=split(n_eval),
        num_classes=3,
        input_shape=(1, side, side),
    )


def test_scatter_shape_and_no_parameters():
    net = teacher_features.ScatterNet(28, 28)
    assert sum(p.numel() for p in net.parameters()) == 0  # nothing to train, nothing to leak
    out = teacher_features.scatter(_images(5, 28), batch_size=2)
    assert out.shape == (5, 81, 7, 7) and out.dtype == np.float32
    assert teacher_features.feature_shape((3, 32, 32)) == (243, 8, 8)


def test_scatter_is_per_image_and_batch_independent():
    x = _images(6, 28)
    whole = teacher_features.scatter(x, batch_size=6)
    np.testing.assert_allclose(
        teacher_features.scatter(x, batch_size=1), whole, rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(teacher_features.scatter(x[2:3]), whole[2:3], rtol=1e-5, atol=1e-6)


def test_scatter_of_read_only_images_warns_nothing_and_equals_a_writable_copy():
    """Own data arrives as a read-only memory map; torch warns on a non-writable array."""
    import warnings

    x = _images(3, 28)
    frozen = x.copy()
    frozen.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = teacher_features.scatter(frozen, batch_size=3)
    np.testing.assert_array_equal(out, teacher_features.scatter(x, batch_size=3))
    assert not frozen.flags.writeable  # the caller's array is left as it was


@pytest.mark.parametrize("shape", [(1, 30, 28), (1, 4, 4), (28, 28)])
def test_feature_shape_rejects_other_inputs(shape):
    with pytest.raises(ValueError, match="multiples of 4"):
        teacher_features.feature_shape(shape)


def test_normalisation_uses_public_statistics_only():
    data = _data()
    out = teacher_features.feature_data(data, "scatternet")
    assert out.input_shape == (81, 2, 2)
    pub = out.public.x
    np.testing.assert_allclose(pub.mean(axis=(0, 2, 3)), 0, atol=1e-4)
    # another private split: the public and evaluation features do not move
    other = dataclasses.replace(data, private=ArraySplit(_images(60, seed=99), data.private.y))
    out2 = teacher_features.feature_data(other, "scatternet")
    np.testing.assert_array_equal(out2.public.x, pub)
    np.testing.assert_array_equal(out2.evaluation.x, out.evaluation.x)
    assert not np.array_equal(out2.private.x, out.private.x)
    np.testing.assert_array_equal(out.private.y, data.private.y)
    assert teacher_features.feature_data(data, "none") is data


def test_public_pca_embedding_is_fitted_on_public_rows():
    rng = np.random.default_rng(0)
    pub, priv = rng.normal(size=(50, 12)), rng.normal(size=(40, 12))
    e_pub, e_priv = public_embedding.public_pca_embedding(pub, priv, dims=4)
    assert e_pub.shape == (50, 4) and e_priv.shape == (40, 4)
    e_pub2, _ = public_embedding.public_pca_embedding(pub, priv * 10, dims=4)
    np.testing.assert_array_equal(e_pub, e_pub2)
    np.testing.assert_allclose(e_pub.mean(axis=0), 0, atol=1e-5)
    with pytest.raises(ValueError, match="dims"):
        public_embedding.public_pca_embedding(pub, dims=13)


def test_teacher_config_features():
    with pytest.raises(ValueError, match="features"):
        TeacherConfig(features="sift")
    cfg = TeacherConfig(features="scatternet").resolved(_data())
    assert cfg.model == "linear" and cfg.augment == "none"
    assert TeacherConfig(features="scatternet").fingerprint()["features"] == "scatternet"


def test_linear_and_scatter_cnn_models():
    import torch

    lin = build_model("linear", input_shape=(81, 7, 7), num_classes=10)
    assert lin(torch.zeros(2, 81, 7, 7)).shape == (2, 10)
    cnn = build_model("scatter_cnn", input_shape=(81, 7, 7), num_classes=10)
    assert cnn(torch.zeros(2, 81, 7, 7)).shape == (2, 10)
    with pytest.raises(ValueError, match="scatter_cnn"):
        build_model("scatter_cnn", input_shape=(10,), num_classes=3)


def test_teachers_on_scatternet_features_digits(digits):
    """Real digits: linear teachers on ScatterNet features learn (well above chance) and
    the predictions cover the public and evaluation splits."""
    shards = np.array_split(np.random.default_rng(0).permutation(len(digits.private)), 4)
    result = train_teachers(
        digits,
        shards,
        [1, 2, 3, 4],
        TeacherConfig(features="scatternet", epochs=30, lr=1e-2, device="cpu"),
        progress=False,
    )
    assert result.public_predictions.shape == (4, len(digits.public))
    assert result.teacher_accuracy.mean() > 0.6


def test_random_fourier_features_approximate_a_gaussian_kernel_fitted_on_public_rows():
    rng = np.random.default_rng(0)
    public = rng.normal(size=(400, 5)) * [1.0, 10.0, 0.1, 1e3, 1.0] + 7.0
    rff = public_embedding.RandomFourierFeatures.fit(public)
    assert rff.weights.shape == (5, public_embedding.KERNEL_FEATURES) and rff.phases.shape == (
        public_embedding.KERNEL_FEATURES,
    )
    # the map reads the public split's statistics only, and its frequencies come from a fixed
    # public seed: the same public rows give the same map
    again = public_embedding.RandomFourierFeatures.fit(public.copy())
    np.testing.assert_array_equal(rff.weights, again.weights)
    # <phi(x), phi(x')> ~ exp(-gamma ||z - z'||^2), gamma = 1 / (median squared public distance)
    z = (public - rff.mean) / rff.std
    gamma = float(np.mean(rff.weights**2) / 2.0)
    phi = rff.transform(public[:40])
    exact = np.exp(-gamma * ((z[:40, None] - z[None, :40]) ** 2).sum(-1))
    assert np.abs(phi @ phi.T - exact).max() < 0.15
    d2 = ((z[:, None] - z[None]) ** 2).sum(-1)
    assert 0.7 < gamma * np.median(d2[np.triu_indices(len(z), 1)]) < 1.4
    with pytest.raises(ValueError, match="at least 2 public rows"):
        public_embedding.RandomFourierFeatures.fit(public[:1])


def test_kernel_front_end_embeds_in_chunks_as_in_one_block(monkeypatch):
    rng = np.random.default_rng(1)
    public, private = rng.normal(size=(300, 6)), rng.normal(size=(250, 6))
    front, embedded = public_embedding.PublicFrontEnd.fit_transform(
        public, features="kernel", dims=12
    )
    monkeypatch.setattr(public_embedding, "KERNEL_CHUNK", 7)
    np.testing.assert_allclose(
        front.embed(private), front.pca.project(front.kernel.transform(private)), atol=1e-5
    )
    np.testing.assert_allclose(front.embed(public), embedded, atol=1e-5)
    # the chunked PCA finds the SVD's axes (same sign rule)
    features = front.kernel.transform(public)
    reference = public_embedding.PublicPCA.fit(features, dims=12)
    np.testing.assert_allclose(np.abs(front.pca.axes @ reference.axes.T), np.eye(12), atol=1e-6)
    np.testing.assert_allclose(front.pca.axes, reference.axes, atol=1e-6)
    with pytest.raises(ValueError, match="maps tables"):
        public_embedding.PublicFrontEnd.fit_transform(_images(20), features="kernel", dims=4)


def test_a_kernel_class_means_release_separates_rings_a_linear_one_cannot():
    """The reason for the kernel front-end: classes a straight boundary cannot split (two
    concentric rings) are labelled well through random Fourier features, from the same noisy
    release (add/remove sensitivity unchanged: rows are still clipped to norm <= 1)."""
    from sklearn.datasets import make_circles

    from pate.core.mean_release import noisy_class_means

    x, y = make_circles(n_samples=3000, noise=0.08, factor=0.5, random_state=0)
    x = x * [100.0, 0.01]  # awkward column scales
    public, private, y_public, y_private = x[:600], x[600:], y[:600], y[600:]
    right = {}
    for features, dims in (("none", 2), ("kernel", 32)):
        front, e_public = public_embedding.PublicFrontEnd.fit_transform(
            public, features=features, dims=dims
        )
        release = noisy_class_means(
            e_public,
            front.embed(private),
            y_private,
            sigma=2.6,
            count_weight=0.3,
            num_classes=2,
            rng=np.random.default_rng(0),
        )
        right[features] = float(np.mean(release.predict(e_public) == y_public))
    assert right["none"] < 0.7 < 0.9 < right["kernel"], right
