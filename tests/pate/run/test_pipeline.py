"""End to end: `pate run` on configs/digits.toml (seconds), resume, idempotent charging, bad configs."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from pate import analysis
from pate.cli import main
from pate.ledger import Ledger
from pate.run import rundir
from pate.run.config import build, load
from pate.run.pipeline import Pipeline
from pate.teachers.errors import ConfigError

REPO = pathlib.Path(__file__).resolve().parents[3]
DIGITS = REPO / "configs" / "digits.toml"
OUTPUTS = (rundir.VOTES, rundir.LABELS, rundir.ANSWERED)


def load_config(tmp, name, **aggregator):
    """The digits config with the noise seeded (exact noise: these tests compare outputs)."""
    return load(
        DIGITS, run_dir=str(tmp / name), overrides={"aggregator": {"noise_seed": 0, **aggregator}}
    )


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pipeline")
    ledger = tmp / "ledger.sqlite3"
    pipeline = Pipeline(load_config(tmp, "full"), progress=False, ledger_path=ledger)
    public = pipeline.run()  # the publishable report.json
    assert public == json.loads((pipeline.run_dir / "report.json").read_text())
    # the internal report holds every figure the tests below check
    report = json.loads((pipeline.run_dir / "private" / "report_internal.json").read_text())
    return pipeline, report, ledger


def test_every_stage_writes_its_outputs(full_run):
    pipeline, report, _ = full_run
    run_dir = pipeline.run_dir
    for name in (
        "config.json",
        "run.json",
        rundir.PARTITION,
        rundir.TEACHER_METRICS,
        rundir.TEACHER_PREDICTIONS,
        *OUTPUTS,
        rundir.AGGREGATE,
        "student.pt",
        rundir.STUDENT_METRICS,
        rundir.ANALYSIS,
        "report.json",
        "report.md",
        "report.html",
    ):
        assert (run_dir / name).is_file(), name
    for stage in ("partition", "teachers", "votes", "aggregate", "student", "analysis", "report"):
        assert (run_dir / rundir.STAGE_DIR / f"{stage}.json").is_file()
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["aggregator"]["mechanism"] == "confident-gnmax" and saved["run"]["seed"] == 0
    assert report["config"] == saved


def test_reported_epsilon_equals_analysis_recomputed_from_saved_votes(full_run):
    pipeline, report, _ = full_run
    run_dir, cfg = pipeline.run_dir, pipeline.config.to_dict()
    votes = np.load(run_dir / rundir.VOTES)
    answered = np.load(run_dir / "answered.npy")
    labels = np.load(run_dir / "labels.npy")
    asked = report["queries"]["asked"]
    assert np.all(labels[~answered] == -1) and np.all(labels[answered] >= 0)
    assert report["queries"]["answered"] == int(answered.sum())
    assert not answered[asked:].any()
    a = cfg["aggregator"]
    kw = dict(
        threshold=a["threshold"],
        sigma1=a["sigma1"],
        sigma2=a["sigma2"],
        orders=analysis.DEFAULT_ORDERS,
        answered=answered[:asked],
    )
    for dd, key in ((True, "eps_data_dependent"), (False, "eps_data_independent")):
        rdp = analysis.confident_gnmax_rdp(votes[:asked], data_dependent=dd, **kw)
        eps, _ = analysis.eps_from_rdp(
            rdp, orders=analysis.DEFAULT_ORDERS, delta=cfg["privacy"]["delta"]
        )
        assert report["privacy"][key] == pytest.approx(float(eps), rel=1e-12)
    p = report["privacy"]
    assert p["eps_data_dependent"] <= p["eps_data_independent"] <= p["eps_guarantee"] + 1e-12
    assert p["eps_data_independent"] <= cfg["privacy"]["budget_eps"]
    u = report["utility"]
    assert 0.6 < u["student_accuracy"] <= 1.0 and 0.6 < u["plurality_vote_accuracy"] <= 1.0


def test_the_ledger_holds_exactly_the_run_s_charge(full_run):
    pipeline, report, ledger_path = full_run
    with Ledger(ledger_path) as ledger:
        (dataset,) = ledger.datasets()
        events = ledger.events(dataset["digest"])
    assert [e.run_id for e in events] == [pipeline.ctx.state["run_id"] + ":aggregate"] * 2
    assert events[0].event.answered == report["queries"]["answered"]
    assert report["privacy"]["ledger"]["events"] == 2  # the answers and the sanitized release


def test_resume_after_a_crash_between_stages_gives_identical_outputs(full_run, tmp_path):
    first, report, _ = full_run
    ledger = tmp_path / "ledger.sqlite3"
    partial = Pipeline(load_config(tmp_path, "resumed"), progress=False, ledger_path=ledger)
    partial.run(until="votes")
    assert not (partial.run_dir / "labels.npy").exists()
    with pytest.raises(ConfigError, match="--resume"):
        Pipeline(load_config(tmp_path, "resumed"), progress=False, ledger_path=ledger)
    resumed = Pipeline(
        load_config(tmp_path, "resumed"), resume=True, progress=False, ledger_path=ledger
    )
    resumed.run()
    again = json.loads((resumed.run_dir / "private" / "report_internal.json").read_text())
    for name in OUTPUTS:
        np.testing.assert_array_equal(
            np.load(first.run_dir / name), np.load(resumed.run_dir / name)
        )
    for key in ("eps_data_independent", "eps_data_dependent", "eps_sanitized", "eps_guarantee"):
        assert again["privacy"][key] == report["privacy"][key]
    assert again["utility"]["student_accuracy"] == report["utility"]["student_accuracy"]


def test_crash_before_the_ledger_commit_writes_no_labels_and_resume_charges_once(
    tmp_path, monkeypatch
):
    from pate import ledger as ledger_module

    ledger_path = tmp_path / "ledger.sqlite3"
    pipeline = Pipeline(load_config(tmp_path, "crash"), progress=False, ledger_path=ledger_path)
    pipeline.run(until="votes")

    def crash(self, events):
        raise KeyboardInterrupt("simulated kill between drawing the answers and the ledger commit")

    monkeypatch.setattr(ledger_module.Reservation, "commit", crash)
    with pytest.raises(KeyboardInterrupt):
        Pipeline(
            load_config(tmp_path, "crash"), resume=True, progress=False, ledger_path=ledger_path
        ).run(until="aggregate")
    monkeypatch.undo()
    # Nothing uncharged reaches labels.npy; the drawn answers wait in the pending file.
    assert not (pipeline.run_dir / "labels.npy").exists()
    assert not (pipeline.run_dir / rundir.STAGE_DIR / "aggregate.json").exists()
    pending = np.load(pipeline.run_dir / rundir.PENDING)["labels"]
    with Ledger(ledger_path) as ledger:
        (dataset,) = ledger.datasets()
        assert ledger.events(dataset["digest"]) == []
    # The student refuses to train on them: the aggregate stage is not done.
    assert main(["train-student", "--run-dir", str(pipeline.run_dir), "--no-progress"]) != 0
    for _ in range(2):  # resuming twice never charges twice, and never redraws the answers
        Pipeline(
            load_config(tmp_path, "crash"), resume=True, progress=False, ledger_path=ledger_path
        ).run(until="aggregate")
    labels = np.load(pipeline.run_dir / "labels.npy")
    np.testing.assert_array_equal(labels, pending)
    assert not (pipeline.run_dir / rundir.PENDING).exists()
    with Ledger(ledger_path) as ledger:
        events = ledger.events(dataset["digest"])
    assert [e.event.mechanism for e in events] == ["confident-gnmax", "gnss-release"]
    assert events[0].event.answered == int((labels >= 0).sum())


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda t: t.replace("[student]", "[student]\nbogus = 1"),
            "unknown key(s) bogus in [student]",
        ),
        (lambda t: t.replace("[run]", "[runn]\n[run]"), "unknown table(s) [runn]"),
        (
            lambda t: t.replace("num_teachers = 10", 'num_teachers = "ten"'),
            "[partition] num_teachers must be an integer",
        ),
        (lambda t: t.replace("delta = 1e-5", ""), "[privacy] delta is required"),
        (lambda t: t.replace("sigma2 = 2.0", "sigma2 = -1.5"), "sigma2 must be > 0"),
        (
            lambda t: t.replace("release_beta = 0.1", "release_beta = 0.3"),
            "release_order (3.0) must be < 1/(2 release_beta)",
        ),
        (lambda t: t.replace("epochs = 40", "epochs = 0"), "epochs must be >= 1"),
        (lambda t: t.replace('method = "fixmatch"', 'method = "magic"'), "method"),
        (
            lambda t: t.replace('mechanism = "confident-gnmax"', 'mechanism = "gnmax"'),
            "needs sigma",
        ),
        (lambda t: t.replace("queries = 400", "queries = 100000"), "exceeds the 597 public items"),
        (
            lambda t: t.replace("num_teachers = 10", "num_teachers = 5000"),
            "exceeds the 1000 private records",
        ),
        (lambda t: t + '\n[data]\nname = "x"\n', "not valid TOML"),
    ],
)
def test_bad_config_is_a_clear_error_and_writes_nothing(tmp_path, capsys, edit, message):
    config = tmp_path / "bad.toml"
    config.write_text(edit(DIGITS.read_text()))
    run_dir = tmp_path / "run"
    ledger = tmp_path / "ledger.sqlite3"
    rc = main(["run", "--config", str(config), "--run-dir", str(run_dir), "--ledger", str(ledger)])
    err = capsys.readouterr().err
    assert rc != 0 and message in err, err
    assert "Traceback" not in err
    assert not run_dir.exists() and not ledger.exists()


def test_secure_mode_refuses_a_seed(tmp_path):
    config = tmp_path / "secure.toml"
    config.write_text(DIGITS.read_text().replace("seed = 0", "seed = 0\nsecure = true"))
    with pytest.raises(ConfigError, match="secure"):
        load(config)


def test_noise_comes_from_os_entropy_unless_the_noise_is_seeded(tmp_path):
    from pate.core.rng import SecureGenerator

    config = tmp_path / "secure.toml"
    config.write_text(DIGITS.read_text().replace("seed = 0", "secure = true"))
    pipeline = Pipeline(load(config, run_dir=str(tmp_path / "run")), progress=False)
    streams = pipeline.ctx.noise_streams()
    assert isinstance(streams.noise, SecureGenerator) and isinstance(
        streams.release, SecureGenerator
    )
    assert not (tmp_path / "run").exists()  # creating the pipeline writes nothing
    shipped = Pipeline(load(DIGITS, run_dir=str(tmp_path / "shipped")), progress=False)
    assert isinstance(shipped.ctx.noise_streams().noise, SecureGenerator)  # [run] seed = 0 or not
    seeded = Pipeline(load_config(tmp_path, "seeded"), progress=False)
    assert not isinstance(seeded.ctx.noise_streams().noise, SecureGenerator)
    assert not seeded.config.is_private and shipped.config.is_private


def test_release_plan_is_decided_from_public_quantities_only(tmp_path):
    from pate.run.stages.release import release_plan

    orders = analysis.DEFAULT_ORDERS
    fmnist = load(REPO / "configs" / "fashion_mnist.toml")
    plan = release_plan(fmnist, num_teachers=250, num_classes=10, orders=orders)
    assert plan["release"] and plan["fallback"] is None
    beta, order = fmnist.privacy.release_beta, fmnist.privacy.release_order
    finite = orders < 1 / (2 * beta)
    assert np.all(np.isfinite(plan["rdp"][finite])) and np.all(np.isinf(plan["rdp"][~finite]))
    at = int(np.argmin(np.abs(orders - order)))
    assert plan["rdp"][at] == analysis.gnss_rdp(
        beta=beta, sigma_ss=fmnist.privacy.release_sigma_ss, order=orders[at]
    )
    digits = load(DIGITS)
    assert release_plan(digits, num_teachers=10, num_classes=10, orders=orders)["release"]
    digits = digits.replace(
        "aggregator", noise=dict(digits.aggregator.noise, sigma2=1.5)
    )  # with 10 classes, C5/C6 fail at order 3
    plan = release_plan(digits, num_teachers=10, num_classes=10, orders=orders)
    assert not plan["release"] and "C5/C6" in plan["fallback"]
    lnmax = build(
        dict(
            digits.to_dict(),
            aggregator={"mechanism": "lnmax", "scale": 2.0, "budget_basis": "data-independent"},
        )
    )
    assert (
        "LNMax" in release_plan(lnmax, num_teachers=10, num_classes=10, orders=orders)["fallback"]
    )
    digits = load(DIGITS)
    digits = digits.replace(
        "privacy", release=False
    )  # switched off: no release, nothing charged for one
    plan = release_plan(digits, num_teachers=10, num_classes=10, orders=orders)
    assert not plan["release"] and "release = false" in plan["fallback"]


def test_the_planned_release_fits_the_budget_and_is_charged_with_the_answers(full_run):
    pipeline, report, ledger_path = full_run
    p = report["privacy"]
    assert p["eps_guarantee"] <= pipeline.config.privacy.budget_eps
    summary = json.loads((pipeline.run_dir / rundir.AGGREGATE).read_text())
    charged = [e["mechanism"] for e in summary["events"]]
    assert charged == ["confident-gnmax", "gnss-release"]  # the digits config releases
    assert summary["release"]["fallback"] is None and p["sanitized"]["noise_std"] > 0
    with Ledger(ledger_path) as ledger:
        (dataset,) = ledger.datasets()
        assert [e.event.mechanism for e in ledger.events(dataset["digest"])] == charged
    assert report["privacy"]["ledger"]["spent_eps"] == pytest.approx(p["eps_guarantee"], rel=1e-9)


def test_a_release_that_would_take_over_half_the_budget_is_skipped(tmp_path):
    config = tmp_path / "small.toml"
    config.write_text(DIGITS.read_text().replace("budget_eps = 1000.0", "budget_eps = 6.0"))
    pipeline = Pipeline(
        load(config, run_dir=str(tmp_path / "run")),
        progress=False,
        ledger_path=tmp_path / "ledger.sqlite3",
    )
    pipeline.run(until="aggregate")
    summary = json.loads((pipeline.run_dir / rundir.AGGREGATE).read_text())
    assert (
        summary["release"] is None
        and "more than half of the budget" in summary["release_plan"]["fallback"]
    )
    # one event per ledger round (a budget-limited run may take several), no release
    assert {e["mechanism"] for e in summary["events"]} == {"confident-gnmax"}
    assert len(summary["events"]) == summary["rounds"]
    assert 0 < summary["queries_asked"] and summary["eps_data_independent"] <= 6.0


def test_fork_run_reuses_the_votes_and_finishes_with_other_settings(full_run, tmp_path):
    from pate.run.pipeline import fork_run

    pipeline, report, _ = full_run
    config = pipeline.config.to_dict()
    config["run"]["run_dir"] = str(tmp_path / "fork")
    config["privacy"].update(ledger=False, release=False)
    config["aggregator"]["queries"] = 40
    config = build(config)
    target = fork_run(pipeline.run_dir, config)
    assert np.array_equal(np.load(target / rundir.VOTES), np.load(pipeline.run_dir / rundir.VOTES))
    forked = Pipeline(config, resume=True, progress=False).run()
    p = forked["privacy"]
    assert forked["queries"]["asked"] <= 40
    # No release asked for: the publishable report holds no sanitized epsilon at all (#51).
    assert "eps_sanitized" not in p and p["eps_guarantee"] >= p["eps_data_independent"]
    summary = json.loads((target / rundir.AGGREGATE).read_text())
    assert summary["release"] is None and "release = false" in summary["release_plan"]["fallback"]
    assert [e["mechanism"] for e in summary["events"]] == ["confident-gnmax"]
    with pytest.raises(ConfigError, match="source itself"):
        fork_run(target, config)
    unfinished = tmp_path / "empty"
    (unfinished / rundir.STAGE_DIR).mkdir(parents=True)
    with pytest.raises(ConfigError, match="has not finished"):
        fork_run(unfinished, config)


def _snapshot(folder: pathlib.Path) -> dict:
    """Every file under ``folder``: its bytes and modification time (the folders too)."""
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }


def _fork_config(pipeline, run_dir) -> dict:
    config = pipeline.config.to_dict()
    config["run"]["run_dir"] = str(run_dir)
    config["privacy"].update(ledger=False, release=False)
    return build(config)


def test_fork_never_deletes_what_it_did_not_create(full_run, tmp_path):
    from pate.run.pipeline import fork_run

    pipeline, _, _ = full_run
    source = pipeline.run_dir
    before = _snapshot(source)
    # a non-empty folder (on main: deleted with everything in it)
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    with pytest.raises(
        ConfigError,
        match=r"kept exists and is a folder that is not empty.*"
        r"pick a new directory, or remove it yourself",
    ):
        fork_run(source, _fork_config(pipeline, kept))
    assert (kept / "notes.txt").read_text() == "mine" and len(list(kept.iterdir())) == 1
    # a file
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        fork_run(source, _fork_config(pipeline, tmp_path / "afile"))
    assert (tmp_path / "afile").read_text() == "x"
    # a folder holding the source (on main: the source run itself was deleted)
    for holder in (source.parent, source.parent.parent):
        with pytest.raises(ConfigError, match="holds the source run"):
            fork_run(source, _fork_config(pipeline, holder))
    # the source itself, and a folder inside it (new or existing)
    with pytest.raises(ConfigError, match="source itself"):
        fork_run(source, _fork_config(pipeline, source))
    for inside in (source / "fork", source / "teachers", source / rundir.STAGE_DIR / ".." / "x"):
        with pytest.raises(ConfigError, match="inside the source run"):
            fork_run(source, _fork_config(pipeline, inside))
    assert _snapshot(source) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "kept"]  # no staging folder left


def test_fork_into_an_empty_folder_and_a_failed_fork_leaves_nothing(
    full_run, tmp_path, monkeypatch
):
    import shutil

    from pate.run.pipeline import fork_run

    pipeline, _, _ = full_run
    empty = tmp_path / "empty"
    empty.mkdir()
    target = fork_run(pipeline.run_dir, _fork_config(pipeline, empty))
    assert target == empty and (empty / "run.json").is_file() and (empty / rundir.VOTES).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]
    # a copy that fails half-way leaves neither the target nor a half-copied staging folder
    real_copy, calls = shutil.copy2, []

    def failing_copy(src, dst, *args, **kwargs):  # the second file copied: a full disk
        calls.append(src)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real_copy(src, dst, *args, **kwargs)

    monkeypatch.setattr(shutil, "copy2", failing_copy)
    with pytest.raises(OSError, match="No space"):
        fork_run(pipeline.run_dir, _fork_config(pipeline, tmp_path / "half"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]
