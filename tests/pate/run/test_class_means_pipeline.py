"""Noisy class means through the pipeline: `pate run`, the stage commands and resume on digits.

No teachers (partition and teachers recorded as skipped), public-fitted embeddings in the votes
stage, ONE release of the class sums drawn inside the ledger reservation from the run's fresh
noise and charged once whatever the number of queries, every asked query labelled, no
sanitized release.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from pate import analysis
from pate.analysis.class_means import class_means_rdp
from pate.cli import main
from pate.core.errors import BudgetExceededError
from pate.ledger import Ledger
from pate.run import report as rep
from pate.run import rundir
from pate.run.config import load, packaged_configs
from pate.run.config.tables import SOFT_TARGET_TEMPERATURE
from pate.run.pipeline import Pipeline, fork_run
from pate.teachers.errors import ConfigError

PARTITION = (
    '[partition]\nnum_teachers = 10            # 100 private images per teacher\nmode = "random"\n'
)
CONFIDENT = 'mechanism = "confident-gnmax"\nthreshold = 7.0\nsigma1 = 2.0\nsigma2 = 2.0'
EMBEDDING = '\n[knn]\nfeatures = "none"\ndims = 16\n'


def class_means_config(small_digits, folder, *, sigma=3.0, replace=(), name="cm.toml", rule=None):
    """configs/digits.toml with the class-means mechanism on a 16-dimensional public PCA (and
    ``[knn] rule = rule`` when given)."""
    knn = EMBEDDING + ("" if rule is None else f"rule = {rule!r}\n".replace("'", '"'))
    return small_digits(
        folder,
        replace=(
            (PARTITION, ""),
            (CONFIDENT, f'mechanism = "class-means"\nsigma = {sigma}'),
            *replace,
        ),
        extra=knn,
        name=name,
    )


def spend(path):
    with Ledger(path) as ledger:
        (dataset,) = ledger.datasets()
        return (
            ledger.summary(dataset["digest"])["spent"],
            [e.event for e in ledger.events(dataset["digest"])],
        )


@pytest.fixture(scope="module")
def cm_run(tmp_path_factory, small_digits):
    tmp = tmp_path_factory.mktemp("class-means")
    config = class_means_config(small_digits, tmp)
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


def test_pate_run_end_to_end(cm_run):
    config, run_dir, ledger = cm_run
    for stage in ("partition", "teachers"):
        info = json.loads((run_dir / rundir.STAGE_DIR / f"{stage}.json").read_text())
        assert info["skipped"] is True and "trains no teachers" in info["reason"]
    assert not any((run_dir / name).exists() for name in ("partition.npz", "teachers", "votes.npy"))
    labels, answered = np.load(run_dir / "labels.npy"), np.load(run_dir / "answered.npy")
    a = json.loads((run_dir / rundir.ANALYSIS).read_text())
    p, q = a["privacy"], a["queries"]
    assert labels.shape == answered.shape == (597,)
    assert q["asked"] == q["answered"] == 400 and answered[:400].all() and not answered[400:].any()
    assert (labels[:400] >= 0).all() and (labels[400:] == -1).all()
    # the rule's class scores are published with the labels: their argmax, NaN where unasked
    scores = np.load(run_dir / "label_scores.npy")
    assert scores.shape == (597, 10) and np.isnan(scores[400:]).all()
    np.testing.assert_array_equal(np.argmax(scores[:400], axis=1), labels[:400])
    assert (
        "the labelling rule's class scores of every item (label_scores.npy"
        in (run_dir / "report.md").read_text()
    )
    # the noisy means do label sensibly; the noise is fresh, so the bound sits far below its
    # spread: 3000 releases of this setting labelled 87.1 % +- 1.2 % right (min 82.5 %) with the
    # default count weight 0.3 (87.7 % +- 1.0 %, min 84.5 %, with 1); the earlier bound, 0.85,
    # failed about once in 120 runs
    assert a["utility"]["label_accuracy_answered"] > 0.80

    # one release, charged once: orders (1 + kappa^2) / (2 sigma^2), the default kappa = 0.3
    summary = json.loads((run_dir / rundir.AGGREGATE).read_text())
    events = [analysis.PrivacyEvent.from_dict(e) for e in summary["events"]]
    assert [(e.mechanism, e.queries, e.answered) for e in events] == [("class-means", 400, 400)]
    orders = load(config).privacy.order_grid()
    np.testing.assert_allclose(
        events[0].rdp_data_independent,
        class_means_rdp(sigma=3.0, count_weight=0.3, orders=orders),
        rtol=1e-15,
    )
    assert events[0].params == {"sigma": 3.0, "count_weight": 0.3}
    eps = analysis.eps_from_rdp(orders * 1.09 / 18.0, orders=orders, delta=1e-5)[0]
    assert p["eps_guarantee"] == pytest.approx(eps, rel=1e-12)
    assert p["eps_data_dependent"] == p["eps_sanitized"] == p["eps_data_independent"]
    assert summary["release"] is None and summary["records"]["private_records"] == 1000
    # one mechanism: the classic-composition comparison is for the release, not 400 queries
    assert p["composition"]["queries_composed"] == 1
    assert p["composition"]["basic_eps"] == p["composition"]["per_query_eps"] > 0
    assert summary["records"]["dims"] == 16 and summary["records"]["clip_radius"] > 0
    spent, ledger_events = spend(ledger)
    assert spent == pytest.approx(p["eps_guarantee"], rel=1e-9)
    assert [e.mechanism for e in ledger_events] == ["class-means"]

    report = (run_dir / "report.md").read_text()
    assert "Noisy class means" in report and "No sanitized release" in report
    assert "released once with Gaussian noise" in report and "the one release" in report
    assert "k nearest" not in report and "Where the teachers trained" not in report
    assert (
        'Labelling rule ([knn] rule = "lda", post-processing): each query gets the class' in report
    )


def test_the_cost_does_not_depend_on_the_number_of_queries(cm_run, tmp_path):
    config_path, run_dir, _ = cm_run
    eps = []
    for queries in (50, 597):
        config = load(
            config_path,
            run_dir=str(tmp_path / f"q{queries}"),
            ledger=False,
            overrides={"aggregator": {"queries": queries}},
        )
        fork_run(run_dir, config)
        Pipeline(config, resume=True, progress=False).run(until="aggregate")
        summary = json.loads((tmp_path / f"q{queries}" / rundir.AGGREGATE).read_text())
        assert summary["queries_answered"] == queries
        eps.append(summary["eps_data_independent"])
    assert eps[0] == eps[1] > 0


@pytest.mark.parametrize("ledger", [True, False])
def test_a_budget_below_the_release_draws_and_charges_nothing(tmp_path, small_digits, ledger):
    # sigma = 3 with the default count weight 0.3 costs eps 1.73 at delta = 1e-5 (the default
    # orders, classic conversion); a budget of 1 cannot hold it
    config = load(
        class_means_config(
            small_digits, tmp_path, replace=(("budget_eps = 1000.0", "budget_eps = 1.0"),)
        ),
        run_dir=str(tmp_path / "run"),
        ledger=str(tmp_path / "ledger.sqlite3") if ledger else False,
    )
    if ledger:  # the ledger cannot reserve the one release: refused before any stage ran
        with pytest.raises(BudgetExceededError, match="Nothing was trained, drawn or charged"):
            Pipeline(config, progress=False).run(until="votes")
        assert not (tmp_path / "run").exists()
        assert spend(tmp_path / "ledger.sqlite3") == (0.0, [])
        return
    Pipeline(config, progress=False).run(until="votes")
    with pytest.raises(BudgetExceededError, match="nothing was drawn or charged"):
        Pipeline(config, resume=True, progress=False).run(until="aggregate")
    assert not any(
        (tmp_path / "run" / name).exists()
        for name in (rundir.LABELS, rundir.ANSWERED, rundir.AGGREGATE, rundir.PENDING)
    )
    if ledger:
        assert spend(tmp_path / "ledger.sqlite3") == (0.0, [])


def test_crash_before_the_ledger_commit_and_resume_charges_once(
    tmp_path, small_digits, monkeypatch
):
    from pate import ledger as ledger_module

    config = load(class_means_config(small_digits, tmp_path), run_dir=str(tmp_path / "run"))
    ledger_path, run_dir = tmp_path / "ledger.sqlite3", tmp_path / "run"
    Pipeline(config, progress=False, ledger_path=ledger_path).run(until="votes")

    def crash(self, events):
        raise KeyboardInterrupt("simulated kill between drawing the release and the ledger commit")

    monkeypatch.setattr(ledger_module.Reservation, "commit", crash)
    with pytest.raises(KeyboardInterrupt):
        Pipeline(config, resume=True, progress=False, ledger_path=ledger_path).run(
            until="aggregate"
        )
    monkeypatch.undo()
    assert not (run_dir / "labels.npy").exists() and not (run_dir / "label_scores.npy").exists()
    pending = np.load(run_dir / rundir.PENDING)
    pending, pending_scores = pending["labels"], pending["scores"]
    drawn, events = spend(ledger_path)
    assert drawn > 0 and events == []  # the drawn reservation counts as spent: no event yet
    for _ in range(2):  # resuming twice never charges twice, and never redraws
        Pipeline(config, resume=True, progress=False, ledger_path=ledger_path).run(
            until="aggregate"
        )
    np.testing.assert_array_equal(np.load(run_dir / "labels.npy"), pending)
    np.testing.assert_array_equal(np.load(run_dir / "label_scores.npy"), pending_scores)
    assert not (run_dir / rundir.PENDING).exists()
    _, events = spend(ledger_path)
    assert [(e.mechanism, e.queries) for e in events] == [("class-means", 400)]


def test_the_noise_is_fresh_unless_seeded(tmp_path, small_digits):
    # a large sigma, so that two releases label the 400 queries differently
    config = class_means_config(small_digits, tmp_path, sigma=40.0)
    outputs = []
    for name in ("a", "b"):
        Pipeline(load(config, run_dir=str(tmp_path / name), ledger=False), progress=False).run(
            until="aggregate"
        )
        outputs.append(np.load(tmp_path / name / "labels.npy"))
    assert not np.array_equal(*outputs)
    assert load(config).aggregator.noise_seed is None


def test_stage_commands_equal_pate_run_with_seeded_noise(tmp_path, small_digits, capsys):
    config = class_means_config(small_digits, tmp_path, sigma=40.0)
    seeded = class_means_config(
        small_digits,
        tmp_path,
        sigma=40.0,
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
                "--until",
                "analysis",
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
    for name in ("labels.npy", "answered.npy"):
        np.testing.assert_array_equal(np.load(whole / name), np.load(steps / name))
    assert spend(tmp_path / "whole.sqlite3")[0] == spend(tmp_path / "steps.sqlite3")[0] > 0
    report = json.loads((whole / rundir.ANALYSIS).read_text())
    assert report["privacy"]["noise_seeded"] is True


@pytest.fixture
def no_gpu(monkeypatch):
    """This machine has no CUDA GPU (whatever the machine running the tests has)."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_a_missing_gpu_is_refused_before_the_release_is_drawn(
    tmp_path, small_digits, capsys, no_gpu
):
    # class-means trains no teachers: without this check the release was drawn and charged and
    # the run failed only in the student stage
    config = class_means_config(
        small_digits, tmp_path, replace=(('device = "cpu"', 'device = "cuda"'),)
    )
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
        == 2
    )
    err = capsys.readouterr().err
    assert "[run] device = 'cuda' (used by the student stage)" in err
    assert "no CUDA GPU is available" in err and "nothing was written, drawn or charged" in err
    assert not run_dir.exists()
    assert not ledger.exists() or spend(ledger) == (0.0, [])


