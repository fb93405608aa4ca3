"""Private-kNN through the pipeline: `pate run`, the stage commands and resume on digits (seconds).

No teachers (partition and teachers are recorded as skipped), public-fitted embeddings in the
votes stage, kNN histograms drawn inside each ledger round after its reservation from the run's
fresh noise, every asked query charged its data-independent cost, no sanitized release.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from pate import analysis, mechanisms
from pate.cli import main
from pate.ledger import Ledger
from pate.run import rundir
from pate.run.config import RunConfig, load, plan
from pate.run.pipeline import Pipeline
from pate.teachers.errors import ConfigError

PARTITION = (
    '[partition]\nnum_teachers = 10            # 100 private images per teacher\nmode = "random"\n'
)
CONFIDENT = 'mechanism = "confident-gnmax"\nthreshold = 7.0\nsigma1 = 2.0\nsigma2 = 2.0'
KNN = (
    'mechanism = "private-knn"\nk = 20\nsampling_rate = 0.3\nthreshold = 10\nsigma1 = 4\nsigma2 = 2'
)
EMBEDDING = '\n[knn]\nfeatures = "none"\ndims = 16\n'


def knn_config(small_digits, folder, *, replace=(), knn=EMBEDDING, name="knn.toml"):
    """configs/digits.toml with Private-kNN settings for digits instead of teachers."""
    return small_digits(
        folder, replace=((PARTITION, ""), (CONFIDENT, KNN), *replace), extra=knn, name=name
    )


def spend(path):
    with Ledger(path) as ledger:
        (dataset,) = ledger.datasets()
        return (
            ledger.summary(dataset["digest"])["spent"],
            [e.event for e in ledger.events(dataset["digest"])],
        )


def per_query_rdp(config):
    params = mechanisms.get("private-knn").validate(config.aggregator_params())
    return mechanisms.get("private-knn").worst_case_query_rdp(
        params, orders=config.privacy.order_grid()
    )


@pytest.fixture(scope="module")
def knn_run(tmp_path_factory, small_digits):
    tmp = tmp_path_factory.mktemp("knn")
    config = knn_config(small_digits, tmp)
    run_dir, ledger = tmp / "run", tmp / "ledger.sqlite3"
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
    return config, run_dir, ledger


def test_pate_run_end_to_end(knn_run):
    config, run_dir, ledger = knn_run
    for stage in ("partition", "teachers"):  # no teachers: recorded as skipped, with the reason
        info = json.loads((run_dir / rundir.STAGE_DIR / f"{stage}.json").read_text())
        assert info["skipped"] is True and "trains no teachers" in info["reason"]
    assert not any((run_dir / name).exists() for name in ("partition.npz", "teachers", "votes.npy"))
    emb = np.load(run_dir / rundir.KNN_EMBEDDINGS)
    assert emb["public"].shape == (597, 16) and emb["private"].shape == (1000, 16)
    assert emb["private_labels"].shape == (1000,)

    labels, answered = np.load(run_dir / "labels.npy"), np.load(run_dir / "answered.npy")
    a = json.loads((run_dir / rundir.ANALYSIS).read_text())
    p, q = a["privacy"], a["queries"]
    assert labels.shape == answered.shape == (597,)
    assert q["asked"] == 400 and not answered[400:].any()
    assert q["answered"] == answered.sum() > 0
    assert (labels[answered] >= 0).all() and (labels[~answered] == -1).all()
    assert a["utility"]["label_accuracy_answered"] > 0.8  # the neighbours do vote sensibly

    # the data-independent cost of every asked query, from the charged events
    summary = json.loads((run_dir / rundir.AGGREGATE).read_text())
    events = [analysis.PrivacyEvent.from_dict(e) for e in summary["events"]]
    assert [e.mechanism for e in events] == ["private-knn"] and events[0].queries == 400
    orders = load(config).privacy.order_grid()
    charged = sum(e.rdp_data_independent for e in events)
    eps = analysis.eps_from_rdp(charged, orders=orders, delta=1e-5)[0]
    assert p["eps_data_independent"] == pytest.approx(eps, rel=1e-12)
    np.testing.assert_allclose(charged, 400 * per_query_rdp(load(config)), rtol=1e-12)
    assert p["eps_guarantee"] == pytest.approx(eps, rel=1e-12)
    assert p["eps_data_dependent"] == p["eps_sanitized"] == p["eps_data_independent"]
    assert summary["release"] is None and p["sanitized"]["fallback"]
    spent, ledger_events = spend(ledger)
    assert spent == pytest.approx(p["eps_guarantee"], rel=1e-9)
    assert [e.mechanism for e in ledger_events] == ["private-knn"]

    report = (run_dir / "report.md").read_text()
    assert "Private-kNN" in report and "No sanitized release" in report
    assert "no teachers" in report and "Where the teachers trained" not in report
    assert (run_dir / "plots" / "epsilon_vs_answered_public.png").stat().st_size > 0
    for name in ("rdp_per_order",):  # internal (private/)
        assert (run_dir / rundir.PRIVATE_PLOTS_DIR / f"{name}.png").stat().st_size > 0
        assert not (run_dir / rundir.PLOTS_DIR / f"{name}.png").exists()
    assert not list(run_dir.rglob("vote_margins.png"))  # no votes, no vote-margin plot (#51)
    # the confusion matrix on the evaluation split: publishable only where that split is
    # declared public -- digits' is a built-in benchmark's test split (its source says so)
    assert a["utility"]["evaluation_public"] is True
    assert (run_dir / rundir.PLOTS_DIR / "confusion_matrix.png").stat().st_size > 0
    assert not (run_dir / rundir.PRIVATE_PLOTS_DIR / "confusion_matrix.png").exists()


def test_fork_run_reuses_the_embeddings(knn_run, tmp_path):
    import shutil

    from pate.run.pipeline import fork_run

    config_path, run_dir, shared = knn_run
    ledger = shutil.copy(shared, tmp_path / "ledger.sqlite3")  # the module's ledger stays as it is
    shutil.copy(f"{shared}.key", tmp_path / "ledger.sqlite3.key")  # a ledger goes with its key
    config = load(
        config_path,
        run_dir=str(tmp_path / "fork"),
        ledger=str(ledger),
        overrides={"aggregator": {"sigma2": 3.0, "queries": 50}},
    )
    fork_run(run_dir, config)
    Pipeline(config, resume=True, progress=False).run(until="aggregate")
    a, b = (
        np.load(run_dir / rundir.KNN_EMBEDDINGS),
        np.load(tmp_path / "fork" / rundir.KNN_EMBEDDINGS),
    )
    np.testing.assert_array_equal(a["private"], b["private"])
    assert json.loads((tmp_path / "fork" / rundir.AGGREGATE).read_text())["queries_asked"] == 50
    assert len(spend(ledger)[1]) == 2  # its own charge


def test_stage_commands_equal_pate_run_with_seeded_noise(tmp_path, small_digits, capsys):
    config = knn_config(small_digits, tmp_path)
    seeded = knn_config(
        small_digits,
        tmp_path,
        name="seeded.toml",
        replace=(("queries = 400", "queries = 400\nnoise_seed = 4"),),
    )
    whole, steps = tmp_path / "whole", tmp_path / "steps"
    assert (
        main(
            [
                "run",
                "--config",
                str(seeded),
                "--run-dir",
                str(whole),
                "--ledger",
                str(tmp_path / "whole.sqlite3"),
                "--no-progress",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "partition",
                "--config",
                str(config),
                "--run-dir",
                str(steps),
                "--ledger",
                str(tmp_path / "steps.sqlite3"),
            ]
        )
        == 0
    )
    for command in ("train-teachers", "vote"):
        assert main([command, "--run-dir", str(steps), "--no-progress"]) == 0, command
    assert main(["aggregate", "--run-dir", str(steps), "--noise-seed", "4"]) == 0
    assert main(["train-student", "--run-dir", str(steps), "--no-progress"]) == 0
    assert main(["analyze", "--run-dir", str(steps)]) == 0
    assert main(["report", str(steps)]) == 0
    out = capsys.readouterr().out
    assert "teachers: skipped, it does not apply to this run" in out and "no teachers" in out
    for name in ("labels.npy", "answered.npy"):
        np.testing.assert_array_equal(np.load(whole / name), np.load(steps / name))
    a, b = np.load(whole / rundir.KNN_EMBEDDINGS), np.load(steps / rundir.KNN_EMBEDDINGS)
    for key in a.files:
        np.testing.assert_array_equal(a[key], b[key])
    pa = json.loads((whole / rundir.ANALYSIS).read_text())["privacy"]
    pb = json.loads((steps / rundir.ANALYSIS).read_text())["privacy"]
    for key in ("eps_data_independent", "eps_guarantee", "rdp_data_independent"):
        assert pa[key] == pb[key], key
    assert spend(tmp_path / "whole.sqlite3")[0] == spend(tmp_path / "steps.sqlite3")[0] > 0

    # a user asking for teachers on a Private-kNN run is told why there are none (again)
    assert main(["train-teachers", "--run-dir", str(steps)]) == 0
    assert "trains no teachers" in capsys.readouterr().out


def test_the_noise_is_fresh_unless_seeded(tmp_path, small_digits):
    config = knn_config(small_digits, tmp_path)
    outputs = []
    for name in ("a", "b"):
        Pipeline(load(config, run_dir=str(tmp_path / name), ledger=False), progress=False).run(
            until="aggregate"
        )
        outputs.append(np.load(tmp_path / name / "labels.npy"))
    assert not np.array_equal(*outputs)  # fresh samples and noise: 400 queries never all agree
    assert load(config).aggregator.noise_seed is None


@pytest.mark.parametrize("ledger", [True, False])
def test_a_small_budget_answers_fewer_queries_and_is_never_exceeded(tmp_path, small_digits, ledger):
    config_path = knn_config(
        small_digits, tmp_path, replace=(("budget_eps = 1000.0", "budget_eps = 5.0"),)
    )
    config = load(
        config_path,
        run_dir=str(tmp_path / "run"),
        ledger=str(tmp_path / "ledger.sqlite3") if ledger else False,
    )
    Pipeline(config, progress=False).run(until="aggregate")
    summary = json.loads((tmp_path / "run" / rundir.AGGREGATE).read_text())
    asked, orders = summary["queries_asked"], config.privacy.order_grid()
    worst = per_query_rdp(config)
    assert 0 < asked < 400 and "privacy budget" in summary["stop_reason"]
    assert summary["eps_data_independent"] <= 5.0
    assert analysis.eps_from_rdp((asked + 1) * worst, orders=orders, delta=1e-5)[0] > 5.0
    assert not np.load(tmp_path / "run" / "answered.npy")[asked:].any()
    if ledger:
        spent, _ = spend(tmp_path / "ledger.sqlite3")
        assert spent == pytest.approx(summary["eps_data_independent"], rel=1e-9) and spent <= 5.0


def test_crash_before_the_ledger_commit_and_resume_charges_once(
    tmp_path, small_digits, monkeypatch
):
    from pate import ledger as ledger_module

    config = load(knn_config(small_digits, tmp_path), run_dir=str(tmp_path / "run"))
    ledger_path = tmp_path / "ledger.sqlite3"
    run_dir = tmp_path / "run"
    Pipeline(config, progress=False, ledger_path=ledger_path).run(until="votes")

    def crash(self, events):
        raise KeyboardInterrupt("simulated kill between drawing the answers and the ledger commit")

    monkeypatch.setattr(ledger_module.Reservation, "commit", crash)
    with pytest.raises(KeyboardInterrupt):
        Pipeline(config, resume=True, progress=False, ledger_path=ledger_path).run(
            until="aggregate"
        )
    monkeypatch.undo()
    assert not (run_dir / "labels.npy").exists()
    assert not (run_dir / rundir.STAGE_DIR / "aggregate.json").exists()
    pending = np.load(run_dir / rundir.PENDING)["labels"]
    with Ledger(ledger_path) as ledger:
        (dataset,) = ledger.datasets()
        assert ledger.events(dataset["digest"]) == []
    for _ in range(2):  # resuming twice never charges twice, and never redraws
        Pipeline(config, resume=True, progress=False, ledger_path=ledger_path).run(
            until="aggregate"
        )
    labels = np.load(run_dir / "labels.npy")
    np.testing.assert_array_equal(labels, pending)
    assert not (run_dir / rundir.PENDING).exists()
    _, events = spend(ledger_path)
    assert [e.mechanism for e in events] == ["private-knn"]
    assert events[0].queries == 400 and events[0].answered == int((labels >= 0).sum())


def test_the_embedding_is_fitted_on_public_data_only(tmp_path, small_digits, digits):
    """Changing a private record changes its own embedding and nothing else."""
    from pate.run import stages
    from pate.run.rundir import Run

    embeddings = []
    for name, shift in (("same", 0.0), ("changed", 1.0)):
        x = digits.private.x.copy()
        x[0] = np.clip(x[0] + shift, 0.0, 16.0)
        data = tmp_path / f"{name}.npz"
        np.savez(
            data,
            x_private=x,
            y_private=digits.private.y,
            x_public=digits.public.x,
            y_public=digits.public.y,
            x_evaluation=digits.evaluation.x,
            y_evaluation=digits.evaluation.y,
        )
        config = knn_config(
            small_digits,
            tmp_path,
            name=f"{name}.toml",
            replace=(('[data]\nname = "digits"', f'[data]\nname = "npz:{data}"\nrecords = 1000'),),
        )
        run = Run.create(load(config, ledger=False), progress=False, run_dir=tmp_path / name)
        stages.run_stage(run, "votes")
        embeddings.append(np.load(tmp_path / name / rundir.KNN_EMBEDDINGS))
    same, changed = embeddings
    np.testing.assert_array_equal(same["public"], changed["public"])
    np.testing.assert_array_equal(same["private"][1:], changed["private"][1:])
    assert not np.array_equal(same["private"][0], changed["private"][0])


def test_scatternet_features_on_digits(tmp_path, small_digits):
    from pate.run import stages
    from pate.run.rundir import Run

    config = knn_config(small_digits, tmp_path, knn='\n[knn]\nfeatures = "scatternet"\ndims = 16\n')
    run = Run.create(load(config, ledger=False), progress=False, run_dir=tmp_path / "run")
    info = stages.run_stage(run, "votes")
    assert info["features"] == "scatternet" and info["feature_count"] == 81 * 2 * 2
    assert np.load(tmp_path / "run" / rundir.KNN_EMBEDDINGS)["public"].shape == (597, 16)
    assert parsed_knn_run().knn_settings((1, 8, 8))["features"] == "scatternet"  # the default
    assert parsed_knn_run().knn_settings((64,))["features"] == "none"


def test_the_votes_stage_reads_scatternet_features_from_the_cache_of_an_earlier_run(
    tmp_path, small_digits, monkeypatch
):
    """Issue #33: a second run on the same data (another run directory beside the first) reads
    the features the first one cached; its embeddings are the same; the stage summary says so."""
    import stat

    from pate.run import stages
    from pate.run.rundir import Run

    monkeypatch.delenv("PATE_FEATURE_CACHE", raising=False)
    config = knn_config(small_digits, tmp_path, knn='\n[knn]\nfeatures = "scatternet"\ndims = 16\n')
    infos = []
    for name in ("first", "second"):
        run = Run.create(load(config, ledger=False), progress=False, run_dir=tmp_path / name)
        infos.append(stages.run_stage(run, "votes"))
    first, second = (i["feature_cache"] for i in infos)
    assert (first["misses"], first["hits"], second["misses"], second["hits"]) == (2, 0, 0, 2)
    assert first["root"] == str(tmp_path / ".feature-cache")
    assert stat.S_IMODE((tmp_path / ".feature-cache").stat().st_mode) == 0o700
    assert all(i["front_end_seconds"] >= 0 for i in infos)
    a, b = (np.load(tmp_path / name / rundir.KNN_EMBEDDINGS) for name in ("first", "second"))
    np.testing.assert_array_equal(a["public"], b["public"])
    np.testing.assert_array_equal(a["private"], b["private"])
    # [run] feature_cache = false: computed in memory, nothing written beside the run
    (tmp_path / "off").mkdir()
    off = knn_config(
        small_digits,
        tmp_path / "off",
        name="off.toml",
        replace=(("[run]", "[run]\nfeature_cache = false"),),
        knn='\n[knn]\nfeatures = "scatternet"\ndims = 16\n',
    )
    run = Run.create(load(off, ledger=False), progress=False, run_dir=tmp_path / "off" / "run")
    info = stages.run_stage(run, "votes")
    assert info["feature_cache"] is None and not (tmp_path / "off" / ".feature-cache").exists()
    np.testing.assert_array_equal(
        np.load(tmp_path / "off" / "run" / rundir.KNN_EMBEDDINGS)["private"], a["private"]
    )


@pytest.mark.parametrize(
    "replace, extra, message",
    [
        (("k = 20", "k = 2.5"), EMBEDDING, "[aggregator] k must be a whole number"),
        (("k = 20", "k = 0"), EMBEDDING, "[aggregator] k must be"),
        (
            ("[data]", "[partition]\nnum_teachers = 10\n[data]"),
            EMBEDDING,
            "[partition] does not apply",
        ),
        (("k = 20", "k = 20"), '\n[knn]\nfeatures = "pixels"\n', "[knn] features"),
        (("k = 20", "k = 20"), "\n[knn]\ndims = 0\n", "[knn] dims"),
        (("k = 20", "k = 20"), "\n[knn]\nbogus = 1\n", "unknown key(s) bogus in [knn]"),
        (
            ("k = 20", "k = 20"),
            '\n[knn]\nrule = "logistic"\n',
            "[knn] rule is how \"class-means\" labels from its release; 'private-knn' has none",
        ),
    ],
)
def test_bad_knn_settings_are_clear_errors(tmp_path, small_digits, replace, extra, message):
    config = knn_config(small_digits, tmp_path, replace=(replace,), knn=extra)
    with pytest.raises(ConfigError) as info:
        load(config)
    assert message in str(info.value)


def test_integer_k_and_knn_table_only_for_private_knn(tmp_path, small_digits):
    config = load(knn_config(small_digits, tmp_path, replace=(("k = 20", "k = 300"),)))
    assert config.aggregator.noise["k"] == 300
    gnmax = small_digits(tmp_path, extra=EMBEDDING, name="gnmax.toml")
    with pytest.raises(
        ConfigError, match=r"\[knn\] applies to the mechanisms that read the private records"
    ):
        load(gnmax)
    # issue #31: a mechanism with teachers may leave their number to the planner (pate.run.planner)
    given = load(small_digits(tmp_path, replace=((PARTITION, ""),), name="no-teachers.toml"))
    planned, _ = plan(given, given.load_data(cache=False))
    assert given.needs_plan and not planned.needs_plan
    assert planned.partition.num_teachers == planned.planned["filled"]["num_teachers"]["value"]


def test_the_packaged_fashion_mnist_config_costs_what_its_header_says():
    config = load("fashion-mnist-knn")
    assert config.aggregator.mechanism == "private-knn"
    assert config.to_dict()["knn"] == {"features": "scatternet", "dims": 64}
    eps = analysis.eps_from_rdp(
        2000 * per_query_rdp(config),
        orders=config.privacy.order_grid(),
        delta=config.privacy.delta,
    )[0]
    assert eps == pytest.approx(0.66, abs=0.005) and eps <= config.privacy.budget_eps


def test_another_runs_reservation_limits_the_rounds_to_what_the_ledger_holds(
    tmp_path, small_digits
):
    """A concurrent run's live reservation leaves room for fewer queries than the config's
    budget: the first round reserves exactly what fits, the next round finds no room and the
    stage stops on the ledger; the two runs together never pass the budget."""
    config = load(
        knn_config(small_digits, tmp_path, replace=(("budget_eps = 1000.0", "budget_eps = 5.0"),)),
        run_dir=str(tmp_path / "run"),
    )
    ledger_path = tmp_path / "ledger.sqlite3"
    Pipeline(config, progress=False, ledger_path=ledger_path).run(until="votes")
    orders, worst = config.privacy.order_grid(), per_query_rdp(config)
    eps = lambda n: analysis.eps_from_rdp(n * worst, orders=orders, delta=1e-5)[0]  # noqa: E731
    allowed = max(n for n in range(401) if eps(n) <= 5.0)  # what the config alone would allow
    held = allowed // 3
    with Ledger(ledger_path) as ledger:
        (dataset,) = ledger.datasets()
        other = ledger.reserve(
            dataset["digest"], orders=orders, rdp=held * worst, run_id="another-run"
        )
        Pipeline(config, resume=True, progress=False, ledger_path=ledger_path).run(
            until="aggregate"
        )
        summary = json.loads((tmp_path / "run" / rundir.AGGREGATE).read_text())
        asked = summary["queries_asked"]
        assert 0 < asked < allowed and "ledger" in summary["stop_reason"]
        assert eps(asked + held) <= 5.0 < eps(asked + held + 1)  # exactly what the ledger held
        assert summary["rounds"] == len(summary["events"]) == 1
        totals = ledger.summary(dataset["digest"])
        assert totals["spent_and_reserved"] <= 5.0 + 1e-9
        other.release()
    spent, events = spend(ledger_path)
    assert [e.queries for e in events] == [asked] and spent <= 5.0


def student_round(small_digits, folder, first_run, *, name="round2.toml"):
    """A second Private-kNN round: the first round's released student embeds."""
    return knn_config(
        small_digits,
        folder,
        name=name,
        knn=f'\n[knn]\nfeatures = "student"\nstudent_run = "{first_run}"\n',
    )


