"""A new mechanism kind touches its own files only: ``toy-gumbel-max``, defined in THIS file with
its own kind (:data:`TOY_KIND`, whose aggregate loop is :func:`toy_aggregate` here), its own
noise, its own analysis and its own event, registers in one line and runs end to end through
`pate run`, `pate.fit`, the report and the ledger, with no other file edited.

The mechanism: report-noisy-max with Gumbel noise of scale ``b`` on the teachers' vote counts,
which is the exponential mechanism: query i gets class j with probability softmax(v_i / b)_j.
One record changes one teacher's vote, so one count goes up by 1 and another down by 1; every
log-probability then moves by at most 1/b from its own count and 1/b from the normaliser:
epsilon = 2/b pure DP per query. Pure epsilon-DP gives RDP min(epsilon, alpha epsilon^2 / 2)
at every order alpha (Bun & Steinke 2016, Proposition 3.3, and the order-infinity bound), which
is the toy's data-independent cost; the test checks it against the exact Renyi divergence of
the two softmax distributions.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import ClassVar

import numpy as np
import pytest

import pate
from pate import mechanisms
from pate.analysis.accountant import PrivacyEvent
from pate.cli import main
from pate.ledger import Ledger
from pate.run import rundir

NAME = "toy-gumbel-max"
CONFIDENT = 'mechanism = "confident-gnmax"\nthreshold = 7.0\nsigma1 = 2.0\nsigma2 = 2.0'
DIGITS_CLASSES = [str(i) for i in range(10)]


# ---------------------------------------------------------------------------- its analysis


def toy_query_rdp(scale: float, orders: np.ndarray) -> np.ndarray:
    """Data-independent RDP of one query, (k,): epsilon = 2/b pure DP, as RDP."""
    eps = 2.0 / scale
    return np.minimum(eps, np.asarray(orders, dtype=float) * eps**2 / 2.0)


def toy_event(queries: int, *, scale: float, orders: np.ndarray) -> PrivacyEvent:
    """The event the toy charges: ``queries`` answered queries, each its data-independent RDP
    (the toy claims no data-dependent bound)."""
    rdp = queries * toy_query_rdp(scale, orders)
    return PrivacyEvent(NAME, {"scale": float(scale)}, orders, rdp, rdp, queries, queries)


# ---------------------------------------------------------------------------- its kind

#: The runs whose aggregate stage went through the toy kind's own loop (run directories).
LOOPED: list[pathlib.Path] = []


def toy_aggregate(run, spec, ledger, dataset, run_id):
    """The toy kind's aggregate loop: the vote kind's rounds (reserve, draw, commit), noted."""
    from pate.run.stages.aggregate_votes import aggregate_votes

    LOOPED.append(run.run_dir)
    return aggregate_votes(run, spec, ledger, dataset, run_id)


TOY_KIND = mechanisms.MechanismKind(
    "gumbel-vote",
    "a Gumbel noisy argmax of the teachers' votes",
    reads_private_records=False,
    votes_stage="pate.run.stages.votes:teacher_votes",
    aggregate_loop=f"{__name__}:toy_aggregate",
)


# ---------------------------------------------------------------------------- its mechanism


@dataclasses.dataclass(frozen=True)
class ToyGumbelMax(mechanisms.MechanismSpec):
    """Report-noisy-max with Gumbel noise (the module docstring)."""

    kind: ClassVar[mechanisms.MechanismKind] = TOY_KIND

    def draw(self, votes, params, rng, *, student=None):
        # Gumbel noise by inversion: the run's noise stream gives uniforms (and normals) only
        noisy = votes - params["scale"] * np.log(-np.log(rng.random(size=votes.shape)))
        n = votes.shape[0]
        return (
            np.argmax(noisy, axis=1).astype(np.int64),
            np.ones(n, dtype=bool),
            np.full(n, "teachers", dtype="<U9"),
        )

    def query_rdp_parts(self, votes, params, *, orders, data_dependent, student=None):
        answer = np.tile(toy_query_rdp(params["scale"], orders), (np.shape(votes)[0], 1))
        return np.zeros_like(answer), answer

    def event(self, votes, params, *, answered, orders, student=None):
        return toy_event(np.shape(votes)[0], scale=params["scale"], orders=np.asarray(orders))


TOY = ToyGumbelMax(
    name=NAME,
    title="Toy Gumbel max",
    params=(mechanisms.Param("scale", "positive", "Gumbel noise scale b", "b"),),
    always_answers=True,
    reference="tests/pate/mechanisms/test_toy_kind.py (the exponential mechanism)",
    description="every query gets the class whose vote count is largest after Gumbel noise.",
)


@pytest.fixture(scope="module", autouse=True)
def registered():
    mechanisms.register(TOY)
    yield TOY
    mechanisms.unregister(NAME)


# ---------------------------------------------------------------------------- the analysis holds


def _renyi(log_p: np.ndarray, log_q: np.ndarray, order: float) -> float:
    terms = order * log_p + (1.0 - order) * log_q
    return float((terms.max() + np.log(np.exp(terms - terms.max()).sum())) / (order - 1.0))


def _log_softmax(v: np.ndarray) -> np.ndarray:
    shifted = v - v.max()
    return shifted - np.log(np.exp(shifted).sum())


def test_the_toy_analysis_bounds_the_exact_renyi_divergence(rng):
    """For vote vectors and every neighbour (one teacher moves its vote), the exact divergence
    of the output distributions softmax(v / b) is at most the toy's RDP, at every order."""
    orders = np.array([1.25, 1.5, 2.0, 4.0, 8.0, 16.0, 64.0, 256.0])
    for scale in (0.5, 2.0, 8.0):
        bound = toy_query_rdp(scale, orders)
        worst = np.zeros_like(bound)
        for _ in range(40):
            v = rng.multinomial(20, rng.dirichlet(np.ones(4))).astype(float)
            for i, j in ((i, j) for i in range(4) for j in range(4) if i != j and v[i] > 0):
                w = v.copy()
                w[i], w[j] = w[i] - 1, w[j] + 1
                p, q = _log_softmax(v / scale), _log_softmax(w / scale)
                exact = np.array([_renyi(p, q, a) for a in orders])
                worst = np.maximum(worst, exact)
        assert np.all(worst <= bound + 1e-12), (scale, worst, bound)
        assert np.all(worst > 0.05 * bound)  # a bound of the right order, not a vacuous one