def test_a_stage_that_needs_no_device_runs_and_the_student_stage_refuses_first(
    tmp_path, small_digits, capsys, no_gpu
):
    config = class_means_config(
        small_digits, tmp_path, replace=(('device = "cpu"', 'device = "cuda"'),)
    )
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
                "--until",
                "aggregate",
            ]
        )
        == 0
    )
    charged = spend(ledger)[0]
    saved = (run_dir / "config.json").read_text()
    assert main(["train-student", "--run-dir", str(run_dir), "--no-progress"]) == 2
    assert "[run] device = 'cuda'" in capsys.readouterr().err
    assert (
        main(["train-student", "--run-dir", str(run_dir), "--no-progress", "--device", "cuda:1"])
        == 2
    )
    assert "[run] device = 'cuda:1'" in capsys.readouterr().err
    # refused before anything was written: no student folder, the config as it was
    assert not (run_dir / "student").exists() and (run_dir / "config.json").read_text() == saved
    assert (
        main(["train-student", "--run-dir", str(run_dir), "--no-progress", "--device", "cpu"]) == 0
    )
    assert (run_dir / "student.pt").exists() and spend(ledger)[0] == charged > 0


def test_a_student_on_soft_targets_trains_to_the_published_scores(
    cm_run, small_digits, tmp_path, capsys, monkeypatch
):
    """`pate train-student --targets soft --temperature 5` after `pate run --until aggregate`:
    the student is trained to softmax(5 * label_scores) of the answered items (captured here),
    its metrics say so, and nothing more is charged."""
    from scipy.special import softmax

    from pate.student.train import Student

    run_dir, ledger = tmp_path / "run", tmp_path / "ledger.sqlite3"
    assert (
        main(
            [
                "run",
                "--config",
                str(class_means_config(small_digits, tmp_path)),
                "--run-dir",
                str(run_dir),
                "--ledger",
                str(ledger),
                "--no-progress",
                "--until",
                "aggregate",
            ]
        )
        == 0
    )
    charged, events = spend(ledger)
    seen = {}
    fit = Student.fit

    def spy(self, X, y, *, soft_targets=None):
        seen.update(y=np.asarray(y), targets=soft_targets)
        return fit(self, X, y, soft_targets=soft_targets)

    monkeypatch.setattr(Student, "fit", spy)
    assert (
        main(
            [
                "train-student",
                "--run-dir",
                str(run_dir),
                "--no-progress",
                "--targets",
                "soft",
                "--temperature",
                "5",
            ]
        )
        == 0
    )
    assert "accuracy" in capsys.readouterr().out
    scores, labels = np.load(run_dir / "label_scores.npy"), np.load(run_dir / "labels.npy")
    np.testing.assert_array_equal(seen["y"], labels)
    np.testing.assert_allclose(seen["targets"][:400], softmax(5 * scores[:400], axis=1), rtol=1e-12)
    assert (seen["targets"][400:] == 0).all()
    metrics = json.loads((run_dir / rundir.STUDENT_METRICS).read_text())
    assert metrics["targets"] == "soft" and metrics["temperature"] == 5.0
    assert metrics["settings"]["soft_targets"] is True
    assert json.loads((run_dir / "config.json").read_text())["student"]["targets"] == "soft"
    assert spend(ledger)[0] == charged > 0 and len(spend(ledger)[1]) == len(events) == 1
    # a run's student on hard labels (the default) says so too
    assert json.loads((cm_run[1] / rundir.STUDENT_METRICS).read_text())["targets"] == "hard"


