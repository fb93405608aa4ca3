"""benchmarks/rule_product.py: the exact recovery of a class-means labelling rule from its
published scores, the product of experts, and the refusals (the benchmark runs on demand)."""

from __future__ import annotations

import numpy as np
import pytest

from pate.class_means import labelling_rule, noisy_class_means


@pytest.fixture(scope="module")
def rule_product(load_benchmark):
    return load_benchmark("rule_product")


def _release(seed=0, n_public=300, n_private=2000, d=12, m=4):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(m, d)) * 2
    private_labels = rng.integers(0, m, n_private)
    private = centres[private_labels] + rng.normal(size=(n_private, d))
    public = centres[rng.integers(0, m, n_public)] + rng.normal(size=(n_public, d))
    unseen = centres[rng.integers(0, m, 50)] + rng.normal(size=(50, d)) * 3   # some beyond the clip
    release = noisy_class_means(public, private, private_labels, sigma=2.0, num_classes=m,
                                rng=np.random.default_rng(seed + 1))
    return public, unseen, release


@pytest.mark.parametrize("rule", ["logistic", "lda"])
def test_the_recovered_rule_scores_new_embeddings_as_the_rule_itself(rule_product, rule):
    public, unseen, release = _release()
    labeller = labelling_rule(release, public, rule)
    recovered = rule_product.recover_rule(public, labeller.scores(public), rule=rule)
    np.testing.assert_allclose(recovered(unseen), labeller.scores(unseen), rtol=1e-7, atol=1e-7)


def test_scores_of_the_other_rule_or_of_no_affine_rule_are_refused(rule_product):
    public, _, release = _release()
    logistic = labelling_rule(release, public, "logistic").scores(public)
    with pytest.raises(ValueError, match="not an affine lda rule"):
        rule_product.recover_rule(public, logistic, rule="lda")   # clipping makes it non-affine in w
    with pytest.raises(ValueError, match="not an affine logistic rule"):
        rule_product.recover_rule(public, np.random.default_rng(3).normal(size=logistic.shape),
                                  rule="logistic")
    with pytest.raises(ValueError, match="do not determine a rule"):
        rule_product.recover_rule(public[:5], logistic[:5], rule="logistic")
    with pytest.raises(ValueError, match="one row per public embedding"):
        rule_product.recover_rule(public, logistic[:-1], rule="logistic")


def test_the_product_adds_log_probabilities(rule_product):
    proba = np.array([[0.6, 0.4], [0.6, 0.4], [0.5, 0.5]])
    scores = np.array([[0.0, 0.1], [0.0, 1.0], [0.0, 0.0]])
    # row 0: 0.6 * 0.475 > 0.4 * 0.525; row 1: the rule wins at T = 1; row 2: a tie, class 0
    assert rule_product.product_predict(proba, scores, temperature=1.0).tolist() == [0, 1, 0]
    assert rule_product.product_predict(proba, scores, temperature=10.0).tolist() == [1, 1, 0]
    with pytest.raises(ValueError, match="temperature must be > 0"):
        rule_product.product_predict(proba, scores, temperature=0.0)


def test_a_directory_that_is_not_a_finished_class_means_run_is_refused(rule_product, tmp_path,
                                                                       capsys):
    (tmp_path / "config.json").write_text('{"aggregator": {"mechanism": "gnmax"}}')
    with pytest.raises(SystemExit) as exit_info:
        rule_product.main([str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "has no knn_embeddings.npz, label_scores.npy, labels.npy, student.pt" in err
    for name in ("knn_embeddings.npz", "label_scores.npy", "labels.npy", "student.pt"):
        (tmp_path / name).write_bytes(b"")
    with pytest.raises(SystemExit):
        rule_product.main([str(tmp_path)])
    assert "mechanism 'gnmax', not 'class-means'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        rule_product.main([str(tmp_path), "--temperatures", "0"])
    assert "--temperatures must be > 0, got 0.0" in capsys.readouterr().err
