"""A mechanism is a kind plus its own files: a toy mechanism of each kind, defined and registered
in THIS file alone, runs through `pate run` (small digits configs) and the report.

* ``toy-vote`` ("vote" kind): its own spec class -- a Gaussian noisy argmax of the teachers'
  votes, written here, its cost the GNMax RDP of ``pate.analysis``.
* ``toy-sample`` ("sample" kind): Private-kNN under another name.
* ``toy-release`` ("release" kind): class-means under another name, whose release is scored by
  the nearest noisy class mean whatever ``[knn] rule`` says.

No other source file names them (``test_only_this_file_registers_the_toys``): the stages, the
config, the planner, the analysis and the report ask the toy's kind, never its name.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

import numpy as np
import pytest

from pate import analysis, mechanisms
from pate.analysis.rdp import gnmax_rdp
from pate.cli import main
from pate.ledger import Ledger
from pate.run import rundir

REPO = pathlib.Path(__file__).resolve().parents[3]
CONFIDENT = 'mechanism = "confident-gnmax"\nthreshold = 7.0\nsigma1 = 2.0\nsigma2 = 2.0'
PARTITION = (
    '[partition]\nnum_teachers = 10            # 100 private images per teacher\nmode = "random"\n'
)
EMBEDDING = '\n[knn]\nfeatures = "none"\ndims = 16\n'
TOY_NAMES = ("toy-vote", "toy-sample", "toy-release")


@dataclasses.dataclass(frozen=True)
class ToyGaussianVote(mechanisms.MechanismSpec):
    """A "vote" mechanism written here: every query gets the argmax of the vote counts plus
    Gaussian noise of std ``sigma``; each query is charged the GNMax RDP."""

    def draw(self, votes, params, rng, *, student=None):
        noisy = votes + rng.normal(0.0, params["sigma"], size=votes.shape)
        n = votes.shape[0]
        return (
            np.argmax(noisy, axis=1).astype(np.int64),
            np.ones(n, dtype=bool),
            np.full(n, "teachers", dtype="<U9"),
        )

    def query_rdp_parts(self, votes, params, *, orders, data_dependent, student=None):
        answer = gnmax_rdp(
            votes, sigma=params["sigma"], orders=orders, data_dependent=data_dependent
        )
        return np.zeros_like(answer), answer


CLASS_MEANS = type(mechanisms.get("class-means"))


@dataclasses.dataclass(frozen=True)
class ToyNearestMean(CLASS_MEANS):
    """A "release" mechanism: the class-means release and cost, labelled by the nearest noisy
    class mean whatever the config's rule."""

    def release_scores(
        self, public, private, private_labels, params, *, queries, num_classes, rng, rule
    ):
        return super().release_scores(
            public,
            private,
            private_labels,
            params,
            queries=queries,
            num_classes=num_classes,
            rng=rng,
            rule="lda",
        )


TOYS = {
    "toy-vote": ToyGaussianVote(
        name="toy-vote",
        title="Toy vote",
        always_answers=True,
        params=(mechanisms.Param("sigma", "positive", "toy noise std", "\u03c3"),),
        reference="tests/pate/mechanisms/test_toy_mechanisms.py",
        description="the toy noisy argmax of the teachers' votes.",
    ),
    "toy-sample": dataclasses.replace(
        mechanisms.get("private-knn"), name="toy-sample", title="Toy sample"
    ),
    "toy-release": ToyNearestMean(
        **{
            f.name: getattr(mechanisms.get("class-means"), f.name)
            for f in dataclasses.fields(CLASS_MEANS)
        }
        | {"name": "toy-release", "title": "Toy release"}
    ),
}


@pytest.fixture(scope="module", autouse=True)
def toys():
    for spec in TOYS.values():
        mechanisms.register(spec)
    yield TOYS
    for name in TOYS:
        mechanisms.unregister(name)


def _config(small_digits, folder, mechanism: str, *, teachers: bool, queries: int) -> pathlib.Path:
    replace = ((CONFIDENT, mechanism), ("queries = 400", f"queries = {queries}"))
    if teachers:  # a linear teacher per shard: seconds
        return small_digits(
            folder, replace=(*replace, ('model = "cnn8"', 'model = "linear"')), name="toy.toml"
        )
    return small_digits(
        folder, replace=((PARTITION, ""), *replace), extra=EMBEDDING, name="toy.toml"
    )


def _run(
    small_digits, tmp_path, mechanism: str, *, teachers: bool, queries: int = 400
) -> tuple[pathlib.Path, list]:
    config = _config(small_digits, tmp_path, mechanism, teachers=teachers, queries=queries)
    run_dir, ledger = tmp_path / "run", tmp_path / "ledger.sqlite3"
    assert (
        main(
            [
                "run",
                "--config",
                str(config),
                "--run-dir",
                str(run_dir),
                "--ledger",
                str(ledger),
                "--no-progress",
            ]
        )
        == 0
    )
    with Ledger(ledger) as opened:
        (dataset,) = opened.datasets()
        events = [e.event for e in opened.events(dataset["digest"])]
    return run_dir, events