@pytest.mark.parametrize("rule", ["logistic", "lda"])
def test_the_released_model_can_be_the_student_times_its_labelling_rule(
    cm_run, small_digits, tmp_path, rule
):
    """`pate train-student --targets soft --combine-with-rule` after `pate run --until
    aggregate`: the saved student predicts softmax(log p_student + log softmax(T * rule scores)),
    with the rule recovered from the published scores; reloading keeps it; nothing more is
    charged."""
    import torch
    from scipy.special import log_softmax, softmax

    from pate.core.labelling_rules import recover_rule
    from pate.student.train import Student
    from pate.teachers.data import load_pate_data
    from pate.teachers.public_embedding import PublicPCA

    run_dir, ledger = tmp_path / "run", tmp_path / "ledger.sqlite3"
    config = class_means_config(small_digits, tmp_path, rule=rule)
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
                "--until",
                "aggregate",
            ]
        )
        == 0
    )
    charged, events = spend(ledger)
    assert (
        main(
            [
                "train-student",
                "--run-dir",
                str(run_dir),
                "--no-progress",
                "--targets",
                "soft",
                "--temperature",
                "5",
                "--combine-with-rule",
            ]
        )
        == 0
    )
    metrics = json.loads((run_dir / rundir.STUDENT_METRICS).read_text())
    assert metrics["combined_with_rule"] is True and 0 <= metrics["student_alone_accuracy"] <= 1
    student = Student.load(run_dir / "student.pt")
    assert student.rule_product_ == {
        "features": "none",
        "rule": rule,
        "dims": 16,
        "temperature": 5.0,
    }
    # the same model by hand: the student alone (its network inside the product) times the
    # rule recovered from the published scores of the public embeddings
    data = load_pate_data("digits")
    cfg = load(config)
    x_eval = np.asarray(data.evaluation.x, dtype=np.float32)
    emb = np.load(run_dir / rundir.KNN_EMBEDDINGS)["public"]
    scores = np.load(run_dir / "label_scores.npy")
    recovered = recover_rule(emb, scores, rule=rule)  # NaN rows: the unasked items
    pca = PublicPCA.fit(np.asarray(data.public.x, dtype=np.float32)[: len(emb)], dims=16)
    with torch.no_grad():
        logits = student.model_.student(torch.from_numpy(x_eval)).double().numpy()
    expected = softmax(
        log_softmax(logits, axis=1)
        + log_softmax(5 * recovered.scores(pca.project(x_eval)), axis=1),
        axis=1,
    )
    np.testing.assert_allclose(student.predict_proba(x_eval), expected, atol=1e-5)
    assert metrics["accuracy"] == pytest.approx(np.mean(expected.argmax(1) == data.evaluation.y))
    assert bool(cfg.student.combine_with_rule) is False  # the flag lives in the run's config.json
    assert json.loads((run_dir / "config.json").read_text())["student"]["combine_with_rule"]
    assert spend(ledger)[0] == charged > 0 and len(spend(ledger)[1]) == len(events) == 1
    # the report says what is released, and the student's own accuracy beside it
    assert main(["run", "--run-dir", str(run_dir), "--resume", "--no-progress"]) == 0
    utility = json.loads((run_dir / rundir.ANALYSIS).read_text())["utility"]
    assert utility["student_accuracy"] == metrics["accuracy"]
    assert utility["student_alone_accuracy"] == metrics["student_alone_accuracy"]
    # measured on digits' evaluation split, a built-in benchmark's test split that its source
    # declares public: the student's figures are derived from the charged release and public
    # data, in both reports, unmarked
    assert utility["evaluation_public"] is True
    mark = "(**INTERNAL (do not publish):** evaluation data)"
    for name in (rundir.REPORT_INTERNAL_MD, rundir.REPORT_MD):
        report = (run_dir / name).read_text()
        assert "The released model is the student times its labelling rule" in report, name
        assert "| Student alone |" in report and mark not in report, name
        assert "items), times its labelling rule |" in report, name
    # measured on evaluation data not declared public (rows of the user's pool): the same
    # figures are in the internal report only, marked
    analysis_doc = json.loads((run_dir / rundir.ANALYSIS).read_text())
    analysis_doc["utility"]["evaluation_public"] = False
    undeclared = tmp_path / "undeclared"
    (undeclared / rundir.ANALYSIS).parent.mkdir(parents=True)
    (undeclared / rundir.ANALYSIS).write_text(json.dumps(analysis_doc))
    rep.write_report(undeclared)
    report = (undeclared / rundir.REPORT_INTERNAL_MD).read_text()
    assert "The released model is the student times its labelling rule" in report
    assert f"| Student alone {mark} |" in report
    assert f"items), times its labelling rule {mark} |" in report
    assert "Student alone" not in (undeclared / rundir.REPORT_MD).read_text()