def test_a_second_round_embeds_with_the_first_rounds_student_and_composes_its_cost(
    knn_run, tmp_path, small_digits, digits
):
    config_path, _, _ = knn_run
    first_dir, ledger = tmp_path / "round1", tmp_path / "ledger.sqlite3"  # this test's own
    assert (
        main(
            [
                "run",
                "--config",
                str(config_path),
                "--run-dir",
                str(first_dir),
                "--ledger",
                str(ledger),
                "--no-progress",
            ]
        )
        == 0
    )
    config = student_round(small_digits, tmp_path, first_dir)
    run_dir = tmp_path / "round2"
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
    emb = np.load(run_dir / rundir.KNN_EMBEDDINGS)
    # square roots of the first student's class probabilities: unit rows, one column per class
    assert emb["public"].shape == (597, 10) and emb["private"].shape == (1000, 10)
    np.testing.assert_allclose((emb["private"].astype(np.float64) ** 2).sum(axis=1), 1.0, atol=1e-5)
    first = json.loads((first_dir / rundir.ANALYSIS).read_text())["privacy"]
    second = json.loads((run_dir / rundir.ANALYSIS).read_text())["privacy"]
    orders = np.asarray(second["orders"])
    composed = np.asarray(first["rdp_data_independent"]) + np.asarray(
        second["rdp_data_independent"]
    )
    eps = analysis.eps_from_rdp(composed, orders=orders, delta=1e-5)[0]
    # the guarantee covers both rounds: more than either alone, exactly their composition
    assert second["eps_guarantee"] == pytest.approx(eps, rel=1e-9)
    assert second["eps_guarantee"] > max(first["eps_guarantee"], second["eps_data_independent"])
    assert second["prior_rounds"]["runs"] == [
        {
            "run_dir": str(first_dir.resolve()),
            "run_id": json.loads((first_dir / rundir.AGGREGATE).read_text())["run_id"],
            "eps": pytest.approx(first["eps_guarantee"], rel=1e-9),
        }
    ]
    # the ledger holds both rounds against the one budget: its spend is the same composition
    spent, events = spend(ledger)
    assert [e.mechanism for e in events] == ["private-knn", "private-knn"]
    assert spent == pytest.approx(eps, rel=1e-9)
    report = (run_dir / "report.md").read_text()
    assert (
        "composed with the cost of the earlier rounds" in report
        and str(first_dir.resolve()) in report
    )
    # a third round composes all three (the chain is read from the ledger, run by run)
    third_dir = tmp_path / "round3"
    assert (
        main(
            [
                "run",
                "--config",
                str(student_round(small_digits, tmp_path, run_dir, name="round3.toml")),
                "--run-dir",
                str(third_dir),
                "--ledger",
                str(ledger),
                "--no-progress",
            ]
        )
        == 0
    )
    third = json.loads((third_dir / rundir.ANALYSIS).read_text())["privacy"]
    assert [r["run_dir"] for r in third["prior_rounds"]["runs"]] == [
        str(first_dir.resolve()),
        str(run_dir.resolve()),
    ]
    composed3 = composed + np.asarray(third["rdp_data_independent"])
    eps3 = analysis.eps_from_rdp(composed3, orders=orders, delta=1e-5)[0]
    assert third["eps_guarantee"] == pytest.approx(eps3, rel=1e-9)
    assert spend(ledger)[0] == pytest.approx(eps3, rel=1e-9)
    # the embedding is exactly the first round's released student (its saved weights)
    from pate.student.train import Student

    first_student = Student.load(first_dir / "student.pt")
    np.testing.assert_allclose(
        emb["public"], np.sqrt(first_student.predict_proba(digits.public.x)), rtol=1e-5, atol=1e-6
    )


