"""Budget and resume never strand work (issue #31, item 4): the run's worst case is checked in the
ledger before any teacher trains; a run's target epsilon and the dataset's lifetime budget are
separate settings; every hint the tool prints works when pasted; a run stopped by its budget
resumes without retraining once the budget is raised; errors name keyword arguments from Python
and TOML keys / flags from the CLI."""

from __future__ import annotations

import json
import re
import shlex

import pytest

import pate
from pate.cli import main
from pate.core.errors import BudgetExceededError
from pate.ledger import Ledger, dataset_identity
from pate.run import rundir
from pate.teachers.errors import ConfigError

HINT = re.compile(r"`(pate [^`]+)`")


def flat(split):
    return split.x.reshape(len(split.x), -1)


def _fit(digits, tmp_path, run, **kwargs):
    from sklearn.linear_model import LogisticRegression

    # one class-means release per run: the budget rules are the mechanism's kind's, and the
    # planner refuses teacher votes on 1000 records at these targets (the noise would drown them)
    args = dict(
        evaluation=(flat(digits.evaluation), digits.evaluation.y),
        records=1000,
        classes=[str(i) for i in range(10)],
        student=LogisticRegression(max_iter=300),
        mechanism="class-means",
        ledger=tmp_path / "ledger.sqlite3",
        run_dir=tmp_path / run,
    )
    args.update(kwargs)
    return pate.fit((flat(digits.private), digits.private.y), flat(digits.public), **args)


def _digest(digits):
    return dataset_identity(flat(digits.private), digits.private.y).digest


def _teacher_files(run_dir):
    return {
        p: p.stat().st_mtime_ns
        for p in sorted((run_dir / rundir.TEACHERS).rglob("*"))
        if p.is_file()
    }


# ------------------------------------------------------------------------------ Python


def test_readme_example_twice_the_second_is_refused_before_any_training(tmp_path):
    """README's pate.fit example, run twice on one ledger: the first spends its target (the
    dataset's lifetime budget, registered from it), the second is refused by the preflight --
    before partition, teachers or any file -- naming target_eps= and the Python call that
    raises the budget."""
    from sklearn.linear_model import LogisticRegression

    args = dict(
        teacher=LogisticRegression(max_iter=1000),
        student=LogisticRegression(max_iter=1000),
        num_teachers=50,
        mechanism="gnmax",
        target_eps=8.0,
        delta=1e-5,
        queries=100,
        ledger=tmp_path / "ledger.sqlite3",
    )
    first = pate.fit("digits", run_dir=tmp_path / "first", **args)
    assert first.epsilon <= 8.0 and (tmp_path / "first" / rundir.TEACHERS).is_dir()
    with pytest.raises(BudgetExceededError) as caught:
        pate.fit("digits", run_dir=tmp_path / "second", **args)
    message = str(caught.value)
    assert "target_eps=" in message and ".set_budget(" in message, message
    assert "[aggregator]" not in message and "[privacy]" not in message, message
    assert "Nothing was trained" in message
    assert not (tmp_path / "second").exists()  # no partition, no teachers/, no run.json
    # the suggested call is a working Python call: raising the budget lets the run go on
    call = re.search(r"`(pate\.ledger\.Ledger\([^`]+)`", message).group(1)
    exec(call, {"pate": pate})
    second = pate.fit("digits", run_dir=tmp_path / "second", **args)
    assert second.epsilon <= 8.0


def test_two_targets_on_one_lifetime_budget(tmp_path, digits):
    """target_eps is what a run spends, budget_eps the dataset's lifetime budget: a second
    pate.fit with another target and no budget_eps uses the ledger's budget; one that asks for
    more than is left is refused before training, with the numbers; an explicit, different
    budget_eps is refused naming budget_eps= and how to change the ledger's."""
    first = _fit(digits, tmp_path, "a", target_eps=3.0, budget_eps=6.0)
    second = _fit(digits, tmp_path, "b", target_eps=2.0)  # no budget_eps: the ledger's (6)
    assert first.epsilon <= 3.0 and second.epsilon <= 2.0
    with Ledger(tmp_path / "ledger.sqlite3") as ledger:
        summary = ledger.summary(_digest(digits))
    assert summary["budget"]["eps"] == 6.0  # registered once, never overwritten by a target
    assert 3.0 < summary["spent"] <= 6.0

    with pytest.raises(BudgetExceededError, match=r"target_eps=") as caught:
        _fit(digits, tmp_path, "c", target_eps=5.9)  # RDP: 3 + 2 + 4 would fit in 6
    assert re.search(r"eps=[0-9.]+ left", str(caught.value)), str(caught.value)
    assert not (tmp_path / "c").exists()

    with pytest.raises(ConfigError) as caught:
        _fit(digits, tmp_path, "d", target_eps=1.0, budget_eps=20.0)
    message = str(caught.value)
    assert "budget_eps=" in message and ".set_budget(" in message, message
    assert "[privacy]" not in message and "pate budget set" not in message, message
    assert not (tmp_path / "d").exists()