def test_combining_with_the_rule_is_refused_without_soft_targets_or_a_pca_front_end(
    tmp_path, small_digits
):
    for student, message in (
        (
            "combine_with_rule = true",
            r"\[student\] combine_with_rule = true multiplies the "
            r"student with its labelling rule at the soft targets'",
        ),
        ('combine_with_rule = "yes"', r"combine_with_rule"),
    ):
        config = class_means_config(small_digits, tmp_path, name="bad.toml")
        config.write_text(config.read_text().replace("[student]\n", f"[student]\n{student}\n", 1))
        with pytest.raises(ConfigError, match=message):
            load(config)
    knn2 = tmp_path / "round2.toml"
    ok = class_means_config(small_digits, tmp_path, name="ok.toml")
    knn2.write_text(
        ok.read_text()
        .replace("[student]\n", '[student]\ntargets = "soft"\ncombine_with_rule = true\n', 1)
        .replace(
            'features = "none"\ndims = 16\n', 'features = "student"\nstudent_run = "runs/r1"\n'
        )
    )
    with pytest.raises(ConfigError, match=r"needs a PCA front-end"):
        load(knn2)
    ok.write_text(
        ok.read_text().replace(
            "[student]\n", '[student]\ntargets = "soft"\ncombine_with_rule = true\n', 1
        )
    )
    assert load(ok).student.combine_with_rule is True
    assert "combine_with_rule" not in load(ok).student_settings()


