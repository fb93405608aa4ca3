import numpy as np
import pytest

from pate.student.select import active_labels, select_uncertain, uncertainty

MECH = dict(threshold=30.0, sigma1=10.0, sigma2=5.0, student_confidence=0.9)
QUICK_STUDENT = dict(
    method="supervised", epochs=2, steps_per_epoch=10, random_state=0, device="cpu"
)


@pytest.fixture(scope="module")
def public_votes(digits):
    """50 synthetic teachers, each right with probability 0.7 (else a uniform class)."""
    rng = np.random.default_rng(0)
    y = digits.public.y
    right = rng.random((50, y.size)) < 0.7
    preds = np.where(right, y[None, :], rng.integers(0, 10, (50, y.size)))
    from pate.core.votes import votes_from_predictions

    return votes_from_predictions(preds, num_classes=10)


def test_uncertainty_orders():
    p = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3], [0.8, 0.1, 0.1]])
    ent = uncertainty(p, criterion="entropy")
    assert np.argsort(-ent, kind="stable").tolist() == [2, 1, 3, 0]
    assert ent[0] == pytest.approx(0.0) and ent[2] == pytest.approx(np.log(3))
    margin = uncertainty(p, criterion="margin")
    assert margin.tolist() == pytest.approx([-1.0, 0.0, 0.0, -0.7])
    assert select_uncertain(p, k=2, criterion="entropy").tolist() == [2, 1]
    assert select_uncertain(p, k=2, criterion="margin").tolist() == [1, 2]
    exclude = np.array([False, False, True, False])
    assert select_uncertain(p, k=2, criterion="entropy", exclude=exclude).tolist() == [1, 3]
    with pytest.raises(ValueError, match="softmax"):
        uncertainty(np.array([[2.0, -1.0]]))
    with pytest.raises(ValueError, match="criterion"):
        uncertainty(p, criterion="random")
    with pytest.raises(ValueError, match="not yet asked"):
        select_uncertain(p, k=4, exclude=exclude)


def test_first_mode_asks_in_order(digits, public_votes):
    res = active_labels(
        digits.public.x,
        public_votes,
        rounds=3,
        batch_size=40,
        initial_size=60,
        criterion="first",
        rng=np.random.default_rng(1),
        **MECH,
    )
    assert res.query_order.tolist() == list(range(140))
    assert not res.asked_mask[140:].any() and np.all(res.labels[140:] == -1)
    assert len(res.events) == 3 and [r["queries"] for r in res.rounds] == [60, 40, 40]
    labelled = res.labels >= 0
    assert labelled.sum() > 50
    # Mostly right: the synthetic teachers agree on the true class.
    assert np.mean(res.labels[labelled] == digits.public.y[labelled]) > 0.9
    assert set(res.source[:140]) <= {"teachers", "none"}  # no student in "first" mode


def test_active_mode_selects_uncertain_items_and_student_sees_labels_only(
    digits, public_votes, monkeypatch
):
    from pate.student import train

    seen = []
    original = train.Student.fit

    def spy(self, public_x, labels):
        seen.append((public_x.shape, np.asarray(labels).copy()))
        return original(self, public_x, labels)

    monkeypatch.setattr(train.Student, "fit", spy)
    res = active_labels(
        digits.public.x,
        public_votes,
        rounds=3,
        batch_size=50,
        initial_size=50,
        criterion="entropy",
        rng=np.random.default_rng(1),
        student_params=QUICK_STUDENT,
        **{**MECH, "student_confidence": 0.5},
    )
    assert len(seen) == 2  # one student per later round
    for shape, labels in seen:
        assert shape == digits.public.x.shape
        assert labels.shape == (597,) and labels.min() >= -1 and labels.max() < 10
    later = res.query_order[50:]
    assert later.size > 0 and later.min() >= 0
    assert not np.array_equal(np.sort(later), np.arange(50, 50 + later.size))  # not first-k
    assert res.asked_mask.sum() == 150 and len(set(res.query_order.tolist())) == 150
    assert res.counts()["teachers"] + res.counts()["student"] + res.counts()["none"] == 150
    assert set(res.source[res.asked_mask]) <= {"teachers", "student", "none"}
    assert res.counts()["teachers"] > 0
    assert len(res.events) == 3 and all(e.mechanism == "interactive-gnmax" for e in res.events)
    from pate.analysis.accountant import RdpAccountant

    eps, _ = RdpAccountant().compose(*res.events).epsilon(delta=1e-5, data_dependent=False)
    assert np.isfinite(eps) and eps > 0


def test_active_mode_validates_before_any_noise(digits, public_votes):
    rng = np.random.default_rng(5)
    state = rng.bit_generator.state
    bad = [
        (dict(**{**MECH, "sigma1": -1.0}), ValueError, "sigma1"),
        (dict(**{**MECH, "student_confidence": 0.1}), ValueError, "1/classes"),
        (dict(threshold=30.0), TypeError, "sigma1"),
        (dict(**MECH, student_params={"epochs": 0}), ValueError, "epochs"),
    ]
    for kwargs, exc, match in bad:
        with pytest.raises(exc, match=match):
            active_labels(
                digits.public.x,
                public_votes,
                rounds=2,
                batch_size=20,
                criterion="entropy",
                rng=rng,
                **kwargs,
            )
    with pytest.raises(ValueError, match="rows"):
        active_labels(digits.public.x, public_votes[:100], rounds=2, batch_size=20, rng=rng, **MECH)
    with pytest.raises(ValueError, match="exceeds"):
        active_labels(digits.public.x, public_votes, rounds=20, batch_size=40, rng=rng, **MECH)
    assert rng.bit_generator.state == state


def test_active_mode_stops_with_an_online_aggregator_budget(digits, public_votes):
    from pate.core.online_aggregator import OnlineAggregator

    agg = OnlineAggregator(
        "interactive-gnmax",
        budget_eps=1.0,
        delta=1e-5,
        rng=np.random.default_rng(2),
        threshold=30.0,
        sigma1=10.0,
        sigma2=5.0,
        student_confidence=0.9,
    )
    res = active_labels(
        digits.public.x, public_votes, rounds=5, batch_size=100, criterion="first", aggregator=agg
    )
    assert res.asked_mask.sum() < 500
    assert "stop_reason" in res.rounds[-1]
    assert agg.epsilon(data_dependent=False)[0] <= 1.0
    with pytest.raises(TypeError, match="not both"):
        active_labels(
            digits.public.x, public_votes, rounds=1, batch_size=10, aggregator=agg, threshold=30.0
        )


def test_aggregator_must_use_the_student(digits, public_votes):
    from pate.core.online_aggregator import OnlineAggregator

    agg = OnlineAggregator(
        "confident-gnmax",
        budget_eps=1.0,
        delta=1e-5,
        rng=np.random.default_rng(2),
        threshold=30.0,
        sigma1=10.0,
        sigma2=5.0,
    )
    with pytest.raises(TypeError, match="uses the student's predictions"):
        active_labels(digits.public.x, public_votes, rounds=1, batch_size=10, aggregator=agg)
    assert agg.queries_asked == 0
