"""No pickles in run directories (issue #13): scikit-learn teacher chunks are plain ``.npz``
arrays, a planted ``.pkl`` is never opened, damaged or foreign chunks raise a clear
``CheckpointError`` naming the file, torch checkpoints are read with ``weights_only=True``, and
no library code reads a pickle from a run directory."""

from __future__ import annotations

import ast
import logging
import pathlib
import pickle
import re

import numpy as np
import pytest

from pate.cli import main
from pate.run import rundir
from pate.teachers import sklearn_teachers
from pate.teachers.checkpoint import CheckpointError, load_plain_npz, load_torch
from pate.teachers.ensemble import TeacherConfig, train_teachers

ROOT = pathlib.Path(__file__).resolve().parents[2]
SEEDS = [11, 22, 33, 44]
SKLEARN = "sklearn:sklearn.linear_model.LogisticRegression"


class _Payload:
    """Unpickling this creates ``marker``: proof that a pickle was loaded."""

    def __init__(self, marker) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "a"))


def _payload_bytes(marker) -> bytes:
    return pickle.dumps(
        {
            "teachers": [0, 2],
            "estimators": [_Payload(marker)],
            "public_predictions": np.zeros((2, 597), dtype=np.int64),
            "eval_predictions": np.zeros((2, 200), dtype=np.int64),
        }
    )


def test_the_payload_would_fire_if_unpickled(tmp_path):
    marker = tmp_path / "fired"
    pickle.loads(_payload_bytes(marker))
    assert marker.exists()  # so the "marker never created" checks below mean something


def _shards(digits):
    perm = np.random.default_rng(5).permutation(len(digits.private))
    return [np.sort(perm[i * 150 : (i + 1) * 150]) for i in range(4)]


def _config():
    return TeacherConfig(model=SKLEARN, model_params={"max_iter": 200}, chunk_size=2)


def _crash_on_second_chunk(monkeypatch):
    original = sklearn_teachers.fit_sklearn_teachers
    calls = {"n": 0}

    def crashing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("simulated crash")
        return original(*args, **kwargs)

    monkeypatch.setattr(sklearn_teachers, "fit_sklearn_teachers", crashing)
    return original


@pytest.fixture(scope="module")
def clean_run(digits, tmp_path_factory):
    out = tmp_path_factory.mktemp("clean") / "teachers"
    res = train_teachers(digits, _shards(digits), SEEDS, _config(), out_dir=out, progress=False)
    return out, res


def test_sklearn_run_writes_plain_npz_and_no_pickles(clean_run):
    out, res = clean_run
    assert not list(out.rglob("*.pkl"))
    assert sorted(p.name for p in out.glob("chunk_*")) == ["chunk_0000.npz", "chunk_0001.npz"]
    for ci in range(2):
        # readable without pickles, plain integer arrays only
        with np.load(out / f"chunk_{ci:04d}.npz", allow_pickle=False) as z:
            assert all(z[k].dtype == np.int64 for k in z.files)
            assert z["teachers"].tolist() == [2 * ci, 2 * ci + 2]
            assert z["seeds"].tolist() == SEEDS[2 * ci : 2 * ci + 2]
            assert z["random_states"].tolist() == SEEDS[2 * ci : 2 * ci + 2]
            assert z["shard_sizes"].tolist() == [150, 150]
            np.testing.assert_array_equal(
                z["public_predictions"], res.public_predictions[2 * ci : 2 * ci + 2]
            )
            np.testing.assert_array_equal(
                z["eval_predictions"], res.eval_predictions[2 * ci : 2 * ci + 2]
            )
    assert res.teacher_accuracy.mean() > 0.8