def test_a_rule_too_few_labels_pin_down_is_refused_before_the_student_trains(
    tmp_path, small_digits, monkeypatch, capsys
):
    """10 labelled items cannot determine a rule in 16 dims: the student stage fails at once,
    naming the key, and no student is trained or written."""
    from pate.student.train import Student

    config = class_means_config(
        small_digits, tmp_path, replace=(("queries = 400", "queries = 10"),)
    )
    config.write_text(
        config.read_text().replace(
            "[student]\n", '[student]\ntargets = "soft"\ncombine_with_rule = true\n', 1
        )
    )

    def trained(*args, **kwargs):
        raise AssertionError("the student trained before the rule was checked")

    monkeypatch.setattr(Student, "fit", trained)
    run_dir = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "--config",
                str(config),
                "--run-dir",
                str(run_dir),
                "--ledger",
                str(tmp_path / "ledger.sqlite3"),
                "--no-progress",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "[student] combine_with_rule = true: the labelling rule cannot be recovered" in err
    assert "the 10 labelled public rows do not determine a rule in 16 dims" in err
    assert not (run_dir / "student.pt").exists()


def test_soft_targets_are_refused_where_no_scores_are_published(tmp_path, small_digits):
    """A teacher run's aggregator releases a noisy argmax only: [student] targets = "soft" is a
    config error, as are a temperature without soft targets and bad values."""
    teachers = small_digits(tmp_path, name="teachers.toml")
    text = teachers.read_text().replace("[student]\n", '[student]\ntargets = "soft"\n', 1)
    assert text != teachers.read_text()
    teachers.write_text(text)
    with pytest.raises(
        ConfigError,
        match=r"\[student\] targets = \"soft\" needs class scores "
        r"for every query, which mechanism 'confident-gnmax'",
    ):
        load(teachers)
    for student, message in (
        (
            'targets = "probabilities"',
            r'\[student\] targets must be one of "hard", "soft", got \'probabilities\'',
        ),
        ("temperature = 5.0", r"\[student\] temperature applies to targets = \"soft\" only"),
        (
            'targets = "soft"\ntemperature = 0.0',
            r"\[student\] temperature must be a number > 0, got 0.0",
        ),
    ):
        config = class_means_config(small_digits, tmp_path, name="bad.toml")
        config.write_text(config.read_text().replace("[student]\n", f"[student]\n{student}\n", 1))
        with pytest.raises(ConfigError, match=message):
            load(config)
    ok = class_means_config(small_digits, tmp_path, name="ok.toml")
    ok.write_text(ok.read_text().replace("[student]\n", '[student]\ntargets = "soft"\n', 1))
    assert load(ok).student.soft_temperature() == SOFT_TARGET_TEMPERATURE == 10.0
    assert "targets" not in load(ok).student_settings()


def test_the_logistic_rule_labels_from_the_same_release(tmp_path, small_digits):
    """[knn] rule = "logistic": the same seeded release, the same one charge, and the labels are
    exactly pate.core.labelling_rules.public_logistic of that release (recomputed here from the run's
    embeddings and its seeded noise stream); aggregate.json and the report name the rule."""
    from pate.core.labelling_rules import linear_discriminant, public_logistic
    from pate.core.mean_release import noisy_class_means
    from pate.core.rng import make_streams
    from pate.core.tuned_defaults import LOGISTIC_RIDGE

    seed = ("queries = 400", "queries = 400\nnoise_seed = 5")
    lda = class_means_config(small_digits, tmp_path, name="lda.toml", replace=(seed,))
    logistic = class_means_config(
        small_digits, tmp_path, name="logistic.toml", replace=(seed,), rule="logistic"
    )
    labels = {}
    for name, config in (("lda", lda), ("logistic", logistic)):
        assert (
            main(
                [
                    "run",
                    "--config",
                    str(config),
                    "--run-dir",
                    str(tmp_path / name),
                    "--ledger",
                    str(tmp_path / f"{name}.sqlite3"),
                    "--no-progress",
                ]
            )
            == 0
        )
        labels[name] = np.load(tmp_path / name / "labels.npy")
        assert (
            f'Labelling rule ([knn] rule = "{name}", post-processing)'
            in (tmp_path / name / "report.md").read_text()
        )
        records = json.loads((tmp_path / name / rundir.AGGREGATE).read_text())["records"]
        assert records["rule"] == name
        assert records.get("ridge") == (LOGISTIC_RIDGE if name == "logistic" else None)
    (spent_lda, events_lda), (spent, events) = (
        spend(tmp_path / f"{name}.sqlite3") for name in ("lda", "logistic")
    )
    assert spent == spent_lda > 0
    assert [(e.mechanism, e.queries) for e in events] == [("class-means", 400)]
    np.testing.assert_array_equal(
        events[0].rdp_data_independent, events_lda[0].rdp_data_independent
    )
    e = np.load(tmp_path / "logistic" / rundir.KNN_EMBEDDINGS)
    release = noisy_class_means(
        e["public"],
        e["private"],
        e["private_labels"],
        sigma=3.0,
        count_weight=0.3,
        num_classes=10,
        rng=make_streams(5).noise,
    )
    np.testing.assert_array_equal(
        labels["lda"][:400], linear_discriminant(release, e["public"]).predict(e["public"][:400])
    )
    np.testing.assert_array_equal(
        labels["logistic"][:400], public_logistic(release, e["public"]).predict(e["public"][:400])
    )
    with pytest.raises(
        ConfigError, match=r'\[knn\] rule must be one of "lda", "logistic", "qda", got \'cubic\''
    ):
        load(class_means_config(small_digits, tmp_path, name="bad.toml", rule="cubic"))
    with pytest.raises(ConfigError, match=r"rule = \"qda\" reads each class's covariance"):
        load(class_means_config(small_digits, tmp_path, name="bad.toml", rule="qda"))


