"""`pate train-teachers` / `pate vote` on a run directory: flags, errors, and resume after kill -9."""

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
from pate.run import rundir

# One torch thread, as in tests/teachers/conftest.py (where these tests lived).
pytestmark = pytest.mark.usefixtures("one_torch_thread")

pytest.importorskip("torch")


def _partition(run_dir, config, teachers=4):
    assert (
        main(
            [
                "partition",
                "--config",
                str(config),
                "--run-dir",
                str(run_dir),
                "--no-ledger",
                "--num-teachers",
                str(teachers),
            ]
        )
        == 0
    )


def test_train_and_vote_with_flags(tmp_path, capsys, small_digits):
    run = tmp_path / "run"
    _partition(run, small_digits(tmp_path))
    capsys.readouterr()
    assert (
        main(
            [
                "train-teachers",
                "--run-dir",
                str(run),
                "--epochs",
                "3",
                "--batch-size",
                "16",
                "--lr",
                "0.005",
                "--no-progress",
                "--json",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["num_teachers"] == 4 and summary["trainer"] == "sequential"  # auto on CPU
    assert 0.0 <= summary["plurality_accuracy"] <= 1.0
    assert json.loads((run / "config.json").read_text())["teachers"]["epochs"] == 3
    assert main(["vote", "--run-dir", str(run)]) == 0
    out = capsys.readouterr().out
    votes = np.load(run / rundir.VOTES)
    assert votes.shape == (597, 10) and np.all(votes.sum(axis=1) == 4)
    assert "597 queries x 10 classes" in out
    assert main(["vote", "--run-dir", str(run)]) == 2  # refuses to redo a finished stage
    assert main(["train-teachers", "--run-dir", str(run)]) == 2
    assert "already done" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--lr", "-1"], "lr must be > 0"),
        (["--device", "tpu"], "device"),
        (["--trainer", "magic"], "trainer"),
    ],
)
def test_bad_teacher_settings_write_nothing(tmp_path, capsys, small_digits, argv, message):
    run = tmp_path / "run"
    _partition(run, small_digits(tmp_path))
    assert main(["train-teachers", "--run-dir", str(run), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (run / rundir.TEACHERS).exists()  # nothing written
    assert json.loads((run / "config.json").read_text())["teachers"] == {
        "model": "cnn8",
        "epochs": 16,
        "batch_size": 32,
        "lr": 0.01,
    }


def test_stages_run_in_order(tmp_path, capsys, small_digits):
    run = tmp_path / "run"
    _partition(run, small_digits(tmp_path))
    assert main(["vote", "--run-dir", str(run)]) == 2
    assert "needs stage 'teachers' first" in capsys.readouterr().err
    assert main(["train-teachers", "--run-dir", str(tmp_path / "none")]) == 2
    assert "holds no run yet" in capsys.readouterr().err


def _cli(run_dir):
    return [
        sys.executable,
        "-m",
        "pate",
        "train-teachers",
        "--run-dir",
        str(run_dir),
        "--model",
        "mlp",
        "--epochs",
        "12",
        "--batch-size",
        "16",
        "--chunk-size",
        "2",
        "--no-progress",
    ]


def test_resume_after_kill_9_reproduces_the_uninterrupted_run(tmp_path, small_digits):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    config = small_digits(tmp_path)
    full, cut = tmp_path / "full", tmp_path / "cut"
    for run in (full, cut):
        _partition(run, config, teachers=4)
    proc = subprocess.Popen(_cli(cut), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    progress = cut / rundir.TEACHERS / "progress.pt"
    state = cut / rundir.TEACHERS / "state.json"
    killed = False
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        # kill in the middle of the second chunk: chunk 0 done, chunk 1 checkpointed
        if (
            progress.exists()
            and state.exists()
            and '"completed": [\n    0\n  ]' in state.read_text()
        ):
            os.kill(proc.pid, signal.SIGKILL)
            killed = True
            break
        time.sleep(0.005)
    proc.wait()
    assert killed, f"the run ended before it could be killed: {proc.stderr.read().decode()[-500:]}"
    assert not (cut / rundir.TEACHERS / "predictions.npz").exists()
    assert not (cut / rundir.STAGE_DIR / "teachers.json").exists()
    subprocess.run(_cli(cut), env=env, check=True, capture_output=True)  # the same command resumes
    subprocess.run(_cli(full), env=env, check=True, capture_output=True)
    with (
        np.load(full / rundir.TEACHERS / "predictions.npz") as a,
        np.load(cut / rundir.TEACHERS / "predictions.npz") as b,
    ):
        np.testing.assert_array_equal(a["public"], b["public"])
        np.testing.assert_array_equal(a["evaluation"], b["evaluation"])
    import torch

    for ci in range(2):
        wa = torch.load(full / rundir.TEACHERS / f"chunk_{ci:04d}.pt", weights_only=True)["params"]
        wb = torch.load(cut / rundir.TEACHERS / f"chunk_{ci:04d}.pt", weights_only=True)["params"]
        assert all(torch.equal(wa[k], wb[k]) for k in wa)