def test_resume_ignores_planted_pickles_and_equals_a_clean_run(
    digits, clean_run, tmp_path, monkeypatch, caplog
):
    _, full = clean_run
    out = tmp_path / "teachers"
    original = _crash_on_second_chunk(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        train_teachers(digits, _shards(digits), SEEDS, _config(), out_dir=out, progress=False)
    monkeypatch.setattr(sklearn_teachers, "fit_sklearn_teachers", original)
    assert (out / "chunk_0000.npz").exists() and not (out / "chunk_0001.npz").exists()
    marker = tmp_path / "payload_ran"
    for name in ("chunk_0000.pkl", "chunk_0001.pkl"):  # one finished chunk, one unfinished
        (out / name).write_bytes(_payload_bytes(marker))
    with caplog.at_level(logging.WARNING, logger="pate.teachers.ensemble"):
        resumed = train_teachers(
            digits, _shards(digits), SEEDS, _config(), out_dir=out, resume=True, progress=False
        )
    assert not marker.exists()
    assert "chunk_0000.pkl" in caplog.text and "never reads pickles" in caplog.text
    np.testing.assert_array_equal(resumed.public_predictions, full.public_predictions)
    np.testing.assert_array_equal(resumed.eval_predictions, full.eval_predictions)
    np.testing.assert_array_equal(resumed.teacher_accuracy, full.teacher_accuracy)
    assert (out / "chunk_0001.npz").exists()


def test_chunk_left_only_as_pickle_is_refused_unopened(digits, clean_run, tmp_path):
    out = tmp_path / "teachers"
    train_teachers(digits, _shards(digits), SEEDS, _config(), out_dir=out, progress=False)
    (out / "chunk_0000.npz").unlink()
    marker = tmp_path / "payload_ran"
    (out / "chunk_0000.pkl").write_bytes(_payload_bytes(marker))  # a planted pickle beside it
    with pytest.raises(CheckpointError, match=r"chunk_0000\.npz.*missing.*delete"):
        train_teachers(
            digits, _shards(digits), SEEDS, _config(), out_dir=out, resume=True, progress=False
        )
    assert not marker.exists()


def _object_npz(path, marker):
    np.savez(path, format=np.array(1), payload=np.array([_Payload(marker)], dtype=object))


def _pickle_named_npz(path, marker):
    path.write_bytes(_payload_bytes(marker))


def _truncated(path, marker):
    path.write_bytes(path.read_bytes()[:300])


def _garbage(path, marker):
    path.write_bytes(b"not a zip file at all")


def _single_npy(path, marker):
    with open(path, "wb") as fh:
        np.save(fh, np.zeros((2, 597), dtype=np.int64))


def _other_chunk(path, marker):
    path.write_bytes((path.parent / "chunk_0001.npz").read_bytes())


def _float_predictions(path, marker):
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["public_predictions"] = arrays["public_predictions"].astype(np.float64)
    np.savez(path, **arrays)


def _labels_out_of_range(path, marker):
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["eval_predictions"][0, 0] = 10
    np.savez(path, **arrays)


def _other_seeds(path, marker):
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["seeds"] = arrays["seeds"] + 1
    np.savez(path, **arrays)


@pytest.mark.parametrize(
    "damage,message",
    [
        (_object_npz, r"holds arrays \['format', 'payload'\]"),
        (_pickle_named_npz, r"not a readable \.npz of plain arrays"),
        (_truncated, r"not a readable \.npz|damaged or not plain"),
        (_garbage, r"not a readable \.npz"),
        (_single_npy, r"single \.npy array"),
        (_other_chunk, r"does not belong to this run \(teachers \[2, 4\], expected \[0, 2\]\)"),
        (_float_predictions, r"'public_predictions' has dtype float64, expected integers"),
        (_labels_out_of_range, r"eval_predictions holds labels outside \[0, 10\)"),
        (_other_seeds, r"does not belong to this run \(seeds"),
    ],
)
def test_damaged_or_foreign_chunk_gives_a_clear_error(digits, tmp_path, damage, message):
    out = tmp_path / "teachers"
    train_teachers(digits, _shards(digits), SEEDS, _config(), out_dir=out, progress=False)
    path = out / "chunk_0000.npz"
    marker = tmp_path / "payload_ran"
    damage(path, marker)
    with pytest.raises(CheckpointError) as info:
        train_teachers(
            digits, _shards(digits), SEEDS, _config(), out_dir=out, resume=True, progress=False
        )
    text = str(info.value)
    assert str(path) in text and "--run-dir" in text and "delete" in text
    assert re.search(message, text), text
    assert isinstance(info.value, ValueError) and info.value.path == str(path)
    assert not marker.exists()


def test_object_array_inside_npz_is_never_unpickled(tmp_path):
    marker = tmp_path / "payload_ran"
    path = tmp_path / "x.npz"
    np.savez(path, a=np.array([_Payload(marker)], dtype=object))
    with pytest.raises(CheckpointError, match="damaged or not plain numbers.*allow_pickle=False"):
        load_plain_npz(path, keys=["a"])
    assert not marker.exists()


def test_cli_resume_with_planted_pickle(tmp_path, monkeypatch, capsys, small_digits):
    import shutil

    config = small_digits(tmp_path)

    def partition(run_dir):
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
                    "4",
                ]
            )
            == 0
        )

    run = tmp_path / "run"
    partition(run)
    args = [
        "train-teachers",
        "--run-dir",
        str(run),
        "--model",
        SKLEARN,
        "--model-params",
        '{"max_iter": 200}',
        "--chunk-size",
        "2",
        "--no-progress",
    ]
    original = _crash_on_second_chunk(monkeypatch)
    assert main(args) == 130  # Ctrl-C in the second chunk: one line, exit 130
    monkeypatch.setattr(sklearn_teachers, "fit_sklearn_teachers", original)
    damaged = tmp_path / "damaged"
    shutil.copytree(run, damaged)
    marker = tmp_path / "payload_ran"
    (run / rundir.TEACHERS / "chunk_0000.pkl").write_bytes(_payload_bytes(marker))
    capsys.readouterr()
    assert main(args) == 0  # the same command continues the interrupted stage
    assert not marker.exists()
    first = np.load(run / rundir.TEACHERS / "predictions.npz", allow_pickle=False)["public"]
    # the same partition trained in one go gives the same teachers
    clean = tmp_path / "clean"
    partition(clean)
    assert main(args[:2] + [str(clean)] + args[3:]) == 0
    np.testing.assert_array_equal(
        first, np.load(clean / rundir.TEACHERS / "predictions.npz", allow_pickle=False)["public"]
    )
    assert not list(clean.rglob("*.pkl"))
    # a damaged chunk: exit code 2 and a message naming the file, no traceback
    (damaged / rundir.TEACHERS / "chunk_0000.npz").write_bytes(b"garbage")
    capsys.readouterr()
    assert main(args[:2] + [str(damaged)] + args[3:]) == 2
    err = capsys.readouterr().err
    assert "chunk_0000.npz" in err and "Traceback" not in err


