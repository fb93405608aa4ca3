"""`pate partition` and `pate aggregate` end to end (in-process, through pate.cli.main)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import analysis
from pate.cli import main
from pate.partition import Partition, ids_digest
from pate.votes import save_votes, votes_from_predictions


def _votes(n=400, teachers=100, classes=4, seed=0):
    rng = np.random.default_rng(seed)
    agree = rng.uniform(0.3, 1.0, size=n)
    true = rng.integers(0, classes, size=n)
    preds = np.where(rng.random((teachers, n)) < agree, true, rng.integers(0, classes, (teachers, n)))
    return votes_from_predictions(preds, num_classes=classes)


# --------------------------------------------------------------------------- partition

def test_partition_random_writes_a_verifiable_file(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["partition", "--run-dir", str(run), "--num-teachers", "7",
                 "--num-records", "100", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "100 records -> 7 teachers (random)" in out and "record-level" in out
    p = Partition.load(run / "partition.npz", ids=np.arange(100))
    assert p.seed == 3 and p.mode == "random" and set(p.shard_sizes.tolist()) == {14, 15}
    # Same seed -> same split.
    main(["partition", "--run-dir", str(tmp_path / "again"), "--num-teachers", "7",
          "--num-records", "100", "--seed", "3"])
    assert Partition.load(tmp_path / "again" / "partition.npz") == p


def test_partition_stratified_and_unit(tmp_path, capsys):
    labels = np.repeat(np.arange(3), [30, 20, 10])
    np.save(tmp_path / "labels.npy", labels)
    assert main(["partition", "--run-dir", str(tmp_path / "s"), "--num-teachers", "5",
                 "--labels", str(tmp_path / "labels.npy"), "--num-classes", "4",
                 "--seed", "0", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["mode"] == "stratified" and summary["num_records"] == 60
    p = Partition.load(tmp_path / "s" / "partition.npz")
    for c in range(3):
        assert np.ptp(np.bincount(p.assignment[labels == c], minlength=5)) <= 1

    units = np.array(["p1", "p1", "p2", "p3", "p3", "p3", "p4"])
    np.save(tmp_path / "units.npy", units)
    assert main(["partition", "--run-dir", str(tmp_path / "u"), "--num-teachers", "2",
                 "--unit-ids", str(tmp_path / "units.npy"), "--secure"]) == 0
    out = capsys.readouterr().out
    assert "unit-level" in out and "4 units" in out and "secure" in out
    p = Partition.load(tmp_path / "u" / "partition.npz", ids=units)
    assert p.seed is None and p.ids_digest == ids_digest(units)


@pytest.mark.parametrize("argv, message", [
    (["--num-teachers", "11", "--num-records", "10", "--seed", "0"], "at most 10 teachers"),
    (["--num-teachers", "0", "--num-records", "10", "--seed", "0"], "--num-teachers must be >= 1"),
    (["--num-teachers", "2", "--num-records", "10", "--seed", "-1"], "--seed must be >= 0"),
    (["--num-teachers", "2", "--num-records", "10", "--mode", "unit", "--seed", "0"],
     "--mode unit needs --unit-ids"),
    (["--num-teachers", "2", "--labels", "LABELS", "--num-classes", "2", "--seed", "0"],
     r"labels must lie in \[0, num_classes=2\)"),
    (["--num-teachers", "2", "--labels", "MISSING", "--seed", "0"], "no file at"),
    (["--num-teachers", "2", "--unit-ids", "UNITS", "--mode", "random", "--seed", "0"],
     "--mode unit"),
])
def test_partition_bad_input_writes_nothing(tmp_path, capsys, argv, message):
    np.save(tmp_path / "labels.npy", np.array([0, 1, 2, 1]))
    np.save(tmp_path / "units.npy", np.array([1, 1, 2]))
    argv = [a.replace("LABELS", str(tmp_path / "labels.npy"))
             .replace("UNITS", str(tmp_path / "units.npy"))
             .replace("MISSING", str(tmp_path / "nope.npy")) for a in argv]
    code = main(["partition", "--run-dir", str(tmp_path / "run")] + argv)
    assert code in (2, 3)
    err = capsys.readouterr().err
    assert err.startswith("pate partition: error:") and len(err.strip().splitlines()) == 1
    assert message.replace("\\", "") in err or __import__("re").search(message, err)
    assert not (tmp_path / "run" / "partition.npz").exists()


def test_partition_secure_refuses_seed_and_no_overwrite(tmp_path, capsys):
    with pytest.raises(SystemExit):  # argparse: --seed and --secure are exclusive
        main(["partition", "--run-dir", str(tmp_path), "--num-teachers", "2",
              "--num-records", "4", "--seed", "1", "--secure"])
    assert main(["partition", "--run-dir", str(tmp_path), "--num-teachers", "2",
                 "--num-records", "4", "--seed", "1"]) == 0
    before = (tmp_path / "partition.npz").read_bytes()
    assert main(["partition", "--run-dir", str(tmp_path), "--num-teachers", "2",
                 "--num-records", "4", "--seed", "2"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert (tmp_path / "partition.npz").read_bytes() == before
    assert main(["partition", "--run-dir", str(tmp_path), "--num-teachers", "2",
                 "--num-records", "4", "--seed", "2", "--overwrite"]) == 0


# --------------------------------------------------------------------------- aggregate

def test_aggregate_writes_labels_and_cost_summary(tmp_path, capsys):
    votes = _votes()
    save_votes(tmp_path, votes)
    argv = ["aggregate", "--votes", str(tmp_path / "votes.npy"), "--mechanism", "confident-gnmax",
            "--threshold", "60", "--sigma1", "20", "--sigma2", "10", "--budget-eps", "4",
            "--delta", "1e-5", "--seed", "0"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "data-independent" in out and "data-dependent" in out and "not private" in out
    assert str(votes.tolist()[0]) not in out  # votes are never printed
    labels = np.load(tmp_path / "labels.npy")
    summary = json.loads((tmp_path / "aggregate.json").read_text())
    assert labels.shape == (400,) and labels.dtype == np.int64
    assert summary["asked"] < 400 and summary["stop_reason"]
    assert summary["eps_data_independent"] <= 4.0
    assert summary["eps_data_dependent"] <= summary["eps_data_independent"]
    assert summary["eps_data_dependent_is_private"] is False
    asked = summary["asked"]
    assert np.all(labels[asked:] == -1)
    # The recorded event is the realised cost of the asked queries.
    event = analysis.PrivacyEvent.from_dict(summary["event"])
    answered = labels[:asked] >= 0
    np.testing.assert_allclose(event.rdp_data_independent, analysis.confident_gnmax_rdp(
        votes[:asked], threshold=60, sigma1=20, sigma2=10, orders=event.orders, answered=answered,
        data_dependent=False), rtol=1e-12)
    assert event.queries == asked and event.answered == int(answered.sum())
    eps_di, _ = analysis.eps_from_rdp(event.rdp_data_independent, orders=event.orders, delta=1e-5)
    assert eps_di == pytest.approx(summary["eps_data_independent"], rel=1e-12)
    # Same seed -> same labels (fresh run dir).
    other = tmp_path / "other"
    other.mkdir()
    assert main(argv + ["--run-dir", str(other)]) == 0
    assert np.array_equal(np.load(other / "labels.npy"), labels)


def test_aggregate_json_and_secure(tmp_path, capsys):
    save_votes(tmp_path, _votes(n=50))
    assert main(["aggregate", "--votes", str(tmp_path / "votes.npy"), "--mechanism", "gnmax",
                 "--sigma", "40", "--budget-eps", "10", "--delta", "1e-5", "--secure",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["secure"] is True and data["seed"] is None and data["asked"] == 50
    assert "event" not in data
    assert not any(isinstance(v, list) for v in data.values())  # no per-query data printed


@pytest.mark.parametrize("extra, code, message", [
    (["--mechanism", "gnmax", "--budget-eps", "1", "--delta", "1e-5", "--seed", "0"], 2,
     "needs --sigma"),
    (["--mechanism", "gnmax", "--sigma", "5", "--threshold", "3", "--budget-eps", "1",
      "--delta", "1e-5", "--seed", "0"], 2, "--threshold does not apply to gnmax"),
    (["--mechanism", "lnmax", "--scale", "-1", "--budget-eps", "1", "--delta", "1e-5",
      "--seed", "0"], 2, "scale must be > 0"),
    (["--mechanism", "gnmax", "--sigma", "5", "--budget-eps", "1", "--delta", "2",
      "--seed", "0"], 2, "delta must lie strictly between 0 and 1"),
    (["--mechanism", "gnmax", "--sigma", "5", "--budget-eps", "0", "--delta", "1e-5",
      "--seed", "0"], 2, "budget_eps must be > 0"),
    (["--mechanism", "gnmax", "--sigma", "1", "--budget-eps", "1", "--delta", "1e-5",
      "--seed", "0"], 3, "even one query could cost"),
    (["--mechanism", "gnmax", "--sigma", "5", "--budget-eps", "1", "--delta", "1e-5",
      "--seed", "-3"], 2, "--seed must be >= 0"),
])
def test_aggregate_bad_input_writes_nothing(tmp_path, capsys, extra, code, message):
    save_votes(tmp_path, _votes(n=20))
    assert main(["aggregate", "--votes", str(tmp_path / "votes.npy")] + extra) == code
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["votes.npy"]


def test_aggregate_bad_votes_file(tmp_path, capsys):
    np.save(tmp_path / "votes.npy", np.array([[3, 0], [1, 1]]))
    base = ["aggregate", "--mechanism", "gnmax", "--sigma", "5", "--budget-eps", "5",
            "--delta", "1e-5", "--seed", "0", "--votes"]
    assert main(base + [str(tmp_path / "votes.npy")]) == 2
    assert "rows must all sum" in capsys.readouterr().err
    assert main(base + [str(tmp_path / "none.npy")]) == 2
    assert "no votes file" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["votes.npy"]


def test_aggregate_refuses_to_overwrite_an_earlier_run(tmp_path, capsys):
    save_votes(tmp_path, _votes(n=20))
    argv = ["aggregate", "--votes", str(tmp_path / "votes.npy"), "--mechanism", "gnmax",
            "--sigma", "40", "--budget-eps", "10", "--delta", "1e-5", "--seed", "0"]
    assert main(argv) == 0
    first = (tmp_path / "labels.npy").read_bytes()
    assert main(argv[:-2] + ["--seed", "1"]) == 2
    assert "already exist" in capsys.readouterr().err
    assert (tmp_path / "labels.npy").read_bytes() == first
    assert main(argv[:-2] + ["--seed", "1", "--overwrite"]) == 0


def test_commands_do_not_import_torch():
    code = ("import sys, argparse, pate.commands.partition as p, pate.commands.aggregate as a; "
            "sub = argparse.ArgumentParser().add_subparsers(); p.add_parser(sub); a.add_parser(sub); "
            "sys.exit(1 if 'torch' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