def test_a_new_dataset_without_any_budget_is_refused_naming_the_settings(tmp_path, digits):
    with pytest.raises(ConfigError, match=r"budget_eps=.*target_eps="):
        _fit(digits, tmp_path, "run", sigma=4.0)
    assert not (tmp_path / "run").exists()


def test_without_a_ledger_the_target_is_the_budget(tmp_path, digits):
    result = _fit(digits, tmp_path, "run", target_eps=3.0, ledger=False)
    assert result.epsilon <= 3.0
    assert json.loads((result.run_dir / "config.json").read_text())["privacy"]["budget_eps"] == 3.0


# ------------------------------------------------------------------------------ CLI


def _run(*args) -> int:
    return main([*map(str, args)])


def test_until_hint_works_when_pasted(tmp_path, small_digits, capsys, monkeypatch):
    """`pate run --config ... --until partition` prints a continue command: pasted, it
    continues the run (before, it failed with "configuration differs")."""
    monkeypatch.chdir(tmp_path)
    config = small_digits(tmp_path)
    assert _run("run", "--config", config, "--until", "partition", "--no-progress") == 0
    out = capsys.readouterr().out
    hint = re.search(r"continue with: (pate run .*)$", out, re.M).group(1)
    assert _run(*shlex.split(hint)[1:], "--until", "teachers", "--no-progress") == 0
    assert (tmp_path / "runs" / "digits" / rundir.STAGE_DIR / "teachers.json").is_file()
    # the stage commands' hint works too
    out = capsys.readouterr().out
    hint = re.search(r"continue with: (pate run .*)$", out, re.M).group(1)
    assert hint == "pate run --run-dir runs/digits --resume"


def test_budget_raised_resumes_without_retraining(tmp_path, small_digits, capsys):
    """A run whose budget ran out after its teachers trained is refused (exit 3) before its
    aggregate stage, with two commands: `pate budget set ...` and `pate run --run-dir ...
    --resume`. Pasted, they finish the run without retraining a teacher."""
    config, run_dir, ledger = small_digits(tmp_path), tmp_path / "run", tmp_path / "l.sqlite3"
    assert (
        _run(
            "run",
            "--config",
            config,
            "--run-dir",
            run_dir,
            "--ledger",
            ledger,
            "--until",
            "votes",
            "--no-progress",
        )
        == 0
    )
    teachers = _teacher_files(run_dir)
    assert teachers
    with Ledger(ledger) as opened:  # the data owner lowers the budget (or another run spent it)
        (dataset,) = [d["digest"] for d in opened.datasets()]
        opened.set_budget(dataset, eps=0.01, delta=1e-5)
    capsys.readouterr()
    assert _run("run", "--run-dir", run_dir, "--resume", "--no-progress") == 3
    err = capsys.readouterr().err
    assert "[aggregator]" not in err and "Nothing was trained" in err, err
    hints = HINT.findall(err)
    assert [h.split()[:3] for h in hints] == [
        ["pate", "budget", "set"],
        ["pate", "run", "--run-dir"],
    ], err
    assert not (run_dir / "labels.npy").exists()
    for hint in hints:
        extra = ["--no-progress"] if hint.startswith("pate run") else []
        assert _run(*shlex.split(hint)[1:], *extra) == 0, hint
    assert (run_dir / "report.json").is_file() and (run_dir / "labels.npy").is_file()
    assert _teacher_files(run_dir) == teachers  # not retrained: same files, same mtimes
    with Ledger(ledger) as opened:
        assert opened.summary(dataset)["spent"] > 0