def test_torch_checkpoints_never_run_code(tmp_path):
    torch = pytest.importorskip("torch")
    marker = tmp_path / "payload_ran"
    path = tmp_path / "progress.pt"
    torch.save({"chunk": 0, "state": _Payload(marker)}, path)
    with pytest.raises(CheckpointError, match=r"progress\.pt.*delete .*--run-dir"):
        load_torch(path)
    assert not marker.exists()
    with pytest.raises(CheckpointError, match="cannot be read"):
        load_torch(tmp_path / "missing.pt", remedy="delete it")
    torch.save({"w": torch.ones(2)}, tmp_path / "ok.pt")
    assert torch.equal(load_torch(tmp_path / "ok.pt")["w"], torch.ones(2))


def test_a_damaged_pickle_inside_a_torch_file_is_a_checkpoint_error(tmp_path):
    """The unpickler itself can fail on a damaged pickle (here: KeyError of a memo index it never
    stored; main let it through, and `pate` said "internal error", exit 70)."""
    import io
    import zipfile

    torch = pytest.importorskip("torch")
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(2)}, buffer)
    source, damaged = zipfile.ZipFile(io.BytesIO(buffer.getvalue())), io.BytesIO()
    with zipfile.ZipFile(damaged, "w", compression=zipfile.ZIP_STORED) as out:
        for info in source.infolist():
            data = source.read(info)
            out.writestr(
                info.filename, b"\x80\x02h\x2f." if info.filename.endswith("/data.pkl") else data
            )  # BINGET 47 from an empty memo, STOP
    path = tmp_path / "damaged.pt"
    path.write_bytes(damaged.getvalue())
    with pytest.raises(CheckpointError, match=r"damaged\.pt.*KeyError.*not written by pate-learn"):
        load_torch(path)


# ---------------------------------------------------------------------------- code scan

_PACKAGES = ("pate", "teachers", "student", "analysis", "benchmarks")
# Reads the user's own CIFAR-10 python batches from the dataset root (never a run directory).
_ALLOWED_PICKLE_LOADS = {("teachers/builtin_datasets.py", "load")}


def _calls():
    for pkg in _PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for node in ast.walk(ast.parse(path.read_text(), filename=rel)):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name)
                ):
                    yield rel, node.func.value.id, node.func.attr, node


def _keyword(node, name):
    for kw in node.keywords:
        if kw.arg == name:
            return kw.value
    return None


def test_no_library_code_loads_pickles():
    found = []
    for rel, mod, attr, node in _calls():
        where = f"{rel}:{node.lineno}"
        if (
            mod in ("pickle", "cPickle", "dill", "cloudpickle", "joblib")
            and attr in ("load", "loads")
            and (rel, attr) not in _ALLOWED_PICKLE_LOADS
        ):
            found.append(f"{where} {mod}.{attr}")
        if mod == "torch" and attr == "load":
            wo = _keyword(node, "weights_only")
            if not (isinstance(wo, ast.Constant) and wo.value is True):
                found.append(f"{where} torch.load without weights_only=True")
        if mod in ("np", "numpy") and attr == "load":
            ap = _keyword(node, "allow_pickle")
            if ap is not None and not (isinstance(ap, ast.Constant) and ap.value is False):
                found.append(f"{where} np.load with allow_pickle={ast.unparse(ap)}")
        if mod in ("pickle", "joblib") and attr in ("dump", "dumps"):
            found.append(f"{where} {mod}.{attr}: run directories hold no pickles")
    assert not found, found