def test_the_count_weight_in_a_config(tmp_path, small_digits):
    # left out: the mechanism's default, in the parameters a run records and charges
    config = load(class_means_config(small_digits, tmp_path))
    assert "count_weight" not in config.aggregator.noise
    assert config.aggregator_params() == {"sigma": 3.0}
    given = load(
        class_means_config(small_digits, tmp_path, name="w.toml", sigma="2.0\ncount_weight = 1.0")
    )
    assert given.aggregator_params() == {"sigma": 2.0, "count_weight": 1.0}
    for value, message in (
        ("0.0", r"\[aggregator\] count_weight must be > 0, got 0.0"),
        ("-0.3", r"\[aggregator\] count_weight must be > 0, got -0.3"),
        ('"auto"', r"can calibrate sigma, not count_weight"),
        ('"heavy"', r"\[aggregator\] count_weight must be a number or \"auto\", got 'heavy'"),
    ):
        bad = class_means_config(
            small_digits, tmp_path, name="bad.toml", sigma=f"3.0\ncount_weight = {value}"
        )
        if value == '"auto"':
            bad.write_text(
                bad.read_text().replace("sigma = 3.0", 'sigma = "auto"\ntarget_eps = 1.0')
            )
        with pytest.raises(ConfigError, match=message):
            load(bad)
    missing = class_means_config(
        small_digits, tmp_path, name="missing.toml", sigma="3.0\ncount_weight = 0.3"
    )
    missing.write_text(missing.read_text().replace("sigma = 3.0\n", ""))
    with pytest.raises(
        ConfigError,
        match=r"mechanism = 'class-means' needs sigma \(optional: "
        r"count_weight \(default 0.3\)\); sigma is missing",
    ):
        load(missing)
    gnmax = small_digits(
        tmp_path,
        name="gnmax.toml",
        replace=((CONFIDENT, 'mechanism = "gnmax"\nsigma = 3.0\ncount_weight = 0.3'),),
    )
    with pytest.raises(ConfigError, match=r"count_weight do\(es\) not apply to 'gnmax'"):
        load(gnmax)


def test_the_packaged_fashion_mnist_config_costs_what_its_header_says():
    config = load("fashion-mnist-class-means")
    saved = config.to_dict()
    assert saved["aggregator"] == {
        **saved["aggregator"],
        "mechanism": "class-means",
        "sigma": 4.245,
        "count_weight": 0.3,
    }
    assert saved["knn"] == {"features": "scatternet", "dims": 512, "rule": "logistic"}
    orders = config.privacy.order_grid()
    eps = analysis.eps_from_rdp(
        class_means_rdp(sigma=4.245, count_weight=0.3, orders=orders),
        orders=orders,
        delta=config.privacy.delta,
        conversion="tight",
    )[0]
    assert config.privacy.conversion == "tight"
    assert eps == pytest.approx(0.9944, abs=5e-5) and eps <= config.privacy.budget_eps
    assert (
        "eps = 0.9944 at delta = 1e-5"
        in packaged_configs()["fashion-mnist-class-means"].read_text()
    )


def test_the_gpu_config_is_the_class_means_config_with_the_benchmarked_gpu_student():
    cpu = load("fashion-mnist-class-means").to_dict()
    gpu = load("fashion-mnist-class-means-gpu").to_dict()
    # the same release and labelling rule (so the same eps, the same records' budget)
    assert {t: v for t, v in gpu.items() if t not in ("run", "student")} == {
        t: v for t, v in cpu.items() if t not in ("run", "student")
    }
    assert gpu["run"] == {**cpu["run"], "name": "fashion-mnist-class-means-gpu", "device": "cuda"}
    # the settings of benchmarks/results/student_gpu_fmnist.json's soft-target rows (device call 8)
    student = gpu["student"]
    assert (student["model"], student["method"], student["batch_size"], student["ema_decay"]) == (
        "wrn16_4",
        "supervised",
        128,
        0.999,
    )
    assert student["epochs"] * student["steps_per_epoch"] == 5000
    results = (
        pathlib.Path(__file__).resolve().parents[3] / "benchmarks/results/student_gpu_fmnist.json"
    )
    rows = [r for r in json.loads(results.read_text())["rows"] if r.get("device_call") == 8]
    assert len(rows) == 9
    for row in rows:
        assert (
            row["model"],
            row["method"],
            row["batch_size"],
            row["ema_decay"],
            row["steps"],
            row["targets"],
            row["temperature"],
        ) == (
            student["model"],
            student["method"],
            student["batch_size"],
            student["ema_decay"],
            student["epochs"] * student["steps_per_epoch"],
            student["targets"],
            student["temperature"],
        )
    # the released model (the student times its rule) was measured with this very config
    # (device calls 11-13: the utility benchmark's class-means part, three times per target)
    assert student["combine_with_rule"] is True
    product_rows = [
        r for r in json.loads(results.read_text())["rows"] if r.get("device_call") in (11, 12, 13)
    ]
    assert sorted(r["target_eps"] for r in product_rows) == [0.5] * 3 + [1] * 3 + [2] * 3
    for row in product_rows:
        assert (
            row["combined_with_rule"] is True and "fashion_mnist_class_means_gpu" in row["command"]
        )
        assert (row["model"], row["steps"], row["temperature"]) == (
            student["model"],
            student["epochs"] * student["steps_per_epoch"],
            student["temperature"],
        )


