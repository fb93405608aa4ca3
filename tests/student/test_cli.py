import json
import subprocess
import sys

import numpy as np
import pytest

from pate.cli import main


@pytest.fixture
def run_dir(tmp_path, digits, first_k_labels):
    np.save(tmp_path / "labels.npy", first_k_labels(digits.public.y, 100))
    return tmp_path


def test_train_student_writes_weights_and_metrics(run_dir, capsys):
    rc = main(["train-student", "--run-dir", str(run_dir), "--dataset", "digits", "--method",
               "supervised", "--epochs", "3", "--steps-per-epoch", "20", "--seed", "0", "--device",
               "cpu", "--no-progress"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "accuracy" in out and "student.pt" in out
    report = json.loads((run_dir / "student_metrics.json").read_text())
    assert report["num_labelled"] == 100 and report["num_public"] == 597
    ev = report["evaluation"]
    assert ev["accuracy"] > 0.5 and ev["num_examples"] == 200
    assert len(ev["per_class_accuracy"]) == 10 and np.array(ev["confusion_matrix"]).shape == (10, 10)
    assert len(report["history"]) == 3
    from student.train import Student

    loaded = Student.load(run_dir / "student.pt")
    from teachers.data import load_pate_data

    data = load_pate_data("digits")
    assert loaded.score(data.evaluation.x, data.evaluation.y) == pytest.approx(ev["accuracy"])
    # An existing result is not overwritten by accident.
    rc = main(["train-student", "--run-dir", str(run_dir), "--dataset", "digits"])
    assert rc == 2 and "--overwrite" in capsys.readouterr().err


def test_config_file_and_resume(run_dir, capsys):
    cfg = run_dir / "pate.toml"
    cfg.write_text('[run]\nname = "demo"\nseed = 3\ndevice = "cpu"\n[data]\nname = "digits"\n'
                   '[student]\nmethod = "fixmatch"\nepochs = 2\nsteps_per_epoch = 5\n'
                   '[teachers]\nepochs = 10\n')
    assert main(["train-student", "--run-dir", str(run_dir), "--config", str(cfg), "--no-progress"]) == 0
    first = json.loads((run_dir / "student_metrics.json").read_text())
    assert first["method"] == "fixmatch" and first["seed"] == 3
    assert main(["train-student", "--run-dir", str(run_dir), "--config", str(cfg), "--resume",
                 "--no-progress"]) == 0
    again = json.loads((run_dir / "student_metrics.json").read_text())
    assert again["evaluation"] == first["evaluation"]
    cfg.write_text('dataset = "digits"\n[student]\nepoch = 2\n')
    assert main(["train-student", "--run-dir", str(run_dir), "--config", str(cfg), "--overwrite"]) != 0
    assert "unknown key 'epoch'" in capsys.readouterr().err
    cfg.write_text('[data]\nname = "digits"\nsize = 3\n')
    assert main(["train-student", "--run-dir", str(run_dir), "--config", str(cfg), "--overwrite"]) != 0
    assert "unknown key 'size' in [data]" in capsys.readouterr().err
    cfg.write_text('dataset = "digits"\n[student]\nepochs = "2"\n')
    assert main(["train-student", "--run-dir", str(run_dir), "--config", str(cfg), "--overwrite"]) != 0
    assert "[student] epochs must be int" in capsys.readouterr().err


def test_clean_errors(tmp_path, capsys, digits):
    assert main(["train-student", "--run-dir", str(tmp_path), "--dataset", "digits"]) == 2
    assert "pate aggregate" in capsys.readouterr().err
    np.save(tmp_path / "labels.npy", np.zeros(1000, dtype=np.int64))
    assert main(["train-student", "--run-dir", str(tmp_path), "--dataset", "digits"]) == 2
    assert "public split" in capsys.readouterr().err
    np.save(tmp_path / "labels.npy", np.zeros((597, 10), dtype=np.int64))
    assert main(["train-student", "--run-dir", str(tmp_path), "--dataset", "digits"]) == 2
    assert "1-D" in capsys.readouterr().err
    assert main(["train-student", "--run-dir", str(tmp_path)]) == 2
    assert "--dataset" in capsys.readouterr().err
    assert not (tmp_path / "student.pt").exists() and not (tmp_path / "student_metrics.json").exists()


def test_command_module_does_not_import_torch():
    code = ("import sys, pate.cli; pate.cli.build_parser(); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
