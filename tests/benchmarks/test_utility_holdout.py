"""benchmarks/utility_holdout.py: the held-out protocol of the utility benchmark. The own-data
file holds the first records of the private split only, a class-means run on it (the student
times its rule, as the Fashion-MNIST config ships) is scored from its run directory, and the
scores on the evaluation split are those the run itself reported."""

from __future__ import annotations

import json

import numpy as np
import pytest

SOFT_AND_PRODUCT = ("[student]\n", '[student]\ntargets = "soft"\ncombine_with_rule = true\n')


@pytest.fixture(scope="module")
def holdout(load_benchmark):
    return load_benchmark("utility_holdout")


def test_the_held_out_records_never_reach_the_file(holdout, digits, tmp_path):
    path = tmp_path / "private-limited.npz"
    held = holdout.write_holdout_data(digits, path, holdout=200)
    with np.load(path, allow_pickle=False) as npz:
        assert npz["x_private"].shape[0] == len(digits.private.x) - 200
        np.testing.assert_array_equal(npz["x_private"], digits.private.x[:-200])
        np.testing.assert_array_equal(npz["y_private"], digits.private.y[:-200])
        np.testing.assert_array_equal(npz["x_evaluation"], digits.evaluation.x)
        np.testing.assert_array_equal(npz["x_public"], digits.public.x)
        # no held-out image is anywhere in the file
        stored = {
            row.tobytes() for key in ("x_private", "x_public", "x_evaluation") for row in npz[key]
        }
    assert not any(row.tobytes() in stored for row in held.x if row.tobytes())
    np.testing.assert_array_equal(held.y, digits.private.y[-200:])
    from pate.teachers.data import load_pate_data

    loaded = load_pate_data(f"npz:{path}")
    assert len(loaded.private.x) == len(digits.private.x) - 200
    assert loaded.class_names == digits.class_names


@pytest.mark.parametrize("bad", [0, 1000, -5])
def test_a_held_out_size_the_private_split_cannot_give_is_refused(holdout, digits, tmp_path, bad):
    with pytest.raises(ValueError, match=rf"holdout must be between 1 and 999 .*got {bad}"):
        holdout.write_holdout_data(digits, tmp_path / "x.npz", holdout=bad)
    assert not (tmp_path / "x.npz").exists()


def test_the_config_points_at_the_file_and_keeps_the_flip_of_the_dataset(holdout, tmp_path):
    config = {"data": {"name": "fashion-mnist", "root": "/somewhere"}, "student": {}}
    holdout.holdout_config_edits(config, tmp_path / "p.npz", flip=True, records=50000)
    assert config["data"] == {"name": f"npz:{(tmp_path / 'p.npz').resolve()}", "records": 50000}
    assert config["student"]["flip"] is True
    config = {"data": {"name": "digits"}, "student": {"flip": False}}
    holdout.holdout_config_edits(config, tmp_path / "p.npz", flip=True, records=800)
    assert config["student"]["flip"] is False  # a config's own setting stays


def test_a_class_means_run_on_the_file_is_scored_from_its_run_directory(
    holdout, digits, small_digits, tmp_path, one_torch_thread
):
    from pate.run.config import build, load
    from pate.run.pipeline import Pipeline

    npz = tmp_path / "private-limited.npz"
    held = holdout.write_holdout_data(digits, npz, holdout=200)
    path = small_digits(
        tmp_path,
        replace=(
            (
                "[partition]\nnum_teachers = 10            # 100 private images per teacher\n"
                'mode = "random"\n',
                "",
            ),
            (
                'mechanism = "confident-gnmax"\nthreshold = 7.0\nsigma1 = 2.0\nsigma2 = 2.0',
                'mechanism = "class-means"\nsigma = 3.0',
            ),
            SOFT_AND_PRODUCT,
        ),
        extra='\n[knn]\nfeatures = "none"\ndims = 16\n',
    )
    config = load(path, run_dir=str(tmp_path / "run")).to_dict()
    config["privacy"]["ledger"] = False
    holdout.holdout_config_edits(config, npz, flip=False, records=800)
    config = build(config)
    # the file's own evaluation split is not declared public: its figures are in the internal report
    report = Pipeline(config, progress=False).run(internal=True)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["data"]["name"].startswith(
        "npz:"
    )
    scores = holdout.score_released_model(
        tmp_path / "run", {"evaluation": digits.evaluation, "held out": held}
    )
    assert set(scores) == {"released", "student_alone", "rule_alone"}
    # loaded from the run directory, the released model and the student alone score on the
    # evaluation split exactly what the run reported
    assert scores["released"]["evaluation"] == pytest.approx(
        report["utility"]["student_accuracy"], abs=1e-12
    )
    assert scores["student_alone"]["evaluation"] == pytest.approx(
        report["utility"]["student_alone_accuracy"], abs=1e-12
    )
    # the rule fitted to the release labels the held-out digits far above chance (0.1); the
    # student of this test trains 8 steps only, so only its range is checked
    assert 0.5 < scores["rule_alone"]["held out"] <= 1.0
    assert all(0.0 <= scores[key]["held out"] <= 1.0 for key in scores)
