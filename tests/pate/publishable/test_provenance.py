"""Issue #48, provenance: every field of the publishable report.json of a run of each cheap
mechanism on digits is named by the allow-list ``PUBLIC_FIELDS`` (declared, charged, derived or
constant, with the reason) and its condition holds; report.md and report.html show no number and
no string that only the internal report holds (the smooth sensitivity, the teachers' accuracy,
the student's accuracy on evaluation data not declared public, the run directory, ...).

The digits are given as one pool of marked rows (``npz:`` ``x, y, split``) whose evaluation
rows are not declared public: the built-in ``digits`` declares its evaluation split public (a
benchmark's test split), which would make the student's figures publishable and leave the
mechanisms without teachers nothing internal to check."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pate.cli import main
from pate.run import report as rep
from pate.run import rundir
from pate.run.report.publishable import (
    CONDITIONS,
    NOT_PUBLIC,
    PUBLIC_FIELDS,
    Public,
    field_of,
    leaf_paths,
)

PARTITION = (
    '[partition]\nnum_teachers = 10            # 100 private images per teacher\nmode = "random"\n'
)
CONFIDENT = 'mechanism = "confident-gnmax"\nthreshold = 7.0\nsigma1 = 2.0\nsigma2 = 2.0'
EMBEDDING = '\n[knn]\nfeatures = "none"\ndims = 16\n'
KNN = (
    'mechanism = "private-knn"\nk = 20\nsampling_rate = 0.3\nthreshold = 10\nsigma1 = 4\nsigma2 = 2'
)

#: The cheap mechanisms on digits: (replacements of configs/digits.toml, text appended).
MECHANISMS = {
    "confident-gnmax": ((), ""),
    "gnmax": (((CONFIDENT, 'mechanism = "gnmax"\nsigma = 2.0'),), ""),
    "lnmax": (((CONFIDENT, 'mechanism = "lnmax"\nscale = 2.0'),), ""),
    "class-means": (
        ((PARTITION, ""), (CONFIDENT, 'mechanism = "class-means"\nsigma = 3.0')),
        EMBEDDING,
    ),
    "private-knn": (((PARTITION, ""), (CONFIDENT, KNN)), EMBEDDING),
}

#: Figures of the internal report never to be seen in a publishable document (where present
#: and not also a public figure of the same run).
INTERNAL_FIGURES = (
    "privacy.sanitized.smooth_sensitivity",
    "privacy.sanitized.noise_std",
    "privacy.sanitized.eps_sanitized_upper_2std",
    "privacy.eps_data_dependent",
    "utility.teacher_mean_accuracy",
    "utility.teacher_accuracy_std",
    "utility.plurality_vote_accuracy",
    "utility.answered_plurality_agreement",
    "utility.student_accuracy",
    "utility.majority_class_rate",
)
INTERNAL_STRINGS = ("run.run_dir", "run.created", "run.run_id", "privacy.ledger.path")


def _at(doc: dict, path: str):
    for key in path.split("."):
        if not isinstance(doc, dict) or key not in doc:
            return None
        doc = doc[key]
    return doc


@pytest.fixture(scope="module")
def digits_pool(tmp_path_factory, digits) -> str:
    """The ``[data]`` table of digits' splits as one npz pool, each row marked private, public or
    evaluation (the evaluation rows not declared public: rows of the user's file), with the
    declared records and classes own data needs."""
    path = tmp_path_factory.mktemp("pool") / "digits-pool.npz"
    splits = (digits.private, digits.public, digits.evaluation)
    np.savez(
        path,
        x=np.concatenate([s.x for s in splits]),
        y=np.concatenate([s.y for s in splits]),
        split=np.repeat(["private", "public", "evaluation"], [len(s.y) for s in splits]),
    )
    classes = ", ".join(f'"{c}"' for c in range(10))
    return f'[data]\nname = "npz:{path}"\nrecords = 1000\nclasses = [{classes}]\n'


@pytest.fixture(scope="module", params=list(MECHANISMS))
def run(request, tmp_path_factory, small_digits, digits_pool):
    """A run of one mechanism on the digits pool: (run directory, report.json, the internal
    report)."""
    replace, extra = MECHANISMS[request.param]
    tmp = tmp_path_factory.mktemp(request.param)
    data = ('[data]\nname = "digits"\n', digits_pool)
    config = small_digits(tmp, replace=(data, *replace), extra=extra)
    run_dir = tmp / "run"
    argv = ["run", "--config", str(config), "--run-dir", str(run_dir), "--no-progress"]
    assert main([*argv, "--ledger", str(tmp / "ledger.sqlite3")]) == 0
    public = json.loads((run_dir / "report.json").read_text())
    internal = json.loads((run_dir / rundir.REPORT_INTERNAL_JSON).read_text())
    assert internal["privacy"]["mechanism"] == request.param
    assert internal["utility"]["evaluation_public"] is False  # rows of the pool, not declared
    return run_dir, public, internal


def test_the_allow_list_gives_a_reason_for_every_field():
    for path, entry in PUBLIC_FIELDS.items():
        assert isinstance(entry, Public), path
        assert entry.basis in ("declared", "charged", "derived", "constant"), path
        assert entry.reason.strip(), path
        assert entry.when is None or entry.when in CONDITIONS, path
    for path, reason in NOT_PUBLIC.items():
        assert reason.strip() and field_of(path) == (path, reason)
        assert any(path.startswith(key + ".") for key in PUBLIC_FIELDS), path  # a carve-out


def test_every_field_of_report_json_is_declared_charged_or_derived(run):
    _, public, internal = run
    assert "internal" not in public
    leaves = list(leaf_paths(public))
    assert len(leaves) > 50
    for path, _ in leaves:
        found = field_of(path)
        assert found is not None, f"report.json field {path} is in no allow-list entry"
        key, entry = found
        assert isinstance(entry, Public), f"report.json field {path}: {entry}"
        if entry.when is not None:
            assert CONDITIONS[entry.when](internal), f"{path}: {entry.when} does not hold"
    # and report.json is exactly the cut of the internal report by the allow-list
    assert public == rep.public_report(internal)


def test_the_publishable_documents_show_nothing_only_the_internal_report_holds(
    run, leaks, figure_renderings
):
    renderings, public_renderings = figure_renderings
    run_dir, public, internal = run
    allowed = public_renderings(public)
    texts = {
        name: (run_dir / name).read_text(encoding="utf-8")
        for name in ("report.md", "report.html", "report.json")
    }
    checked = 0
    for path in INTERNAL_FIGURES:
        for shown in renderings(_at(internal, path)) - allowed:
            checked += 1
            for name, text in texts.items():
                assert not leaks(text, shown, public), f"{name} shows {path} = {shown}"
    assert checked > 0
    for path in INTERNAL_STRINGS:
        value = _at(internal, path)
        if value:
            for name, text in texts.items():
                assert str(value) not in text, f"{name} holds {path}"
    for name, text in texts.items():
        assert "INTERNAL" not in text and rep.NOT_PRIVATE not in text, name


def test_the_publishable_plots_are_the_public_ones(run):
    run_dir, public, internal = run
    on_disk = sorted(p.name for p in (run_dir / "plots").iterdir())
    assert on_disk == sorted(f"{name}.png" for name in public["plots"])
    assert "confusion_matrix" not in public["plots"]  # the evaluation rows: not declared public
    hidden = sorted(p.name for p in (run_dir / rundir.PRIVATE_PLOTS_DIR).iterdir())
    assert hidden == sorted(f"{n}.png" for n in internal["plots"] if n not in public["plots"])


def _perturb_internal(analysis: dict) -> dict:
    """``analysis`` with every internal figure changed (still a valid analysis.json): what the
    private records decide beyond the charged outputs, and the operator's paths and times."""
    a = json.loads(json.dumps(analysis))
    a["run"].update(run_dir="/elsewhere/run", created="2030-01-01T00:00:00+00:00", run_id="x-1")
    p, u = a["privacy"], a["utility"]
    if p["ledger"] is not None:
        p["ledger"].update(path="/elsewhere/ledger.sqlite3", dataset="0" * 64)
    s = p["sanitized"]
    s.update(
        smooth_sensitivity=s["smooth_sensitivity"] * 1.5 + 0.25,
        noise_std=s["noise_std"] * 1.5 + 0.25,
        eps_sanitized_upper_2std=s["eps_sanitized_upper_2std"] + 7.0,
    )
    p["eps_data_dependent"] = p["eps_data_dependent"] * 0.5 + 0.125
    p["rdp_data_dependent"] = [v * 0.5 for v in p["rdp_data_dependent"]]
    p["order"] = p["orders"][3]
    a["curves"]["eps_data_dependent"] = [v * 0.5 for v in a["curves"]["eps_data_dependent"]]
    a["vote_margins"]["counts"] = a["vote_margins"]["counts"][::-1]
    for key in ("teacher_mean_accuracy", "plurality_vote_accuracy", "answered_plurality_agreement"):
        if u.get(key) is not None:
            u[key] = 1.0 - u[key] / 2
    u["student_accuracy"] = 1.0 - u["student_accuracy"] / 2
    u["majority_class_rate"] = 1.0 - u["majority_class_rate"] / 2
    u["confusion_matrix"][0][0] += 1
    u["evaluation_size"] += 1
    u["internal_warnings"] = [*u.get("internal_warnings", []), "Something only the votes say."]
    return a


def test_the_publishable_files_do_not_move_with_any_internal_figure(run, tmp_path):
    """Neighbouring data that leaves the charged outputs alone may move every internal figure:
    the publishable report.md, report.html, report.json and plots stay byte for byte the same."""
    run_dir, _, _ = run
    analysis = json.loads((run_dir / rundir.ANALYSIS).read_text())
    outputs = []
    for name, doc in (("same", analysis), ("moved", _perturb_internal(analysis))):
        folder = tmp_path / name
        (folder / rundir.ANALYSIS).parent.mkdir(parents=True)
        (folder / rundir.ANALYSIS).write_text(json.dumps(doc))
        rep.write_report(folder)
        public = sorted(["report.md", "report.html", "report.json"])
        public += sorted(
            f"{rundir.PLOTS_DIR}/{p.name}" for p in (folder / rundir.PLOTS_DIR).iterdir()
        )
        outputs.append({rel: (folder / rel).read_bytes() for rel in public})
    assert outputs[0] == outputs[1]
    internal = [
        (tmp_path / n / rundir.REPORT_INTERNAL_JSON).read_bytes() for n in ("same", "moved")
    ]
    assert internal[0] != internal[1]  # the internal report does show them


def test_a_figure_inside_a_public_one_is_no_leak_but_anywhere_else_it_is(leaks):
    public = {"utility": {"label_accuracy_answered": 0.951}}
    assert not leaks("labels: 95.1% right", "95.1", public)  # the public 95.1%
    assert leaks("labels: 95.1% right; smooth sensitivity 95.1", "95.1", public)
    assert leaks("smooth sensitivity 92.1", "92.1", public)
    assert not leaks("smooth sensitivity 92.15", "92.1", public)  # another number
