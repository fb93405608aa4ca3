"""pate.student.rule_product: the student times its labelling rule. The head reproduces the
rule on the run's front-end (ScatterNet, with or without the public patch features, or raw
inputs), the product is the documented formula,
and a saved student keeps it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pate.core.labelling_rules import labelling_rule, recover_rule
from pate.core.mean_release import noisy_class_means
from pate.student.rule_product import RuleHead, RuleProduct, product_log_proba
from pate.student.train import Student
from pate.teachers.public_embedding import PublicFrontEnd


def _head(images, labels, *, features, rule, dims, num_classes=10, n_public=150):
    """A class-means rule fitted as a run fits it (public front-end, release, rule), its scores
    published for the public rows and recovered into a head; and the rule on new inputs,
    computed the numpy way (ScatterNet, public standardisation, PCA, the rule's own scores)."""
    public_x, private_x = images[:n_public], images[n_public:]
    front, public = PublicFrontEnd.fit_transform(public_x, features=features, dims=dims)
    release = noisy_class_means(
        public,
        front.embed(private_x),
        labels[n_public:],
        sigma=1.0,
        count_weight=0.3,
        num_classes=num_classes,
        rng=np.random.default_rng(0),
    )
    labeller = labelling_rule(release, public, rule)
    recovered = recover_rule(public, labeller.scores(public), rule=rule)
    head = RuleHead.from_fitted(
        input_shape=images.shape[1:], front=front, recovered=recovered, num_classes=num_classes
    )

    def rule_scores(x):
        return labeller.scores(front.embed(x))

    return head, rule_scores


@pytest.mark.parametrize(
    "features, rule, dims",
    [("scatternet", "logistic", 24), ("scatternet+patches", "logistic", 24), ("none", "lda", 12)],
)
def test_the_head_scores_new_images_as_the_run_s_rule(digits_images, features, rule, dims):
    x, y = digits_images
    head, rule_scores = _head(x[:500], y[:500], features=features, rule=rule, dims=dims)
    unseen = x[500:560]
    with torch.no_grad():
        got = head(torch.from_numpy(unseen)).numpy()
    np.testing.assert_allclose(got, rule_scores(unseen), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rule", ["lda", "logistic"])
def test_the_head_scores_new_table_rows_as_a_kernel_rule(digits_images, rule):
    """A table's kernel front-end (random Fourier features, then the public PCA) travels in the
    head: new rows get the run's rule scores."""
    x, y = digits_images
    rows = x.reshape(len(x), -1)[:560]
    head, rule_scores = _head(rows[:500], y[:500], features="kernel", rule=rule, dims=16)
    with torch.no_grad():
        got = head(torch.from_numpy(rows[500:])).numpy()
    np.testing.assert_allclose(got, rule_scores(rows[500:]), rtol=1e-4, atol=1e-4)
    assert head.kernel_weights.shape == (64, head.pca_axes.shape[1])


def test_the_product_is_log_p_student_plus_log_softmax_of_t_times_the_rule(digits_images):
    x, y = digits_images
    head, rule_scores = _head(x[:500], y[:500], features="none", rule="logistic", dims=12)
    student_net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    product = RuleProduct(student_net, head, temperature=3.0).eval()
    unseen = x[500:540]
    with torch.no_grad():
        got = torch.softmax(product(torch.from_numpy(unseen)), dim=1).numpy()
        p_student = torch.softmax(student_net(torch.from_numpy(unseen)), dim=1).double().numpy()
    expected = product_log_proba(p_student, rule_scores(unseen), temperature=3.0)
    expected = np.exp(expected - expected.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, expected / expected.sum(axis=1, keepdims=True), atol=1e-5)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        RuleProduct(student_net, head, temperature=0.0)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        product_log_proba(p_student, rule_scores(unseen), temperature=-1.0)


def test_a_student_times_its_rule_is_saved_and_loaded_whole(digits_images, tmp_path):
    x, y = digits_images
    head, _ = _head(x[:500], y[:500], features="scatternet", rule="logistic", dims=24)
    student = Student(
        model="cnn8",
        method="supervised",
        epochs=1,
        steps_per_epoch=5,
        batch_size=16,
        random_state=0,
        progress=False,
        device="cpu",
    )
    student.fit(x[:150], y[:150])
    alone = student.predict_proba(x[500:530])
    with pytest.raises(TypeError, match="head must be a pate.student.rule_product.RuleHead"):
        student.combine_with_rule(torch.nn.Identity(), temperature=10.0)
    student.combine_with_rule(head, temperature=10.0)
    combined = student.predict_proba(x[500:530])
    assert not np.allclose(combined, alone)
    with pytest.raises(ValueError, match="already combined"):
        student.combine_with_rule(head, temperature=10.0)
    student.save(tmp_path / "student.pt")
    loaded = Student.load(tmp_path / "student.pt")
    assert loaded.rule_product_ == {
        "features": "scatternet",
        "rule": "logistic",
        "dims": 24,
        "temperature": 10.0,
    }
    np.testing.assert_allclose(loaded.predict_proba(x[500:530]), combined, atol=1e-6)
    # a student saved alone loads alone
    plain = Student(
        model="cnn8",
        method="supervised",
        epochs=1,
        steps_per_epoch=5,
        batch_size=16,
        random_state=0,
        progress=False,
        device="cpu",
    ).fit(x[:150], y[:150])
    plain.save(tmp_path / "plain.pt")
    assert Student.load(tmp_path / "plain.pt").rule_product_ is None


@pytest.fixture(scope="module")
def digits_images():
    """scikit-learn's digits as (N, 1, 8, 8) float32 images in [0, 1] and their labels."""
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.images[:, None].astype(np.float32) / 16.0), d.target.astype(np.int64)