def test_the_cpu_config_trains_its_student_to_the_rules_soft_targets():
    """The settings of the development runs listed in benchmarks/utility.py's TUNED_ON."""
    student = load("fashion-mnist-class-means").to_dict()["student"]
    assert (
        student["model"],
        student["method"],
        student["batch_size"],
        student["ema_decay"],
        student["pad"],
    ) == ("scatternet_cnn", "supervised", 128, 0.99, 2)
    assert student["epochs"] * student["steps_per_epoch"] == 3000
    assert load("fashion-mnist-class-means").student.soft_temperature() == 10.0
    # the GPU student's soft-target rows (device call 8) used the same temperature
    assert load("fashion-mnist-class-means-gpu").student.soft_temperature() == 10.0


def test_the_gpu_config_without_a_gpu_is_refused_before_the_data_is_read(
    tmp_path, monkeypatch, capsys, no_gpu
):
    from pate.teachers import data as data_module

    def unreadable(*args, **kwargs):
        raise AssertionError("the data was read before the device was checked")

    monkeypatch.setattr(data_module, "load_pate_data", unreadable)
    run_dir = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "--config",
                "fashion-mnist-class-means-gpu",
                "--run-dir",
                str(run_dir),
                "--ledger",
                str(tmp_path / "ledger.sqlite3"),
                "--no-progress",
            ]
        )
        == 2
    )
    assert "[run] device = 'cuda' (used by the student stage)" in capsys.readouterr().err
    assert not run_dir.exists() and not (tmp_path / "ledger.sqlite3").exists()


@pytest.mark.parametrize("count_weight", [None, 1.0])
def test_python_api_calibrates_one_release_for_a_target(tmp_path, digits, count_weight):
    import pate
    from pate.analysis.class_means import calibrate_class_means_sigma

    weight = {} if count_weight is None else {"count_weight": count_weight}
    result = pate.fit(
        (digits.private.x, digits.private.y),
        digits.public.x[:400],
        **weight,
        evaluation=(digits.evaluation.x, digits.evaluation.y),
        records=1000,
        classes=[str(i) for i in range(10)],
        mechanism="class-means",
        knn={"features": "none", "dims": 16, "rule": "logistic"},
        target_eps=1.0,
        student="cnn8",
        run_dir=tmp_path / "run",
        ledger=tmp_path / "ledger.sqlite3",
        student_params={
            "method": "supervised",
            "epochs": 1,
            "steps_per_epoch": 20,
            "targets": "soft",
            "temperature": 5.0,
        },
    )
    assert result.epsilon == pytest.approx(1.0, abs=1e-6) and result.epsilon <= 1.0
    # the rule's class scores come back with the labels, and the student trained to them
    assert result.label_scores.shape == (400, 10)
    np.testing.assert_array_equal(result.label_scores.argmax(axis=1), result.labels)
    metrics = json.loads((tmp_path / "run" / rundir.STUDENT_METRICS).read_text())
    assert (metrics["targets"], metrics["temperature"]) == ("soft", 5.0)
    records = json.loads((tmp_path / "run" / rundir.AGGREGATE).read_text())["records"]
    assert records["rule"] == "logistic"
    assert result.answered_mask.sum() == 400  # every public item, for the one release's cost
    kappa = 0.3 if count_weight is None else count_weight  # the mechanism's default, or given
    assert result.privacy["params"] == {
        "sigma": pytest.approx(
            calibrate_class_means_sigma(eps=1.0, delta=1e-5, count_weight=kappa), rel=1e-12
        ),
        "count_weight": kappa,
    }
    # the public items came without labels: no label accuracy can be measured (it read 0.0)
    assert result.report["utility"]["label_accuracy_answered"] is None