def test_the_toy_draws_the_exponential_mechanism(rng):
    """Its noise step: argmax of votes + Gumbel(b) is softmax(v / b)."""
    votes = np.tile([[6, 3, 1]], (20000, 1))
    labels, answered, _ = TOY.draw(votes, {"scale": 2.0}, pate.core.rng.make_streams(7).noise)
    freq = np.bincount(labels, minlength=3) / len(labels)
    want = np.exp(_log_softmax(np.array([6.0, 3.0, 1.0]) / 2.0))
    np.testing.assert_allclose(freq, want, atol=0.015)
    assert answered.all()


# ---------------------------------------------------------------------------- end to end


def _events(ledger_path: pathlib.Path) -> list[PrivacyEvent]:
    with Ledger(ledger_path) as opened:
        (dataset,) = opened.datasets()
        return [e.event for e in opened.events(dataset["digest"])]


def _check_report(run_dir: pathlib.Path) -> None:
    report = json.loads((run_dir / "report.json").read_text())
    assert TOY.title in json.dumps(report)
    text = (run_dir / "report.md").read_text()
    assert TOY.title in text and TOY.description in text


def test_pate_run_charges_the_toy_event(tmp_path, small_digits, one_torch_thread):
    config = small_digits(
        tmp_path,
        replace=(
            (CONFIDENT, f'mechanism = "{NAME}"\nscale = 4.0'),
            ("queries = 400", "queries = 200"),
            ('model = "cnn8"', 'model = "linear"'),
        ),
        name="toy.toml",
    )
    run_dir, ledger = tmp_path / "run", tmp_path / "ledger.sqlite3"
    argv = ["run", "--config", str(config), "--run-dir", str(run_dir), "--ledger", str(ledger)]
    assert main([*argv, "--no-progress"]) == 0
    summary = json.loads((run_dir / rundir.AGGREGATE).read_text())
    assert summary["mechanism"] == NAME and summary["queries_asked"] == 200
    assert LOOPED[-1] == run_dir  # the toy kind's own aggregate loop ran
    (event,) = [e for e in _events(ledger) if e.mechanism == NAME]
    want = toy_event(200, scale=4.0, orders=event.orders)
    np.testing.assert_allclose(event.rdp_data_independent, want.rdp_data_independent, rtol=1e-12)
    np.testing.assert_allclose(event.rdp, want.rdp, rtol=1e-12)
    assert event.queries == event.answered == 200
    _check_report(run_dir)


def test_pate_fit_runs_the_toy(tmp_path, digits):
    from sklearn.linear_model import LogisticRegression

    def flat(split):
        return split.x.reshape(len(split.x), -1)

    ledger = tmp_path / "ledger.sqlite3"
    result = pate.fit(
        (flat(digits.private), digits.private.y),
        flat(digits.public),
        evaluation=(flat(digits.evaluation), digits.evaluation.y),
        records=1000,
        classes=DIGITS_CLASSES,
        teacher=LogisticRegression(max_iter=200),
        student=LogisticRegression(max_iter=300),
        num_teachers=10,
        mechanism=NAME,
        scale=3.0,
        queries=100,
        budget_eps=100.0,
        ledger=ledger,
        run_dir=tmp_path / "run",
    )
    assert int(result.answered_mask.sum()) == 100 and np.all(result.labels[:100] >= 0)
    assert LOOPED[-1] == result.run_dir
    (event,) = [e for e in _events(ledger) if e.mechanism == NAME]
    want = toy_event(100, scale=3.0, orders=event.orders)
    np.testing.assert_allclose(event.rdp_data_independent, want.rdp_data_independent, rtol=1e-12)
    _check_report(result.run_dir)