def test_the_old_and_the_new_config_resume_after_the_budget_is_raised(
    tmp_path, small_digits, capsys
):
    config, run_dir, ledger = small_digits(tmp_path), tmp_path / "run", tmp_path / "l.sqlite3"
    assert (
        _run(
            "run",
            "--config",
            config,
            "--run-dir",
            run_dir,
            "--ledger",
            ledger,
            "--until",
            "teachers",
            "--no-progress",
        )
        == 0
    )
    teachers = _teacher_files(run_dir)
    with Ledger(ledger) as opened:
        (dataset,) = [d["digest"] for d in opened.datasets()]
    assert (
        _run(
            "budget",
            "set",
            "--dataset",
            dataset,
            "--eps",
            2000,
            "--delta",
            1e-5,
            "--ledger",
            ledger,
        )
        == 0
    )
    # the old config (budget_eps = 1000) resumes: the ledger's budget applies
    assert (
        _run(
            "run",
            "--config",
            config,
            "--run-dir",
            run_dir,
            "--ledger",
            ledger,
            "--resume",
            "--until",
            "votes",
            "--no-progress",
        )
        == 0
    )
    # a new config naming the new budget resumes too: the budget is no part of finished stages
    raised = small_digits(
        tmp_path, replace=(("budget_eps = 1000.0", "budget_eps = 2000.0"),), name="raised.toml"
    )
    assert (
        _run(
            "run",
            "--config",
            raised,
            "--run-dir",
            run_dir,
            "--ledger",
            ledger,
            "--resume",
            "--until",
            "aggregate",
            "--no-progress",
        )
        == 0
    )
    assert _teacher_files(run_dir) == teachers
    assert json.loads((run_dir / rundir.AGGREGATE).read_text())["budget_eps"] == 2000.0
    # a new run asking for another budget than the ledger's is refused in TOML words
    capsys.readouterr()
    assert (
        _run(
            "run",
            "--config",
            config,
            "--run-dir",
            tmp_path / "other",
            "--ledger",
            ledger,
            "--until",
            "partition",
            "--no-progress",
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "[privacy] budget_eps" in err and "pate budget set --dataset" in err, err
    assert "budget_eps=" not in err, err
    assert not (tmp_path / "other").exists()


def test_a_cli_run_whose_budget_is_spent_trains_nothing(tmp_path, small_digits, capsys):
    config, ledger = small_digits(tmp_path), tmp_path / "l.sqlite3"
    assert (
        _run(
            "run",
            "--config",
            config,
            "--run-dir",
            tmp_path / "a",
            "--ledger",
            ledger,
            "--until",
            "partition",
            "--no-progress",
        )
        == 0
    )
    with Ledger(ledger) as opened:
        (dataset,) = [d["digest"] for d in opened.datasets()]
        opened.set_budget(dataset, eps=0.01, delta=1e-5)
    capsys.readouterr()
    # [privacy] budget_eps left out: the ledger's lifetime budget applies
    unset = small_digits(tmp_path, replace=(("budget_eps = 1000.0", "#"),), name="unset.toml")
    assert (
        _run(
            "run",
            "--config",
            unset,
            "--run-dir",
            tmp_path / "b",
            "--ledger",
            ledger,
            "--no-progress",
        )
        == 3
    )
    err = capsys.readouterr().err
    assert "has no room for even one query" in err and "pate budget set --dataset" in err, err
    assert not (tmp_path / "b").exists()
    # nothing was started, so the hint is the budget command and this command again
    (command,) = HINT.findall(err)
    assert "then run this command again" in err and "--resume" not in err, err
    assert _run(*shlex.split(command)[1:]) == 0
    assert (
        _run(
            "run",
            "--config",
            unset,
            "--run-dir",
            tmp_path / "b",
            "--ledger",
            ledger,
            "--until",
            "partition",
            "--no-progress",
        )
        == 0
    )


def test_a_resume_with_a_changed_setting_names_it(tmp_path, small_digits, capsys):
    config, run_dir = small_digits(tmp_path), tmp_path / "run"
    assert (
        _run(
            "run", "--config", config, "--run-dir", run_dir, "--until", "partition", "--no-progress"
        )
        == 0
    )
    other = small_digits(
        tmp_path, replace=(("num_teachers = 10", "num_teachers = 12"),), name="other.toml"
    )
    capsys.readouterr()
    assert _run("run", "--config", other, "--run-dir", run_dir, "--resume", "--no-progress") == 2
    err = capsys.readouterr().err
    assert "[partition] num_teachers" in err and f"pate run --run-dir {run_dir} --resume" in err


def test_setting_names_follow_the_caller():
    from pate.run.config import assignment, budget_command, build, python_wording

    assert python_wording("[privacy] budget_eps") == "budget_eps="
    assert python_wording("[partition] num_teachers") == "num_teachers="
    assert python_wording("[student] epochs") == "student_params={'epochs': ...}"
    assert python_wording(assignment("student", "model", "mlp")) == "student='mlp'"
    command = budget_command(
        ledger="/l s", digest="d's", eps=2.5, delta=1e-5, conversion="improved"
    )
    assert python_wording(f"`{command}`, then run this command again") == (
        "`pate.ledger.Ledger('/l s').set_budget(\"d's\", eps=2.5, delta=1e-05, "
        "conversion='improved')`"
    )
    with pytest.raises(ConfigError, match=r"\[aggregator\] target_eps \(9") as caught:
        build(
            {
                "run": {"name": "x"},
                "data": {"name": "digits"},
                "partition": {"num_teachers": 5},
                "aggregator": {
                    "mechanism": "gnmax",
                    "sigma": "auto",
                    "target_eps": 9.0,
                    "queries": 10,
                },
                "privacy": {"delta": 1e-5, "budget_eps": 4.0, "release": False},
            },
        )
    # pate.fit words it for its caller, once (pate.api)
    assert "target_eps= (9, this run's spend) exceeds budget_eps= (4" in python_wording(
        str(caught.value)
    )