def test_a_table_with_enough_records_is_labelled_by_qda_end_to_end(tmp_path):
    """pate.fit with only target_eps on a table of nested shells (3 classes, 8 columns, 1100
    records per class: 44 features, 5 x 44 needed): the plan chooses the quadratic front-end and
    the "qda" rule, the run charges one release, and the report names the rule."""
    from sklearn.datasets import make_gaussian_quantiles

    import pate

    x, y = make_gaussian_quantiles(n_samples=4300, n_features=8, n_classes=3, random_state=7)
    x = x * [1.0, 100.0, 0.01, 1.0, 1.0, 10.0, 1.0, 1e3]
    plan = pate.plan(
        (x[:3300], y[:3300]),
        x[3300:4000],
        evaluation=(x[4000:], y[4000:]),
        records=3300,
        classes=["inner", "middle", "outer"],
        target_eps=2.0,
        ledger=False,
    )
    assert plan.filled["features"]["value"] == "quadratic" and plan.filled["rule"]["value"] == "qda"
    result = pate.fit(
        (x[:3300], y[:3300]),
        x[3300:4000],
        evaluation=(x[4000:], y[4000:]),
        records=3300,
        classes=["inner", "middle", "outer"],
        target_eps=2.0,
        ledger=False,
        run_dir=tmp_path / "run",
    )
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["knn"] == {"features": "quadratic", "rule": "qda"}
    assert config["student"]["targets"] == "soft" and config["student"]["temperature"] == 1.0
    records = json.loads((tmp_path / "run" / rundir.AGGREGATE).read_text())["records"]
    assert records["rule"] == "qda" and records["dims"] == 44
    assert max(records["class_separation"]["ratios"]) > 2  # the classes are placed: no warning
    assert (
        'Labelling rule ([knn] rule = "qda", post-processing)'
        in (tmp_path / "run" / "report.md").read_text()
    )
    assert result.epsilon <= 2.0 and result.utility["student_accuracy"] > 0.6


def test_a_class_the_release_cannot_place_is_named_before_the_student_trains(tmp_path, caplog):
    """pate.fit on a table where one declared class has 25 of 2 425 private records: at eps 1
    the noise on that class's released mean outweighs its distance from the others, so the
    aggregate stage (before the student stage) logs a warning naming it, the summary records
    the separation and the internal report repeats it; the common classes are not named."""
    import logging

    import pate
    from pate.core.release_check import CANNOT_PLACE

    rng = np.random.default_rng(3)
    centres = np.zeros((3, 8))
    centres[1, 0], centres[2, 1] = 3.0, 3.0
    y = np.repeat([0, 1, 2], [1200, 1200, 25])
    x = centres[y] + rng.normal(size=(len(y), 8))
    public = centres[rng.integers(0, 2, 800)] + rng.normal(size=(800, 8))
    y_eval = rng.integers(0, 3, 300)
    caplog.set_level(logging.WARNING, logger="pate.run.stages.aggregate_release")
    result = pate.fit(
        (x, y),
        public,
        evaluation=(centres[y_eval] + rng.normal(size=(300, 8)), y_eval),
        records=len(y),
        classes=["paid", "pending", "denied"],
        target_eps=1.0,
        ledger=False,
        run_dir=tmp_path / "run",
    )
    said = [r.getMessage() for r in caplog.records if r.name.endswith("aggregate_release")]
    assert len(said) == 1 and said[0].startswith(CANNOT_PLACE)
    assert "'denied'" in said[0] and "'paid' (" not in said[0] and "'pending' (" not in said[0]
    records = json.loads((tmp_path / "run" / rundir.AGGREGATE).read_text())["records"]
    assert records["class_separation"]["ratios"][2] < records["class_separation"]["warning_below"]
    internal = (tmp_path / "run" / rundir.REPORT_INTERNAL_MD).read_text()
    assert CANNOT_PLACE in internal and "'denied'" in internal
    assert [w for w in result.warnings if w.startswith(CANNOT_PLACE)] == said


def test_the_public_patch_features_run_end_to_end_and_travel_in_the_released_model(
    tmp_path, small_digits
):
    """[knn] features = "scatternet+patches": the release is drawn on ScatterNet plus k-means
    patch features fitted on the public split, charged once, and the released model (the
    student times its rule) carries the patch map: the student stage's own check that the
    torch head reproduces the published scores passes, and the saved model says which
    front-end it embeds with."""
    from pate.student.train import Student
    from pate.teachers.data import load_pate_data

    config = small_digits(
        tmp_path,
        replace=(
            (PARTITION, ""),
            (CONFIDENT, 'mechanism = "class-means"\nsigma = 3.0'),
            ("[student]\n", '[student]\ntargets = "soft"\ncombine_with_rule = true\n'),
        ),
        extra='\n[knn]\nfeatures = "scatternet+patches"\ndims = 16\nrule = "logistic"\n',
    )
    run_dir, ledger = tmp_path / "run", tmp_path / "ledger.sqlite3"
    args = ["run", "--config", str(config), "--run-dir", str(run_dir), "--ledger", str(ledger)]
    assert main([*args, "--no-progress"]) == 0
    with np.load(run_dir / rundir.KNN_EMBEDDINGS) as saved:
        assert saved["public"].shape[1] == 16
    charged, events = spend(ledger)
    assert charged > 0 and len(events) == 1
    student = Student.load(run_dir / "student.pt")
    assert student.rule_product_["features"] == "scatternet+patches"
    x_eval = np.asarray(load_pate_data("digits").evaluation.x, dtype=np.float32)
    proba = student.predict_proba(x_eval)
    np.testing.assert_allclose(proba.sum(axis=1), 1, atol=1e-5)
    metrics = json.loads((run_dir / rundir.STUDENT_METRICS).read_text())
    assert metrics["combined_with_rule"] is True