def test_an_unusable_first_round_is_refused_before_anything_is_written(
    knn_run, tmp_path, small_digits, capsys
):
    config_path, first_dir, knn_ledger = knn_run
    own = tmp_path / "own.sqlite3"  # this test's ledger (knn_run's is only read)
    cases = []
    # no student yet
    unfinished = tmp_path / "unfinished"
    assert (
        main(
            [
                "run",
                "--config",
                str(config_path),
                "--run-dir",
                str(unfinished),
                "--ledger",
                str(own),
                "--until",
                "aggregate",
                "--no-progress",
            ]
        )
        == 0
    )
    cases.append((unfinished, own, "student.pt does not exist"))
    # charged to another ledger: this run's ledger could not compose the rounds
    cases.append((first_dir, own, "same ledger"))
    # seeded noise: not private
    seeded = tmp_path / "seeded"
    seeded_config = knn_config(
        small_digits, tmp_path, name="seeded.toml", replace=((KNN, KNN + "\nnoise_seed = 1"),)
    )
    assert (
        main(
            [
                "run",
                "--config",
                str(seeded_config),
                "--run-dir",
                str(seeded),
                "--ledger",
                str(own),
                "--no-progress",
            ]
        )
        == 0
    )
    cases.append((seeded, own, "seeded (not private)"))
    cases.append((tmp_path / "nowhere", own, "does not exist"))
    # an aggregate.json that understates what the ledger charged
    import shutil

    tampered = tmp_path / "tampered"
    shutil.copytree(first_dir, tampered)
    summary = json.loads((tampered / rundir.AGGREGATE).read_text())
    for event in summary["events"]:
        event["rdp_data_independent"] = [x / 2 for x in event["rdp_data_independent"]]
    (tampered / rundir.AGGREGATE).write_text(json.dumps(summary))
    cases.append((tampered, knn_ledger, "does not hold the charges of that run"))
    for i, (first, ledger_path, message) in enumerate(cases):
        config = student_round(small_digits, tmp_path, first, name=f"r{i}.toml")
        target = tmp_path / f"round2-{i}"
        assert (
            main(
                [
                    "run",
                    "--config",
                    str(config),
                    "--run-dir",
                    str(target),
                    "--ledger",
                    str(ledger_path),
                    "--no-progress",
                ]
            )
            == 2
        )
        err = capsys.readouterr().err
        assert "[knn] student_run" in err and message in err, err
        assert not target.exists()


@pytest.mark.parametrize(
    "knn, message",
    [
        ('\n[knn]\nfeatures = "student"\n', "go together"),
        ('\n[knn]\nstudent_run = "runs/x"\n', "go together"),
        ('\n[knn]\nfeatures = "student"\nstudent_run = "runs/x"\ndims = 8\n', "remove dims"),
    ],
)
def test_student_embedding_settings_are_checked(tmp_path, small_digits, knn, message):
    with pytest.raises(ConfigError, match=message):
        load(knn_config(small_digits, tmp_path, knn=knn))


def parsed_knn_run(**knn) -> RunConfig:
    """A parsed Private-kNN config with ``[knn]`` = ``knn`` (nothing else set)."""
    return RunConfig.parse(
        {
            "run": {"name": "x"},
            "data": {"name": "digits"},
            "aggregator": {"mechanism": "private-knn"},
            "privacy": {"delta": 1e-5, "release": False},
            "knn": knn,
        }
    )
