"""Teacher training: vectorized == per-teacher loop, no cross-shard leakage, chunking, resume,
scikit-learn teachers, errors."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pate.core.errors import PartitionError  # noqa: E402
from pate.teachers.data import ArraySplit  # noqa: E402
from pate.teachers.ensemble import TeacherConfig, train_teachers  # noqa: E402
from pate.teachers.errors import ConfigError
from pate.teachers.result import plurality_accuracy  # noqa: E402
from pate.teachers.sequential import SequentialChunk  # noqa: E402
from pate.teachers.vectorized import VectorizedChunk  # noqa: E402


def random_shards(num_records, sizes, seed=0):
    """Disjoint shards of the given (unequal) sizes from the first sum(sizes) of a permutation."""
    perm = np.random.default_rng(seed).permutation(num_records)
    bounds = np.cumsum([0] + list(sizes))
    return [np.sort(perm[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def saved_teacher(out_dir, index):
    """Teacher ``index`` of a finished torch ensemble, read back from its chunk files."""
    from pate.teachers.checkpoint import load_torch
    from pate.teachers.schedule import init_teacher

    state = json.loads((out_dir / "state.json").read_text())
    recipe = state["fingerprint"]
    for chunk in range(state["num_chunks"]):
        saved = load_torch(out_dir / f"chunk_{chunk:04d}.pt")
        low, high = saved["teachers"]
        if low <= index < high:
            net = init_teacher(
                recipe["recipe"]["model"],
                0,
                input_shape=tuple(recipe["input_shape"]),
                num_classes=recipe["num_classes"],
            )
            net.load_state_dict({k: v[index - low] for k, v in saved["params"].items()})
            return net.eval()
    raise AssertionError(f"no chunk holds teacher {index}")


SEEDS = [101, 202, 303, 404]
SIZES = [70, 45, 33, 64]  # unequal shards: partial last batches, exhausted teachers


def _chunk(cls, data, config, shards, seeds=SEEDS):
    return cls(
        config,
        seeds,
        shards,
        torch.from_numpy(data.private.x),
        torch.from_numpy(data.private.y),
        input_shape=data.input_shape,
        num_classes=data.num_classes,
        device="cpu",
    )


@pytest.mark.parametrize("optimizer,augment", [("adam", "shift"), ("sgd", "shift+flip")])
def test_vectorized_equals_per_teacher_loop(digits, optimizer, augment):
    config = TeacherConfig(
        model="cnn8",
        epochs=2,
        batch_size=16,
        lr=0.01,
        optimizer=optimizer,
        augment=augment,
        weight_decay=1e-4,
    )
    shards = random_shards(len(digits.private), SIZES)
    vec = _chunk(VectorizedChunk, digits, config, shards)
    seq = _chunk(SequentialChunk, digits, config, shards)
    before = vec.stacked_params()
    for epoch in range(config.epochs):
        vec.train_epoch(epoch)
        seq.train_epoch(epoch)
    a, b = vec.stacked_params(), seq.stacked_params()
    assert a.keys() == b.keys()
    for k in a:
        assert not torch.allclose(a[k], before[k])  # training moved every tensor
        torch.testing.assert_close(a[k], b[k], rtol=1e-3, atol=1e-4)
    x_eval = torch.from_numpy(digits.evaluation.x)
    assert (vec.predict(x_eval) == seq.predict(x_eval)).mean() > 0.99


def test_no_record_leaks_across_teachers(digits):
    """Teacher 0's weights depend only on its own shard: scrambling every other record (inputs
    and labels) leaves them bit-for-bit unchanged, while the other teachers change."""
    config = TeacherConfig(model="cnn8", epochs=2, batch_size=16, lr=0.01, augment="shift")
    shards = random_shards(len(digits.private), SIZES)
    vec = _chunk(VectorizedChunk, digits, config, shards)
    for e in range(2):
        vec.train_epoch(e)
    rng = np.random.default_rng(5)
    others = np.setdiff1d(np.arange(len(digits.private)), shards[0])
    x, y = digits.private.x.copy(), digits.private.y.copy()
    x[others] = rng.random(x[others].shape, dtype=np.float32)
    y[others] = rng.integers(0, 10, len(others))
    scrambled = dataclasses.replace(digits, private=ArraySplit(x, y))
    vec2 = _chunk(VectorizedChunk, scrambled, config, shards)
    for e in range(2):
        vec2.train_epoch(e)
    a, b = vec.stacked_params(), vec2.stacked_params()
    for k in a:
        assert torch.equal(a[k][0], b[k][0])
        assert not torch.equal(a[k][1:], b[k][1:])


def test_chunk_size_does_not_change_the_teachers(digits):
    shards = random_shards(len(digits.private), SIZES)
    base = dict(
        model="cnn8", epochs=2, batch_size=16, lr=0.01, augment="shift", trainer="vectorized"
    )
    one = train_teachers(digits, shards, SEEDS, TeacherConfig(**base, chunk_size=4), progress=False)
    two = train_teachers(digits, shards, SEEDS, TeacherConfig(**base, chunk_size=3), progress=False)
    assert two.chunk_size == 2  # 4 teachers, at most 3 per chunk -> balanced chunks of 2
    assert (one.public_predictions == two.public_predictions).mean() > 0.995


def test_ensemble_learns_and_reports_accuracy(digits, tmp_path):
    shards = random_shards(len(digits.private), [200] * 5)
    config = TeacherConfig(model="cnn8", epochs=12, batch_size=16, lr=3e-3, trainer="vectorized")
    res = train_teachers(
        digits, shards, [1, 2, 3, 4, 5], config, out_dir=tmp_path / "t", progress=False
    )
    assert res.trainer == "vectorized"
    assert res.public_predictions.shape == (5, 597) and res.eval_predictions.shape == (5, 200)
    acc = (res.eval_predictions == digits.evaluation.y).mean(axis=1)
    np.testing.assert_allclose(res.teacher_accuracy, acc)
    assert acc.mean() > 0.6 and res.plurality_accuracy > 0.7
    assert res.plurality_accuracy == plurality_accuracy(
        res.eval_predictions, digits.evaluation.y, num_classes=10
    )
    metrics = json.loads((tmp_path / "t" / "metrics.json").read_text())
    assert metrics["teacher_accuracy"] == pytest.approx(list(acc), abs=1e-6)
    with np.load(tmp_path / "t" / "predictions.npz") as npz:
        np.testing.assert_array_equal(npz["public"], res.public_predictions)
    with torch.no_grad():
        pred = saved_teacher(tmp_path / "t", 3)(torch.from_numpy(digits.evaluation.x))
    pred = pred.argmax(1).numpy()
    np.testing.assert_array_equal(pred, res.eval_predictions[3])


def test_resume_after_crash_equals_uninterrupted_run(digits, tmp_path, monkeypatch):
    shards = random_shards(len(digits.private), SIZES)
    config = TeacherConfig(
        model="cnn8",
        epochs=3,
        batch_size=16,
        lr=0.01,
        augment="shift",
        chunk_size=2,
        trainer="vectorized",
    )
    full = train_teachers(digits, shards, SEEDS, config, out_dir=tmp_path / "full", progress=False)
    original = VectorizedChunk.train_epoch
    calls = {"n": 0}

    def crashing(self, epoch):
        calls["n"] += 1
        if calls["n"] == 5:  # chunk 2, epoch 2: after one checkpointed epoch of chunk 2
            raise KeyboardInterrupt("simulated crash")
        return original(self, epoch)

    monkeypatch.setattr(VectorizedChunk, "train_epoch", crashing)
    with pytest.raises(KeyboardInterrupt):
        train_teachers(digits, shards, SEEDS, config, out_dir=tmp_path / "cut", progress=False)
    monkeypatch.setattr(VectorizedChunk, "train_epoch", original)
    assert (tmp_path / "cut" / "progress.pt").exists()
    with pytest.raises(ConfigError, match="--resume"):
        train_teachers(digits, shards, SEEDS, config, out_dir=tmp_path / "cut", progress=False)
    other = dataclasses.replace(config, lr=0.02)
    with pytest.raises(ConfigError, match="recipe.lr"):
        train_teachers(
            digits, shards, SEEDS, other, out_dir=tmp_path / "cut", resume=True, progress=False
        )
    # resumed with trainer="auto" (cnn8 on CPU: sequential): the run keeps its own trainer
    resumed = train_teachers(
        digits,
        shards,
        SEEDS,
        dataclasses.replace(config, trainer="auto"),
        out_dir=tmp_path / "cut",
        resume=True,
        progress=False,
    )
    assert resumed.trainer == "vectorized"
    np.testing.assert_array_equal(resumed.public_predictions, full.public_predictions)
    for ci in range(2):
        a = torch.load(tmp_path / "full" / f"chunk_{ci:04d}.pt", weights_only=True)["params"]
        b = torch.load(tmp_path / "cut" / f"chunk_{ci:04d}.pt", weights_only=True)["params"]
        for k in a:
            assert torch.equal(a[k], b[k])
    assert not (tmp_path / "cut" / "progress.pt").exists()


@pytest.mark.parametrize(
    ("model", "augment", "auto_trainer", "other_trainer"),
    [("cnn8", "shift", "sequential", "vectorized"), ("linear", "none", "vectorized", "sequential")],
)
def test_auto_trainer_on_cpu(digits, model, augment, auto_trainer, other_trainer):
    """trainer="auto" on CPU trains a model with convolutions one teacher after another (faster
    there than vmap's grouped convolutions, benchmarks/teachers_vmap.py) and vmaps one without
    (a linear teacher; its chunk then takes its gradient in closed form and predicts with one
    matrix product); either way the teachers and predictions are those of the other trainer."""
    shards = random_shards(len(digits.private), SIZES)
    base = dict(model=model, epochs=3, batch_size=16, lr=0.01, augment=augment, device="cpu")
    auto = train_teachers(digits, shards, SEEDS, TeacherConfig(**base), progress=False)
    assert auto.trainer == auto_trainer
    other = train_teachers(
        digits, shards, SEEDS, TeacherConfig(**base, trainer=other_trainer), progress=False
    )
    assert other.trainer == other_trainer
    assert (auto.public_predictions == other.public_predictions).mean() > 0.99
    assert (auto.eval_predictions == other.eval_predictions).mean() > 0.99


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_a_linear_chunk_s_closed_form_gradient_and_predictions_are_vmap_s(digits, label_smoothing):
    """A chunk of linear teachers on a CPU: the closed-form gradient is autograd's through
    vmap (unequal weights, a teacher with none, label smoothing), and its one-product
    predictions are the vmapped ones."""
    from pate.teachers.vectorized import _make_fns, linear_keys

    config = TeacherConfig(
        model="linear", epochs=1, augment="none", label_smoothing=label_smoothing
    )
    shards = random_shards(len(digits.private), SIZES)
    chunk = _chunk(VectorizedChunk, digits, config, shards)
    assert chunk.linear == ("1.weight", "1.bias")
    gen = torch.Generator().manual_seed(3)
    for k in chunk.params:  # away from the initialisation's symmetric start
        chunk.params[k] += 0.05 * torch.randn(chunk.params[k].shape, generator=gen)
    t_count, batch = len(SEEDS), 16
    rows = torch.from_numpy(np.concatenate([s[:batch] for s in shards]))
    x = chunk.x.index_select(0, rows).view(t_count, batch, *chunk.x.shape[1:])
    y = chunk.y.index_select(0, rows).view(t_count, batch)
    w = (torch.rand(t_count, batch, generator=gen) < 0.7).float()
    w[2] = 0.0  # a teacher whose shard is exhausted
    vmap_grad, vmap_predict = _make_fns(
        chunk.base, amp_device=None, label_smoothing=label_smoothing
    )
    want = vmap_grad(chunk.params, chunk.buffers, x, y, w)
    got = chunk.grad_fn(chunk.params, chunk.buffers, x, y, w)
    assert got.keys() == want.keys()
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-6)
    assert torch.count_nonzero(got["1.weight"][2]) == 0
    x_eval = torch.from_numpy(digits.evaluation.x)
    logits = vmap_predict(chunk.params, chunk.buffers, x_eval)
    assert np.array_equal(chunk.predict(x_eval, batch=7), logits.argmax(dim=-1).numpy())
    assert chunk.predict(x_eval[:0]).shape == (t_count, 0)
    # only one linear layer of the flattened input takes this path
    nn = torch.nn
    assert linear_keys(nn.Linear(4, 3)) == ("weight", "bias")
    assert linear_keys(nn.Sequential(nn.Linear(4, 3, bias=False))) == ("0.weight", None)
    assert linear_keys(nn.Sequential(nn.Flatten(), nn.Linear(4, 3), nn.ReLU())) is None
    assert linear_keys(nn.Sequential(nn.Flatten(2), nn.Linear(4, 3))) is None
    assert linear_keys(nn.Sequential(nn.Flatten(), nn.Linear(4, 8), nn.Linear(8, 3))) is None


def test_sequential_fallback_for_batchnorm(digits, tmp_path, monkeypatch):
    (tmp_path / "bn_models.py").write_text(
        "import torch\n"
        "def bn(input_shape, num_classes):\n"
        "    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 32),\n"
        "        torch.nn.BatchNorm1d(32), torch.nn.ReLU(), torch.nn.Linear(32, num_classes))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    shards = random_shards(len(digits.private), [100, 100])
    config = TeacherConfig(model="bn_models:bn", epochs=2, batch_size=16, augment="none")
    res = train_teachers(digits, shards, [1, 2], config, progress=False)
    assert res.trainer == "sequential"
    with pytest.raises(ValueError, match="BatchNorm"):
        train_teachers(
            digits,
            shards,
            [1, 2],
            dataclasses.replace(config, trainer="vectorized"),
            progress=False,
        )


def test_sklearn_teachers(digits, tmp_path):
    from sklearn.linear_model import SGDClassifier

    shards = random_shards(len(digits.private), [200] * 4)
    config = TeacherConfig(model=SGDClassifier(max_iter=200, tol=None), n_jobs=2)
    res = train_teachers(digits, shards, SEEDS, config, out_dir=tmp_path / "sk", progress=False)
    assert res.trainer == "sklearn" and res.teacher_accuracy.mean() > 0.8
    with np.load(tmp_path / "sk" / "chunk_0000.npz", allow_pickle=False) as saved:
        assert saved["random_states"].tolist() == SEEDS  # distinct, from the seeds
        np.testing.assert_array_equal(saved["public_predictions"], res.public_predictions)
    assert not list((tmp_path / "sk").glob("*.pkl"))  # no pickles in a run directory
    by_name = TeacherConfig(
        model="sklearn:sklearn.linear_model.LogisticRegression", model_params={"max_iter": 300}
    )
    res2 = train_teachers(digits, shards, SEEDS, by_name, progress=False)
    assert res2.teacher_accuracy.mean() > 0.85
    one_class = [
        np.flatnonzero(digits.private.y == 3)[:20],
        np.flatnonzero(digits.private.y == 4)[:20],
    ]
    with pytest.raises(ValueError, match="single class"):
        train_teachers(digits, one_class, SEEDS[:2], by_name, progress=False)


def test_input_errors_before_any_work(digits):
    shards = random_shards(len(digits.private), [50, 50])
    with pytest.raises(PartitionError, match=r"shards overlap: record \d+ is assigned"):
        train_teachers(
            digits, [shards[0], np.concatenate([shards[1], shards[0][:1]])], [1, 2], progress=False
        )
    with pytest.raises(ValueError, match="one seed per teacher"):
        train_teachers(digits, shards, [1], progress=False)
    with pytest.raises(ValueError, match="outside"):
        train_teachers(digits, [np.array([0, 5000])], [1], progress=False)
    with pytest.raises(ValueError, match="device"):
        TeacherConfig(device="gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            train_teachers(digits, shards, [1, 2], TeacherConfig(device="cuda:0"), progress=False)
    with pytest.raises(ValueError, match="epochs"):
        TeacherConfig(epochs=0)
    with pytest.raises(ValueError, match="augment"):
        TeacherConfig(augment="rotate")
    with pytest.raises(ValueError, match="model_params"):
        TeacherConfig(model="mlp", model_params={"C": 1.0})
    tabular = dataclasses.replace(
        digits,
        private=ArraySplit(digits.private.x.reshape(1000, -1), digits.private.y),
        public=ArraySplit(digits.public.x.reshape(597, -1), digits.public.y),
        evaluation=ArraySplit(digits.evaluation.x.reshape(200, -1), digits.evaluation.y),
        input_shape=(64,),
        name="npz:x",
    )
    with pytest.raises(ValueError, match="image inputs"):
        train_teachers(
            tabular, shards, [1, 2], TeacherConfig(model="mlp", augment="shift"), progress=False
        )


def test_checkpoint_interval_skips_mid_chunk_checkpoints_and_keeps_the_teachers(
    digits, tmp_path, monkeypatch
):
    from pate.teachers import checkpoint, chunks

    shards = random_shards(len(digits.private), SIZES)
    config = TeacherConfig(
        model="cnn8", epochs=3, batch_size=16, lr=0.01, chunk_size=2, trainer="vectorized"
    )
    saved = []
    original = checkpoint.atomic_torch_save

    def counted(path, obj):
        saved.append(path.name)
        return original(path, obj)

    # the chunk's progress checkpoints (pate.teachers.cluster.train_chunk) and its chunk file
    monkeypatch.setattr(checkpoint, "atomic_torch_save", counted)
    monkeypatch.setattr(chunks, "atomic_torch_save", counted)
    every = train_teachers(
        digits, shards, SEEDS, config, out_dir=tmp_path / "every", progress=False
    )
    per_epoch = saved.count("progress.pt")
    saved.clear()
    rare = train_teachers(
        digits,
        shards,
        SEEDS,
        dataclasses.replace(config, checkpoint_every_s=3600.0),
        out_dir=tmp_path / "rare",
        progress=False,
    )
    assert per_epoch == 2 * 2 and saved.count("progress.pt") == 0  # 2 chunks x 2 mid-chunk epochs
    assert saved.count("chunk_0000.pt") == 1 and saved.count("chunk_0001.pt") == 1
    np.testing.assert_array_equal(every.public_predictions, rare.public_predictions)
    # The interval is I/O, not recipe: a run may resume with another one.
    assert config.fingerprint() == dataclasses.replace(config, checkpoint_every_s=5.0).fingerprint()
    for bad in (-1.0, float("inf")):
        with pytest.raises(ValueError, match="checkpoint_every_s"):
            TeacherConfig(checkpoint_every_s=bad)


def test_mixed_size_imagefolder_trains_teachers_and_votes(tmp_path):
    """An ImageFolder of differently sized RGB and greyscale images goes through training to votes."""
    from PIL import Image

    from pate.core.votes import votes_from_predictions
    from pate.teachers.data import load_pate_data

    rng = np.random.default_rng(3)
    sizes = [(20, 30), (40, 40), (33, 17)]
    for c, cls in enumerate(("red", "green", "blue")):
        for part in ("train", "test"):
            (tmp_path / "img" / part / cls).mkdir(parents=True)
        for i in range(12):
            arr = rng.integers(0, 60, (sizes[i % 3][1], sizes[i % 3][0], 3), dtype=np.uint8)
            arr[..., c] += 180
            image = Image.fromarray(arr)
            folder = tmp_path / "img" / ("train" if i < 8 else "test") / cls  # 24 private
            (image.convert("L") if i == 5 else image).save(folder / f"{i}.png")
    data = load_pate_data(
        f"imagefolder:{tmp_path / 'img'}", public_size=6, eval_size=6, image_size=8
    )
    assert data.input_shape == (3, 8, 8)
    assert data.class_names == ("blue", "green", "red")  # the folders, sorted
    shards = random_shards(len(data.private), [12, 12])
    config = TeacherConfig(model="mlp", epochs=3, batch_size=8, augment="none")
    res = train_teachers(data, shards, [1, 2], config, progress=False)
    votes = votes_from_predictions(res.public_predictions, num_classes=data.num_classes)
    assert votes.shape == (6, 3) and (votes.sum(axis=1) == 2).all()
    again = train_teachers(data, shards, [1, 2], config, progress=False)
    np.testing.assert_array_equal(again.public_predictions, res.public_predictions)


def test_training_messages_go_to_the_pate_logger(digits):
    """Library messages reach a handler on the 'pate' logger (what the CLI shows); no print."""
    import logging

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    pate_logger = logging.getLogger("pate")
    handler, level = Keep(), pate_logger.level
    pate_logger.addHandler(handler)
    pate_logger.setLevel(logging.INFO)
    try:
        shards = random_shards(len(digits.private), [40, 40])
        train_teachers(
            digits,
            shards,
            [1, 2],
            TeacherConfig(model="cnn8", epochs=1, augment="none", device="cpu"),
            progress=False,
        )
    finally:
        pate_logger.removeHandler(handler)
        pate_logger.setLevel(level)
    messages = [r.getMessage() for r in records if r.name.startswith("pate.teachers")]
    assert any("2 cnn8 teachers" in m and "sequential trainer" in m for m in messages), messages


def test_tiny_sequential_steps_run_on_one_thread(digits, monkeypatch):
    """A step under ONE_THREAD_MACS trains on one thread (recorded in ``execution``) and the
    process's thread count is restored afterwards; a cnn28 step is not tiny."""
    import torch

    from pate.core.tuned_defaults import ONE_THREAD_MACS
    from pate.teachers import sequential
    from pate.teachers.models import build_model

    tiny = build_model("cnn8", input_shape=(1, 8, 8), num_classes=10)
    big = build_model("cnn28", input_shape=(1, 28, 28), num_classes=10)
    assert sequential.step_threads(tiny, input_shape=(1, 8, 8), batch_size=32, device="cpu") == 1
    assert (
        sequential.step_threads(big, input_shape=(1, 28, 28), batch_size=32, device="cpu") is None
    )
    assert sequential.forward_macs(big, torch.zeros((32, 1, 28, 28))) > ONE_THREAD_MACS

    seen = []
    train_epoch = sequential.SequentialChunk._train_epoch

    def spy(self, epoch):
        seen.append(torch.get_num_threads())
        return train_epoch(self, epoch)

    monkeypatch.setattr(sequential.SequentialChunk, "_train_epoch", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        shards = random_shards(len(digits.private), SIZES)
        config = TeacherConfig(model="cnn8", epochs=2, batch_size=16, lr=0.01, device="cpu")
        result = train_teachers(digits, shards, SEEDS, config, progress=False)
        assert seen and set(seen) == {1} and torch.get_num_threads() == 2
        assert result.execution["step_threads"] == 1
    finally:
        torch.set_num_threads(before)
