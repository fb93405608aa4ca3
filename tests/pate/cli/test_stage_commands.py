"""The stage subcommands run the same stage functions as `pate run` (issue #13).

A step-by-step CLI run and `pate run` with the same config and seeds (noise seeded in both) give
identical labels, analysis figures and ledger spend; flags map onto the stage's config table;
errors are one line and write nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from pate.cli import main
from pate.core.partition import Partition
from pate.ledger import Ledger
from pate.run import rundir

PRIVACY_KEYS = (
    "eps_data_independent",
    "eps_data_dependent",
    "eps_sanitized",
    "eps_guarantee",
    "rdp_data_independent",
    "rdp_data_dependent",
)


@pytest.fixture(scope="module")
def both_paths(tmp_path_factory, small_digits):
    """The same seeded config, once through `pate run`, once stage by stage."""
    tmp = tmp_path_factory.mktemp("paths")
    config = small_digits(tmp, replace=(("queries = 400", "queries = 400\nnoise_seed = 3"),))
    whole, steps = tmp / "whole", tmp / "steps"
    assert (
        main(
            [
                "run",
                "--config",
                str(config),
                "--run-dir",
                str(whole),
                "--ledger",
                str(tmp / "whole.sqlite3"),
                "--no-progress",
            ]
        )
        == 0
    )
    ledger = str(tmp / "steps.sqlite3")
    assert (
        main(["partition", "--config", str(config), "--run-dir", str(steps), "--ledger", ledger])
        == 0
    )
    for command in ("train-teachers", "vote", "aggregate", "train-student"):
        assert main([command, "--run-dir", str(steps), "--no-progress"]) == 0, command
    assert main(["analyze", "--run-dir", str(steps)]) == 0
    assert main(["report", str(steps)]) == 0
    return tmp, whole, steps


def _ledger_spend(path):
    with Ledger(path) as ledger:
        (dataset,) = ledger.datasets()
        s = ledger.summary(dataset["digest"])
        return s["spent"], [e.event.to_dict() for e in ledger.events(dataset["digest"])]


def test_step_by_step_equals_pate_run(both_paths):
    tmp, whole, steps = both_paths
    for name in (rundir.PARTITION, rundir.VOTES, rundir.LABELS, rundir.ANSWERED):
        a, b = np.load(whole / name), np.load(steps / name)
        if name.endswith(".npz"):
            assert sorted(a.files) == sorted(b.files)
            for key in a.files:
                np.testing.assert_array_equal(a[key], b[key])
        else:
            np.testing.assert_array_equal(a, b)
    pa = json.loads((whole / rundir.ANALYSIS).read_text())["privacy"]
    pb = json.loads((steps / rundir.ANALYSIS).read_text())["privacy"]
    for key in PRIVACY_KEYS:
        assert pa[key] == pb[key], key
    spend_a, events_a = _ledger_spend(tmp / "whole.sqlite3")
    spend_b, events_b = _ledger_spend(tmp / "steps.sqlite3")
    assert spend_a == spend_b > 0 and events_a == events_b
    for name in (rundir.AGGREGATE, rundir.STUDENT_METRICS):  # same files, same keys
        assert set(json.loads((whole / name).read_text())) == set(
            json.loads((steps / name).read_text())
        )
    for name in ("report.md", "report.html", "report.json"):
        assert (steps / name).is_file()
    for stage in ("partition", "teachers", "votes", "aggregate", "student", "analysis", "report"):
        assert (steps / rundir.STAGE_DIR / f"{stage}.json").is_file()


def test_a_finished_stage_is_not_run_twice(both_paths, capsys):
    _, _, steps = both_paths
    before = (steps / "labels.npy").read_bytes()
    assert main(["aggregate", "--run-dir", str(steps)]) == 2
    assert "already done" in capsys.readouterr().err
    assert (steps / "labels.npy").read_bytes() == before
    assert main(["aggregate", "--run-dir", str(steps), "--sigma2", "9"]) == 2
    assert "already ran" in capsys.readouterr().err


def test_flags_override_their_stage_s_table_and_are_saved(tmp_path, small_digits, capsys):
    config = small_digits(tmp_path)
    run = tmp_path / "run"
    # a mode that is not offered (a class-by-class deal is not stable under adding a record,
    # issue #30: docs/aggregators.md) is refused
    assert (
        main(
            [
                "partition",
                "--config",
                str(config),
                "--run-dir",
                str(run),
                "--num-teachers",
                "5",
                "--mode",
                "stratified",
                "--no-ledger",
                "--json",
            ]
        )
        == 2
    )
    assert 'mode must be one of "random", "unit"' in capsys.readouterr().err
    assert (
        main(
            [
                "partition",
                "--config",
                str(config),
                "--run-dir",
                str(run),
                "--num-teachers",
                "5",
                "--mode",
                "random",
                "--no-ledger",
                "--json",
            ]
        )
        == 0
    )
    info = json.loads(capsys.readouterr().out)
    assert info["num_teachers"] == 5 and info["mode"] == "random"
    assert info["relation"] == "add-remove" and info["shard_size_min"] >= 1
    assert Partition.load(run / rundir.PARTITION).num_teachers == 5
    saved = json.loads((run / "config.json").read_text())
    assert saved["partition"]["num_teachers"] == 5 and saved["privacy"]["ledger"] is False
    # a later stage's flags change its own table (before it ran) and are saved
    assert (
        main(
            [
                "train-teachers",
                "--run-dir",
                str(run),
                "--epochs",
                "1",
                "--model",
                "mlp",
                "--no-progress",
            ]
        )
        == 0
    )
    assert json.loads((run / "config.json").read_text())["teachers"]["epochs"] == 1
    assert main(["train-teachers", "--run-dir", str(run), "--epochs", "2"]) == 2
    assert "already" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["vote"], "holds no run yet: pass --config"),
        (
            ["partition", "--config", "CONFIG", "--num-teachers", "0"],
            "num_teachers must be an integer >= 1",
        ),
        (
            ["partition", "--config", "CONFIG", "--num-teachers", "5000"],
            "exceeds the 1000 private records",
        ),
        (["partition", "--config", "CONFIG", "--mode", "unit"], "unit_ids"),
        (["aggregate", "--config", "CONFIG", "--sigma2", "-1"], "sigma2 must be > 0"),
        (["aggregate", "--config", "CONFIG", "--mechanism", "gnmax"], "needs sigma"),
        (
            ["aggregate", "--config", "CONFIG", "--budget-eps", "0"],
            "budget_eps must be a number > 0",
        ),
        (["aggregate", "--config", "CONFIG", "--delta", "2"], "delta"),
        (["aggregate", "--config", "CONFIG"], "needs stage 'votes' first"),
        (["train-student", "--config", "CONFIG", "--method", "magic"], "method"),
        (["train-teachers", "--config", "CONFIG", "--model-params", "[1]"], "JSON object"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, small_digits, capsys, argv, message):
    config = small_digits(tmp_path)
    ledger = tmp_path / "ledger.sqlite3"
    argv = [a.replace("CONFIG", str(config)) for a in argv]
    with pytest.raises(SystemExit) if "--model-params" in argv else _nothing():
        code = main([*argv, "--run-dir", str(tmp_path / "run"), "--ledger", str(ledger)])
        assert code in (2, 3)
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err
    # nothing of the run is written (a stage that cannot start leaves no run directory behind,
    # except one that was refused for a missing prerequisite after the run was started)
    assert not (tmp_path / "run" / rundir.PARTITION).exists()
    assert not (tmp_path / "run" / "labels.npy").exists()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_a_run_s_seed_and_ledger_are_fixed_when_it_starts(tmp_path, small_digits, capsys):
    config = small_digits(tmp_path)
    run = tmp_path / "run"
    assert (
        main(
            [
                "partition",
                "--config",
                str(config),
                "--run-dir",
                str(run),
                "--ledger",
                str(tmp_path / "a.sqlite3"),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["train-teachers", "--run-dir", str(run), "--seed", "4"]) == 2
    assert "seed" in capsys.readouterr().err
    assert (
        main(["train-teachers", "--run-dir", str(run), "--ledger", str(tmp_path / "b.sqlite3")])
        == 2
    )
    assert "charges the ledger" in capsys.readouterr().err
    assert main(["train-teachers", "--run-dir", str(run), "--config", str(config)]) == 2
    assert "drop --config" in capsys.readouterr().err


def test_commands_do_not_import_torch():
    code = (
        "import sys, pate.cli; pate.cli.build_parser(); "
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_a_secure_run_reopens_and_pate_run_resumes_it_without_config(
    tmp_path, small_digits, capsys
):
    # A secure run's saved config.json holds the default seed; reopening it is not "a seed given
    # with secure = true" (the user gave none).
    config = small_digits(tmp_path, replace=(("seed = 0", "secure = true"),))
    run = tmp_path / "run"
    assert main(["partition", "--config", str(config), "--run-dir", str(run), "--no-ledger"]) == 0
    assert main(["train-teachers", "--run-dir", str(run), "--epochs", "1", "--no-progress"]) == 0
    assert (
        main(["run", "--run-dir", str(run), "--resume", "--until", "votes", "--no-progress"]) == 0
    )
    assert (run / rundir.VOTES).is_file()
    capsys.readouterr()
    assert main(["run", "--run-dir", str(tmp_path / "none"), "--resume"]) == 2
    assert "holds no run" in capsys.readouterr().err
    assert main(["run", "--run-dir", str(run)]) == 2  # no --config, no --resume
    assert "--config is required" in capsys.readouterr().err


def test_epsilon_summary_names_a_sanitized_epsilon_only_where_one_was_released():
    from pate.cli.commands.analyze import epsilon_summary

    base = {"eps_guarantee": 3.9, "eps_data_independent": 3.6, "eps_sanitized": 2.3}
    released = epsilon_summary({**base, "sanitized": {"fallback": None}})
    assert released == "guarantee 3.9000, data-independent 3.6000, sanitized 2.3000"
    skipped = epsilon_summary(
        {**base, "eps_sanitized": 3.6, "sanitized": {"fallback": "[privacy] release = false"}}
    )
    assert "sanitized 3.6" not in skipped and skipped.endswith("(no sanitized release)")
