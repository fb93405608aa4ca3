"""`pate train-teachers` / `pate vote`: config files, errors, and resume after kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from pate.cli import main

pytest.importorskip("torch")


def _partition(run_dir, teachers=4, seed=7):
    assert main(["partition", "--run-dir", str(run_dir), "--num-teachers", str(teachers),
                 "--num-records", "1000", "--seed", str(seed)]) == 0


def test_train_and_vote_with_config_file(tmp_path, capsys):
    run = tmp_path / "run"
    _partition(run)
    capsys.readouterr()
    cfg = tmp_path / "run.toml"
    cfg.write_text('seed = 7\n[data]\nname = "digits"\n[teachers]\nmodel = "cnn8"\nepochs = 3\n'
                   'batch_size = 16\nlr = 0.005\n[student]\nepochs = 99\n')
    assert main(["train-teachers", "--run-dir", str(run), "--config", str(cfg),
                 "--no-progress", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["num_teachers"] == 4 and summary["trainer"] == "sequential"  # auto on CPU
    assert 0.0 <= summary["plurality_accuracy"] <= 1.0
    assert main(["vote", "--run-dir", str(run)]) == 0
    out = capsys.readouterr().out
    votes = np.load(run / "votes.npy")
    assert votes.shape == (597, 10) and np.all(votes.sum(axis=1) == 4)
    assert "597 queries x 10 classes" in out
    assert main(["vote", "--run-dir", str(run)]) == 2           # refuses to overwrite
    # the same run again without --resume is refused before any work
    assert main(["train-teachers", "--run-dir", str(run), "--config", str(cfg)]) == 2
    assert "--resume" in capsys.readouterr().err


@pytest.mark.parametrize("toml,message", [
    ('[data]\nname = "digits"\n[teachers]\nepoch = 3\n', "unknown key 'epoch' in [teachers]"),
    ('[data]\nname = "digits"\nsize = 3\n', "unknown key 'size' in [data]"),
    ('[data]\nname = "digits"\n[teachers]\nepochs = "3"\n', "epochs must be int"),
    ('[data]\nname = "digits"\n[teachers]\nlr = -1.0\n', "lr must be > 0"),
    ('[teachers]\nepochs = 3\n', "no dataset"),
    ('[data]\nname = "digits"\n[teachers]\ndevice = "tpu"\n', "device"),
])
def test_config_errors(tmp_path, capsys, toml, message):
    run = tmp_path / "run"
    _partition(run)
    cfg = tmp_path / "bad.toml"
    cfg.write_text(toml)
    assert main(["train-teachers", "--run-dir", str(run), "--config", str(cfg)]) in (2, 3)
    assert message in capsys.readouterr().err
    assert not (run / "teachers").exists()   # nothing written


def test_partition_must_match_dataset(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["partition", "--run-dir", str(run), "--num-teachers", "2",
                 "--num-records", "900", "--seed", "1"]) == 0
    assert main(["train-teachers", "--run-dir", str(run), "--data", "digits"]) == 2
    assert "covers 900 records" in capsys.readouterr().err
    assert main(["train-teachers", "--run-dir", str(tmp_path / "none"), "--data", "digits"]) == 2
    assert main(["vote", "--run-dir", str(run)]) == 2
    assert "train-teachers" in capsys.readouterr().err


def _cli(run_dir, *extra):
    return [sys.executable, "-m", "pate", "train-teachers", "--run-dir", str(run_dir),
            "--data", "digits", "--model", "mlp", "--epochs", "12", "--batch-size", "16",
            "--chunk-size", "2", "--no-progress", *extra]


def test_resume_after_kill_9_reproduces_the_uninterrupted_run(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    full, cut = tmp_path / "full", tmp_path / "cut"
    for run in (full, cut):
        _partition(run, teachers=4, seed=11)
    proc = subprocess.Popen(_cli(cut), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    progress = cut / "teachers" / "progress.pt"
    state = cut / "teachers" / "state.json"
    killed = False
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        # kill in the middle of the second chunk: chunk 0 done, chunk 1 checkpointed
        if progress.exists() and state.exists() and '"completed": [\n    0\n  ]' in state.read_text():
            os.kill(proc.pid, signal.SIGKILL)
            killed = True
            break
        time.sleep(0.005)
    proc.wait()
    assert killed, f"the run ended before it could be killed: {proc.stderr.read().decode()[-500:]}"
    assert not (cut / "teachers" / "predictions.npz").exists()
    subprocess.run(_cli(cut, "--resume"), env=env, check=True, capture_output=True)
    subprocess.run(_cli(full), env=env, check=True, capture_output=True)
    with np.load(full / "teachers" / "predictions.npz") as a, \
            np.load(cut / "teachers" / "predictions.npz") as b:
        np.testing.assert_array_equal(a["public"], b["public"])
        np.testing.assert_array_equal(a["evaluation"], b["evaluation"])
    import torch

    for ci in range(2):
        wa = torch.load(full / "teachers" / f"chunk_{ci:04d}.pt", weights_only=True)["params"]
        wb = torch.load(cut / "teachers" / f"chunk_{ci:04d}.pt", weights_only=True)["params"]
        assert all(torch.equal(wa[k], wb[k]) for k in wa)