def _stage(run_dir: pathlib.Path, stage: str) -> dict:
    return json.loads((run_dir / rundir.STAGE_DIR / f"{stage}.json").read_text())


def _report(run_dir: pathlib.Path, spec) -> None:
    report = json.loads((run_dir / "report.json").read_text())
    assert json.dumps(report).count(spec.title) >= 1
    text = (run_dir / "report.md").read_text()
    assert spec.title in text and spec.description in text


def test_the_toys_have_their_kinds(toys):
    assert {n: mechanisms.get(n).kind for n in TOY_NAMES} == {
        "toy-vote": mechanisms.VOTE,
        "toy-sample": mechanisms.SAMPLE,
        "toy-release": mechanisms.RELEASE,
    }
    assert mechanisms.get("toy-release").released_statistic  # aggregate.json says what it is


def test_a_toy_vote_mechanism_runs_through_pate_run_and_the_report(
    tmp_path, small_digits, one_torch_thread
):
    spec = mechanisms.get("toy-vote")
    run_dir, events = _run(
        small_digits, tmp_path, 'mechanism = "toy-vote"\nsigma = 4.0', teachers=True
    )
    assert not _stage(run_dir, "teachers").get("skipped")  # the vote kind trains teachers
    summary = json.loads((run_dir / rundir.AGGREGATE).read_text())
    assert summary["mechanism"] == "toy-vote" and summary["queries_asked"] == 400
    labels, answered = np.load(run_dir / "labels.npy"), np.load(run_dir / "answered.npy")
    assert answered[:400].all() and not answered[400:].any() and (labels[:400] >= 0).all()
    assert not (run_dir / "label_scores.npy").exists()
    # the ledger charged what the toy's own cost says for the votes it answered
    (event,) = [e for e in events if e.mechanism == "toy-vote"]
    votes = np.load(run_dir / rundir.VOTES)[:400]
    want = gnmax_rdp(votes, sigma=4.0, orders=event.orders, data_dependent=False).sum(axis=0)
    np.testing.assert_allclose(event.rdp_data_independent, want, rtol=1e-12)
    assert event.queries == event.answered == 400
    _report(run_dir, spec)


def test_a_toy_sample_mechanism_runs_through_pate_run_and_the_report(
    tmp_path, small_digits, one_torch_thread
):
    spec = mechanisms.get("toy-sample")
    run_dir, events = _run(
        small_digits,
        tmp_path,
        'mechanism = "toy-sample"\nk = 50\n'
        "sampling_rate = 0.2\nthreshold = 15.0\nsigma1 = 4.0\nsigma2 = 2.0",
        teachers=False,
        queries=100,
    )
    assert _stage(run_dir, "partition")["skipped"] and _stage(run_dir, "teachers")["skipped"]
    assert (run_dir / rundir.KNN_EMBEDDINGS).exists() and not (run_dir / rundir.VOTES).exists()
    summary = json.loads((run_dir / rundir.AGGREGATE).read_text())
    assert summary["mechanism"] == "toy-sample" and summary["queries_asked"] == 100
    assert summary["knn"]["private_records"] == 1000
    # every asked query is charged the same data-independent cost, answered or not
    per_query = spec.worst_case_query_rdp(summary["params"], orders=events[0].orders)
    total = sum(np.asarray(e.rdp_data_independent) for e in events)
    np.testing.assert_allclose(total, 100 * per_query, rtol=1e-12)
    _report(run_dir, spec)


def test_a_toy_release_mechanism_runs_through_pate_run_and_the_report(
    tmp_path, small_digits, one_torch_thread
):
    spec = mechanisms.get("toy-release")
    run_dir, events = _run(
        small_digits, tmp_path, 'mechanism = "toy-release"\nsigma = 3.0', teachers=False
    )
    summary = json.loads((run_dir / rundir.AGGREGATE).read_text())
    assert summary["mechanism"] == "toy-release" and summary["queries_asked"] == 400
    assert summary["records"]["rule"] == "lda" and summary["records"]["statistic"]
    (event,) = events  # one release, charged once for every query
    cost = analysis.eps_from_rdp(
        np.asarray(event.rdp_data_independent), orders=event.orders, delta=1e-5
    )[0]
    assert cost == pytest.approx(summary["eps_data_independent"], rel=1e-12)
    scores, labels = np.load(run_dir / "label_scores.npy"), np.load(run_dir / "labels.npy")
    np.testing.assert_array_equal(labels[:400], np.argmax(scores[:400], axis=1))
    assert np.isnan(scores[400:]).all()
    _report(run_dir, spec)


def test_only_this_file_registers_the_toys():
    """Which source files name a toy (and so could register it): only this test file."""
    here = pathlib.Path(__file__).resolve()
    naming = {
        name: sorted(
            str(path.relative_to(REPO))
            for folder in ("pate", "tests", "benchmarks", "docs")
            for path in (REPO / folder).rglob("*")
            if path.suffix in (".py", ".md", ".toml")
            and path.is_file()
            and name in path.read_text(encoding="utf-8", errors="replace")
        )
        for name in TOY_NAMES
    }
    assert naming == {name: [str(here.relative_to(REPO))] for name in TOY_NAMES}
