"""pate.mechanisms: the registry of mechanism specs, and a toy mechanism added without editing
any other module (it runs through pate.core.aggregators and `pate analyze` as registered)."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from pate import analysis, mechanisms
from pate.cli import main
from pate.core.aggregators import aggregate
from pate.core.online_aggregator import OnlineAggregator
from pate.core.votes import votes_from_predictions

ORDERS = analysis.DEFAULT_ORDERS
PARAMS = {
    "lnmax": {"scale": 20.0},
    "gnmax": {"sigma": 20.0},
    "confident-gnmax": {"threshold": 60.0, "sigma1": 20.0, "sigma2": 10.0},
    "interactive-gnmax": {
        "threshold": 40.0,
        "sigma1": 20.0,
        "sigma2": 10.0,
        "student_confidence": 0.9,
    },
    "private-knn": {
        "k": 100,
        "sampling_rate": 0.1,
        "threshold": 60.0,
        "sigma1": 20.0,
        "sigma2": 10.0,
    },
    "class-means": {"sigma": 5.0, "count_weight": 0.3},
}


def _votes(n=300, teachers=100, classes=5, seed=0):
    rng = np.random.default_rng(seed)
    agreement = rng.uniform(0.2, 1.0, size=n)
    true = rng.integers(0, classes, size=n)
    preds = np.where(
        rng.random((teachers, n)) < agreement, true, rng.integers(0, classes, (teachers, n))
    )
    return votes_from_predictions(preds, num_classes=classes)


def _student(votes, seed=1):
    return np.random.default_rng(seed).dirichlet(np.full(votes.shape[1], 0.3), size=votes.shape[0])


# --------------------------------------------------------------------------- the registry


def test_registry_holds_the_six_mechanisms():
    assert mechanisms.NAMES == (
        "lnmax",
        "gnmax",
        "confident-gnmax",
        "interactive-gnmax",
        "private-knn",
        "class-means",
    )
    assert tuple(mechanisms.REGISTRY) == mechanisms.NAMES
    assert mechanisms.all_param_names() == (
        "scale",
        "sigma",
        "threshold",
        "sigma1",
        "sigma2",
        "student_confidence",
        "k",
        "sampling_rate",
        "count_weight",
    )
    for name, spec in mechanisms.REGISTRY.items():
        assert spec.name == name and spec.title and spec.description and spec.reference
        assert spec.param_names == tuple(PARAMS[name])
    assert [n for n, s in mechanisms.REGISTRY.items() if s.needs_student] == ["interactive-gnmax"]
    assert [n for n, s in mechanisms.REGISTRY.items() if s.always_answers] == [
        "lnmax",
        "gnmax",
        "class-means",
    ]
    assert {n: s.kind.name for n, s in mechanisms.REGISTRY.items()} == {
        "lnmax": "vote",
        "gnmax": "vote",
        "confident-gnmax": "vote",
        "interactive-gnmax": "vote",
        "private-knn": "sample",
        "class-means": "release",
    }
    assert [n for n, s in mechanisms.REGISTRY.items() if s.kind.releases_once] == ["class-means"]
    assert [n for n, s in mechanisms.REGISTRY.items() if s.kind.gives_label_scores] == [
        "class-means"
    ]
    with pytest.raises(TypeError):
        mechanisms.REGISTRY["x"] = mechanisms.get("gnmax")  # read-only


def test_get_register_unregister_refuse_clearly():
    with pytest.raises(
        ValueError,
        match="mechanism must be one of 'lnmax', 'gnmax', "
        "'confident-gnmax', 'interactive-gnmax', 'private-knn', 'class-means'; got 'rappor'",
    ):
        mechanisms.get("rappor")
    with pytest.raises(ValueError, match="already registered"):
        mechanisms.register(mechanisms.get("gnmax"))
    with pytest.raises(TypeError, match="needs a MechanismSpec"):
        mechanisms.register("gnmax")
    with pytest.raises(ValueError, match="built-in"):
        mechanisms.unregister("gnmax")
    with pytest.raises(ValueError, match="kind must be one of"):
        mechanisms.Param("eps", "real", "help")
    with pytest.raises(ValueError, match="duplicate parameter"):
        mechanisms.MechanismSpec("x", "X", (mechanisms.Param("a", "positive", "h"),) * 2, "d", "r")


@pytest.mark.parametrize(
    "name, params, prefix, exc, message",
    [
        (
            "confident-gnmax",
            {"threshold": 1, "sigma1": 1},
            "",
            TypeError,
            r"confident-gnmax needs sigma2=\.\.\.; its parameters are threshold, sigma1, sigma2",
        ),
        (
            "confident-gnmax",
            {"threshold": 1},
            "--",
            TypeError,
            "confident-gnmax needs --sigma1, --sigma2; its parameters are --threshold, --sigma1, --sigma2",
        ),
        (
            "confident-gnmax",
            {"threshold": 1, "sigma1": 1, "sigma2": 1, "sigma": 3},
            "--",
            TypeError,
            "--sigma is not a parameter of confident-gnmax",
        ),
        ("gnmax", {"sigma": 0}, "[aggregator] ", ValueError, r"\[aggregator\] sigma must be > 0"),
        (
            "confident-gnmax",
            {"threshold": -1, "sigma1": 1, "sigma2": 1},
            "--",
            ValueError,
            "--threshold must be >= 0",
        ),
        (
            "interactive-gnmax",
            {**PARAMS["interactive-gnmax"], "student_confidence": 1.5},
            "--",
            ValueError,
            r"--student-confidence must lie in \[0, 1\]",
        ),
        ("lnmax", {"scale": "2"}, "", TypeError, "scale must be a real number"),
        ("lnmax", [("scale", 2)], "", TypeError, "must be a mapping"),
    ],
)
def test_validate_names_the_parameter(name, params, prefix, exc, message):
    with pytest.raises(exc, match=message):
        mechanisms.get(name).validate(params, prefix=prefix)


def test_a_parameter_with_a_default_may_be_left_out_and_is_always_recorded():
    weight = mechanisms.Param("w", "positive", "a weight", default=2)
    assert weight.default == 2.0 and type(weight.default) is float and not weight.required
    assert mechanisms.Param("w", "positive", "a weight").required
    with pytest.raises(ValueError, match="w default must be > 0, got -1"):
        mechanisms.Param("w", "positive", "a weight", default=-1)
    spec = mechanisms.get("class-means")
    assert [p.name for p in spec.params if p.required] == ["sigma"]
    # the default fills a missing or None value, never a given one; validate always returns it
    assert spec.with_defaults({"sigma": 1.0}) == {"sigma": 1.0, "count_weight": 0.3}
    assert spec.with_defaults({"sigma": 1.0, "count_weight": None})["count_weight"] == 0.3
    assert spec.with_defaults({"sigma": 1.0, "count_weight": 0.7})["count_weight"] == 0.7
    assert spec.validate({"sigma": 1}) == {"sigma": 1.0, "count_weight": 0.3}
    # the required ones are still required, and the message lists every parameter
    with pytest.raises(
        TypeError, match="class-means needs --sigma; its parameters are --sigma, --count-weight"
    ):
        spec.validate({"count_weight": 0.3}, prefix="--")


def test_validate_returns_clean_floats_and_ignores_other_keys():
    clean = mechanisms.get("confident-gnmax").validate(
        {
            "mechanism": "confident-gnmax",
            "queries": 100,
            "sigma2": np.int64(10),
            "threshold": 60,
            "sigma1": 20.5,
            "sigma": None,
        }
    )
    assert clean == {"threshold": 60.0, "sigma1": 20.5, "sigma2": 10.0}
    assert list(clean) == ["threshold", "sigma1", "sigma2"]
    assert all(type(v) is float for v in clean.values())


# --------------------------------------------------------------------------- cost consistency


@pytest.mark.parametrize(
    "name", [n for n in mechanisms.NAMES if not mechanisms.get(n).kind.releases_once]
)
def test_per_query_rdp_sums_to_the_event(name):
    # (class-means has no votes to draw on: tests/pate/core/test_mean_release.py checks its sums)
    spec = mechanisms.get(name)
    votes = _votes()
    student = _student(votes) if spec.needs_student else None
    labels, answered, source = spec.draw(
        votes, PARAMS[name], np.random.default_rng(3), student=student
    )
    if not spec.always_answers:
        assert 0 < answered.sum() < votes.shape[0]  # the mask matters
    event = spec.event(votes, PARAMS[name], answered=answered, orders=ORDERS, student=student)
    assert event.mechanism == name and event.queries == 300
    assert event.answered == int(answered.sum())
    for dd, total in ((True, event.rdp), (False, event.rdp_data_independent)):
        per_query = spec.per_query_rdp(
            votes,
            PARAMS[name],
            answered=answered,
            orders=ORDERS,
            data_dependent=dd,
            student=student,
        )
        assert per_query.shape == (300, ORDERS.size)
        np.testing.assert_allclose(per_query.sum(axis=0), total, rtol=1e-9, atol=0)
    # Every query asked costs at most the worst case.
    worst = spec.worst_case_query_rdp(PARAMS[name], orders=ORDERS)
    ind = spec.per_query_rdp(
        votes, PARAMS[name], answered=answered, orders=ORDERS, data_dependent=False, student=student
    )
    assert np.all(ind <= worst * (1 + 1e-12))


def test_costs_are_the_analysis_formulas():
    votes, o = _votes(), ORDERS
    answered = np.arange(300) % 3 == 0
    p = PARAMS["confident-gnmax"]
    got = mechanisms.get("confident-gnmax").per_query_rdp(
        votes, p, answered=answered, orders=o, data_dependent=True
    )
    want = analysis.threshold_rdp(votes, threshold=60, sigma=20, orders=o) + answered[
        :, None
    ] * analysis.gnmax_rdp(votes, sigma=10, orders=o)
    np.testing.assert_array_equal(got, want)
    dummy = np.array([[1, 0]])
    np.testing.assert_array_equal(
        mechanisms.get("confident-gnmax").worst_case_query_rdp(p, orders=o),
        analysis.threshold_rdp(dummy, threshold=60, sigma=20, orders=o, data_dependent=False)[0]
        + o / 10.0**2,
    )
    np.testing.assert_array_equal(
        mechanisms.get("gnmax").worst_case_query_rdp({"sigma": 7.0}, orders=o), o / 7.0**2
    )
    np.testing.assert_array_equal(
        mechanisms.get("lnmax").worst_case_query_rdp({"scale": 5.0}, orders=o),
        analysis.lnmax_rdp(dummy, scale=5.0, orders=o, data_dependent=False)[0],
    )
    # GNMax answers everything: an answered mask does not lower its cost.
    np.testing.assert_array_equal(
        mechanisms.get("gnmax").per_query_rdp(
            votes, {"sigma": 7.0}, answered=answered, orders=o, data_dependent=True
        ),
        analysis.gnmax_rdp(votes, sigma=7.0, orders=o),
    )


def test_expected_cost_is_the_reference_figure():
    votes = _votes()
    spec, p = mechanisms.get("confident-gnmax"), PARAMS["confident-gnmax"]
    kw = dict(threshold=60, sigma1=20, sigma2=10, orders=ORDERS)
    np.testing.assert_array_equal(
        spec.expected_rdp(votes, p, orders=ORDERS, data_dependent=True),
        analysis.confident_gnmax_rdp(votes, **kw),
    )
    pr = spec.pr_answered(votes, p)
    np.testing.assert_array_equal(
        pr, np.exp(analysis.threshold_log_pr_answered(votes, threshold=60, sigma=20))
    )
    np.testing.assert_array_equal(
        mechanisms.get("gnmax").pr_answered(votes, {"sigma": 1.0}), np.ones(300)
    )


def test_interactive_data_dependent_cost_needs_the_student():
    spec, votes = mechanisms.get("interactive-gnmax"), _votes(n=10)
    with pytest.raises(TypeError, match="needs the student"):
        spec.per_query_rdp(
            votes,
            PARAMS["interactive-gnmax"],
            answered=np.ones(10, bool),
            orders=ORDERS,
            data_dependent=True,
        )
    with pytest.raises(TypeError, match="needs student_probabilities"):
        spec.check_student(None, votes)
    with pytest.raises(TypeError, match="only used by interactive-gnmax, not gnmax"):
        mechanisms.get("gnmax").check_student(_student(votes), votes)


def test_draw_order_is_threshold_noise_then_argmax_noise():
    votes = _votes(n=50)
    p = PARAMS["confident-gnmax"]
    labels, answered, source = mechanisms.get("confident-gnmax").draw(
        votes, p, np.random.default_rng(9)
    )
    rng = np.random.default_rng(9)
    noise1, noise2 = rng.normal(0, 20.0, 50), rng.normal(0, 10.0, (50, 5))
    want_answered = votes.max(axis=1) + noise1 >= 60.0
    np.testing.assert_array_equal(answered, want_answered)
    np.testing.assert_array_equal(labels, np.where(want_answered, np.argmax(votes + noise2, 1), -1))
    assert set(source) == {"teachers", "none"} and labels.dtype == np.int64


def test_release_params():
    assert mechanisms.get("lnmax").release_params({"scale": 2.0}) is None
    assert mechanisms.get("gnmax").release_params({"sigma": 40.0}) == {
        "threshold": None,
        "sigma1": None,
        "sigma2": 40.0,
    }
    assert mechanisms.get("confident-gnmax").release_params(PARAMS["confident-gnmax"]) == {
        "threshold": 60.0,
        "sigma1": 20.0,
        "sigma2": 10.0,
    }
    # No GNSS release without the per-query student baseline (never a wrong sensitivity).
    assert mechanisms.get("interactive-gnmax").release_params(PARAMS["interactive-gnmax"]) is None


def test_no_string_dispatch_on_mechanism_names_outside_the_registry():
    root = Path(__file__).resolve().parents[3]
    names = "|".join(re.escape(n) for n in mechanisms.NAMES)
    dispatch = re.compile(rf'(==|!=|\bin)\s*\(?\s*"({names})"')
    report = sorted(p.relative_to(root).as_posix() for p in (root / "pate/run/report").glob("*.py"))
    assert report, "pate/run/report/*.py not found"
    for rel in (
        "pate/core/aggregators.py",
        *report,
        "pate/cli/commands/analyze.py",
        "pate/cli/commands/__init__.py",
        "student/select.py",
    ):
        text = (root / rel).read_text()
        assert not dispatch.search(text), f"{rel} branches on a mechanism name"


def test_the_stages_and_the_orchestration_ask_the_kind_never_a_flag_or_a_name():
    """Stages, config, planner, analysis, report, api, rundir and commands read what a run of a
    mechanism does from its kind (``spec.kind``): no flag of the spec, no mechanism name."""
    root = Path(__file__).resolve().parents[3]
    names = "|".join(re.escape(n) for n in mechanisms.NAMES)
    dispatch = re.compile(rf'(==|!=|\bin)\s*\(?\s*"({names})"')
    flag = re.compile(r"(?<!kind)\.(samples_private_records|releases_once|gives_label_scores)\b")
    files = sorted(
        {
            *(root / "pate/run/stages").glob("*.py"),
            *(root / "pate/cli/commands").glob("*.py"),
            *(root / "pate/run/config").glob("*.py"),
            *(root / "pate/run/report").glob("*.py"),
            *(root / "pate/run/planner").glob("*.py"),
            *(
                root / "pate/run" / f
                for f in (
                    "run_analysis.py",
                    "run_cost.py",
                    "utility_warnings.py",
                    "rundir.py",
                    "pipeline.py",
                )
            ),
            root / "pate/api.py",
        }
    )
    assert all(path.is_file() for path in files)
    assert len(files) > 20
    for path in files:
        text = path.read_text()
        assert not dispatch.search(text), f"{path.relative_to(root)} branches on a mechanism name"
        assert not flag.search(text), f"{path.relative_to(root)} reads a flag, not the kind"
        assert "samples_private_records" not in text


def test_the_kinds():
    assert {
        n: (k.reads_private_records, k.releases_once, k.gives_label_scores, k.trains_teachers)
        for n, k in mechanisms.KINDS.items()
    } == {
        "vote": (False, False, False, True),
        "sample": (True, False, False, False),
        "release": (True, True, True, False),
    }
    steps = dict(votes_stage="m:votes", aggregate_loop="m:loop")
    with pytest.raises(ValueError, match="reads the private records"):
        mechanisms.MechanismKind("once", "once", False, **steps, releases_once=True)
    with pytest.raises(ValueError, match='aggregate_loop must be "module:function"'):
        mechanisms.MechanismKind("vote", "no loop", False, "m:votes", "a loop")
    with pytest.raises(TypeError):
        mechanisms.KINDS["x"] = mechanisms.VOTE  # read-only
    for kind in mechanisms.KINDS.values():  # every built-in kind's steps exist
        assert callable(kind.step("votes_stage")) and callable(kind.step("aggregate_loop"))
    assert mechanisms.VOTE.step("aggregate_loop").__name__ == "aggregate_votes"

    @dataclasses.dataclass(frozen=True)
    class NotAKind(RandomizedResponse):
        kind = "vote"

    unknown = NotAKind(
        **{f.name: getattr(TOY, f.name) for f in dataclasses.fields(TOY)} | {"name": "unknown-kind"}
    )
    with pytest.raises(TypeError, match="its kind must be a mechanisms.MechanismKind"):
        mechanisms.register(unknown)
    assert "unknown-kind" not in mechanisms.REGISTRY
    for name in ("lnmax", "class-means"):  # only a kind's own draw applies
        spec = mechanisms.get(name)
        with pytest.raises(NotImplementedError, match="has no sample_votes"):
            spec.sample_votes(
                np.zeros((1, 2)),
                np.zeros((3, 2)),
                np.zeros(3, dtype=int),
                {},
                num_classes=2,
                rng=np.random.default_rng(0),
            )
    with pytest.raises(NotImplementedError, match="has no release_scores"):
        mechanisms.get("private-knn").release_scores(
            np.zeros((1, 2)),
            np.zeros((3, 2)),
            np.zeros(3, dtype=int),
            {},
            queries=1,
            num_classes=2,
            rng=np.random.default_rng(0),
            rule="lda",
        )


# --------------------------------------------------------------------------- a toy mechanism


@dataclasses.dataclass(frozen=True)
class RandomizedResponse(mechanisms.MechanismSpec):
    """Randomized response on the plurality vote: the plurality class with probability
    e^eps / (e^eps + m - 1), otherwise a uniformly random other class. One teacher can change
    the plurality, and the ratio of any output's probabilities under two pluralities is at most
    e^eps: pure eps-DP per query, with no data-dependent analysis."""

    def draw(self, votes, params, rng, *, student=None):
        n, m = votes.shape
        eps = params["rr_epsilon"]
        keep = rng.random(n) < math.exp(eps) / (math.exp(eps) + m - 1)
        other = np.floor(rng.random(n) * (m - 1)).astype(np.int64)
        plurality = votes.argmax(axis=1)
        labels = np.where(keep, plurality, other + (other >= plurality)).astype(np.int64)
        return labels, np.ones(n, dtype=bool), np.full(n, "teachers", dtype="<U9")

    def query_rdp_parts(self, votes, params, *, orders, data_dependent, student=None):
        # Pure eps-DP: the bound of LNMax's data-independent branch (LNMax(2/eps) is eps-DP).
        answer = analysis.lnmax_rdp(
            votes, scale=2.0 / params["rr_epsilon"], orders=orders, data_dependent=False
        )
        return np.zeros_like(answer), answer


TOY = RandomizedResponse(
    name="rr-toy",
    title="Randomized response (toy)",
    always_answers=True,
    params=(mechanisms.Param("rr_epsilon", "positive", "epsilon of one answer", "\u03b5\u2080"),),
    description="every query is answered with the plurality class, replaced by a random other "
    "class with a probability set by \u03b5\u2080. Every query is charged \u03b5\u2080.",
    reference="Warner 1965",
)


@pytest.fixture
def toy():
    mechanisms.register(TOY)
    try:
        yield TOY
    finally:
        mechanisms.unregister(TOY.name)
    assert "rr-toy" not in mechanisms.REGISTRY and "rr_epsilon" not in mechanisms.all_param_names()


def _toy_rdp(n, eps, orders=ORDERS):
    return n * np.minimum(orders * eps**2 / 2, eps)


def test_toy_mechanism_runs_through_the_aggregators(toy):
    votes = _votes(n=400)
    result = aggregate("rr-toy", votes, rr_epsilon=8.0, rng=np.random.default_rng(0))
    assert result.event.mechanism == "rr-toy" and result.event.params == {"rr_epsilon": 8.0}
    assert np.mean(result.labels == votes.argmax(axis=1)) > 0.95
    np.testing.assert_allclose(result.event.rdp_data_independent, _toy_rdp(400, 8.0), rtol=1e-12)
    with pytest.raises(TypeError, match="rr_epsilon is not a parameter of gnmax"):
        aggregate("gnmax", votes, sigma=1.0, rr_epsilon=1.0, rng=np.random.default_rng(0))

    agg = OnlineAggregator(
        "rr-toy", rr_epsilon=0.5, budget_eps=6.0, delta=1e-5, rng=np.random.default_rng(1)
    )
    online = agg.answer(votes)
    assert 0 < online.num_asked < 400 and "privacy budget" in online.stop_reason
    np.testing.assert_allclose(agg.total_rdp(), _toy_rdp(online.num_asked, 0.5), rtol=1e-12)
    assert (
        agg.epsilon()[0]
        <= 6.0
        < analysis.eps_from_rdp(_toy_rdp(online.num_asked + 1, 0.5), orders=ORDERS, delta=1e-5)[0]
    )
    with pytest.raises(TypeError, match="needs rr_epsilon"):
        OnlineAggregator("rr-toy", budget_eps=1.0, delta=1e-5, rng=np.random.default_rng(1))
    with pytest.raises(TypeError, match="unknown parameter"):
        OnlineAggregator(
            "rr-toy", rr_epsilom=1.0, budget_eps=1.0, delta=1e-5, rng=np.random.default_rng(1)
        )


def test_toy_mechanism_runs_through_pate_analyze(toy, tmp_path, capsys):
    votes = _votes(n=120)
    np.save(tmp_path / "votes.npy", votes)
    args = [
        "analyze",
        "--votes",
        str(tmp_path / "votes.npy"),
        "--mechanism",
        "rr-toy",
        "--delta",
        "1e-5",
    ]
    assert main([*args, "--rr-epsilon", "0.25", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    eps, order = analysis.eps_from_rdp(_toy_rdp(120, 0.25), orders=ORDERS, delta=1e-5)
    assert out["mechanism"] == "rr-toy" and out["params"] == {"rr_epsilon": 0.25}
    assert out["answered_kind"] == "all" and out["answered"] == 120
    assert out["eps_data_independent"] == pytest.approx(eps, rel=1e-12)
    assert out["eps_data_dependent"] == pytest.approx(eps, rel=1e-12)  # no data-dependent bound
    assert main(args) == 2
    assert "rr-toy needs --rr-epsilon" in capsys.readouterr().err
    assert main([*args, "--rr-epsilon", "1", "--sigma", "3"]) == 2
    assert "--sigma is not a parameter of rr-toy" in capsys.readouterr().err
