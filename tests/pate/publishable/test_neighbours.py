"""Issue #48, the neighbour test: a run on the private records D and a run on D plus one record,
with the charged mechanism's output held equal on purpose (the same answers, or the same
release, injected into both), publish byte-identical files -- the report (md, html, json), the
publishable plots, the plan and the exported bundle with the student -- for every mechanism.

Whatever else moves with the one record (the partition, the teachers, their votes, the exact
count, the data-dependent epsilon, the smooth sensitivity) may only reach the internal files.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

import pate
from pate import mechanisms
from pate.mechanisms.kinds import RELEASE

DIGITS_CLASSES = [str(i) for i in range(10)]
VOTE_NOISE = {
    "gnmax": {"sigma": 2.0},
    "confident-gnmax": {"threshold": 7.0, "sigma1": 2.0, "sigma2": 2.0},
    "lnmax": {"scale": 2.0},
}
RECORDS_NOISE = {
    "class-means": {"sigma": 3.0},
    "private-knn": {"k": 20, "sampling_rate": 0.3, "threshold": 10, "sigma1": 4, "sigma2": 2},
}


def flat(x):
    return x.reshape(len(x), -1)


def _fixed_answers(self, votes, params, rng, *, student=None):
    """The injected output of a vote mechanism: the same labels and answered mask for the same
    number of queries, whatever the votes and the noise."""
    n, m = votes.shape
    index = np.arange(n)
    answered = np.ones(n, dtype=bool) if self.always_answers else index % 3 != 0
    labels = np.where(answered, (7 * index) % m, -1).astype(np.int64)
    return labels, answered, np.where(answered, "teachers", "none").astype("<U9")


def _inject(monkeypatch, mechanism: str) -> None:
    """Hold the mechanism's charged output equal across the two runs: a vote mechanism answers
    :func:`_fixed_answers`; a release mechanism releases, in every run, from the records the
    first run gave it (D's embedded records), with a fixed noise stream: the same release."""
    spec_class = type(mechanisms.get(mechanism))
    if mechanisms.get(mechanism).kind is RELEASE:
        real = spec_class.release_scores
        first: list = []

        def same_release(self, public, private, private_labels, params, **kwargs):
            if not first:
                first.append((private, private_labels))
            kwargs["rng"] = np.random.default_rng(0)
            return real(self, public, *first[0], params, **kwargs)

        monkeypatch.setattr(spec_class, "release_scores", same_release)
    else:
        monkeypatch.setattr(spec_class, "draw", _fixed_answers)


def _digests(folder) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def _run(tmp_path, name: str, private, digits, mechanism: str) -> dict[str, str]:
    from sklearn.linear_model import LogisticRegression

    folder = tmp_path / name
    folder.mkdir()
    noise = VOTE_NOISE.get(mechanism) or RECORDS_NOISE[mechanism]
    teachers = (
        {}
        if mechanism in RECORDS_NOISE
        else {"teacher": LogisticRegression(max_iter=200), "num_teachers": 10}
    )
    knn = {"knn": {"features": "none", "dims": 16}} if mechanism in RECORDS_NOISE else {}
    result = pate.fit(
        private,
        flat(digits.public.x),
        evaluation=(flat(digits.evaluation.x), digits.evaluation.y),
        classes=DIGITS_CLASSES,
        records=1000,
        dataset="digits for the neighbour test",
        student=LogisticRegression(max_iter=300),
        mechanism=mechanism,
        queries=200,
        budget_eps=1000.0,
        ledger=folder / "ledger.sqlite3",
        run_dir=folder / "run",
        name="neighbours",
        **teachers,
        **knn,
        **noise,
    )
    run_dir = folder / "run"
    pate.export(run_dir, folder / "bundle")
    published = {f"bundle/{k}": v for k, v in _digests(folder / "bundle").items()}
    for name_ in ("report.md", "report.html", "report.json", "plan.json"):
        if (run_dir / name_).exists():
            published[name_] = hashlib.sha256((run_dir / name_).read_bytes()).hexdigest()
    published.update({f"plots/{k}": v for k, v in _digests(run_dir / "plots").items()})
    assert result.epsilon > 0
    return published


@pytest.mark.parametrize("mechanism", [*VOTE_NOISE, *RECORDS_NOISE])
def test_d_and_d_plus_one_publish_the_same_bytes(tmp_path, monkeypatch, digits, mechanism):
    x, y = flat(digits.private.x), digits.private.y
    d = (x[:-1], y[:-1])  # D: 999 records
    d_plus_one = (x, y)  # D plus one record
    _inject(monkeypatch, mechanism)
    published_d = _run(tmp_path, "d", d, digits, mechanism)
    published_d1 = _run(tmp_path, "d1", d_plus_one, digits, mechanism)
    assert "report.json" in published_d and "bundle/manifest.json" in published_d
    differing = sorted(
        k for k in published_d | published_d1 if published_d.get(k) != published_d1.get(k)
    )
    if differing:  # say which fields moved, for the one who has to fix it
        a = json.loads((tmp_path / "d" / "run" / "report.json").read_text())
        b = json.loads((tmp_path / "d1" / "run" / "report.json").read_text())
        moved = [k for k in a.keys() | b.keys() if a.get(k) != b.get(k)]
        pytest.fail(
            f"{mechanism}: files {differing} differ between D and D+1 (report.json: {moved})"
        )
