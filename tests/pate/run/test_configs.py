"""Every shipped config is valid, and the documented defaults hold; the configs ship with the
package (``pate run --config digits`` from any folder, ``pate init-config NAME``)."""

from __future__ import annotations

import json
import pathlib
import tomllib

import pytest

import pate
from pate.cli import main
from pate.cli.commands import init_config
from pate.run import rundir
from pate.run.config import RunConfig, load, packaged_configs, plan, resolve_config
from pate.teachers.errors import ConfigError

CONFIGS = sorted((pathlib.Path(__file__).resolve().parents[3] / "configs").glob("*.toml"))


def test_configs_are_shipped():
    assert {p.name for p in CONFIGS} >= {"digits.toml", "fashion_mnist.toml", "mnist.toml"}


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_config_validates(path):
    config = load(path)  # loading reads no data (own-data's tables need not be there)
    assert config.run.name and config.privacy.delta < 1
    assert config.privacy.release_order < 1 / (2 * config.privacy.release_beta)


def test_mnist_uses_the_scalable_pate_settings():
    config = load(next(p for p in CONFIGS if p.name == "mnist.toml"))
    agg = config.aggregator.noise
    assert (
        config.partition.num_teachers,
        agg["threshold"],
        agg["sigma1"],
        agg["sigma2"],
    ) == (250, 200.0, 150.0, 40.0)


def test_overrides(tmp_path):
    config = load(CONFIGS[0], seed=7, device="cpu", run_dir=str(tmp_path / "x"))
    assert config.run.seed == 7 and config.run.device == "cpu"
    assert config.run.directory() == tmp_path / "x"


# --------------------------------------------------------------------------- packaged configs
# The configs ship inside the package (pate/configs, package data of the wheel); `configs` at the
# top of the checkout is a symlink to it, so `configs/digits.toml` keeps working.

REPO = pathlib.Path(__file__).resolve().parents[3]
NAMES = (
    "digits, fashion-mnist, fashion-mnist-class-means, fashion-mnist-class-means-gpu, "
    "fashion-mnist-eps1, fashion-mnist-knn, "
    "fashion-mnist-knn-round2, mnist, own-data"
)
PACKAGED = {
    "digits",
    "fashion-mnist",
    "fashion-mnist-class-means",
    "fashion-mnist-class-means-gpu",
    "fashion-mnist-eps1",
    "fashion-mnist-knn",
    "fashion-mnist-knn-round2",
    "mnist",
    "own-data",
}


def test_configs_is_the_package_folder():
    assert (REPO / "configs").is_symlink()
    assert (REPO / "configs").resolve() == (REPO / "pate" / "configs").resolve()
    shipped = packaged_configs()
    assert set(shipped) == PACKAGED
    assert {pathlib.Path(str(f)).name for f in shipped.values()} == {p.name for p in CONFIGS}


def test_the_configs_are_package_data_of_the_wheel():
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
        "setuptools"
    ]
    assert "configs/*.toml" in setuptools["package-data"]["pate"]


@pytest.mark.parametrize(
    "name",
    [
        "digits",
        "digits.toml",
        "fashion-mnist",
        "fashion_mnist",
        "Fashion-MNIST.toml",
        "own-data",
        "own_data",
    ],
)
def test_a_packaged_name_resolves_from_any_folder(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no configs/ here
    stem = name.lower().removesuffix(".toml").replace("-", "_")
    expected = load(REPO / "pate" / "configs" / f"{stem}.toml")
    assert load(name) == expected
    assert (
        pathlib.Path(str(resolve_config(name))).resolve()
        == (REPO / "pate" / "configs" / f"{stem}.toml").resolve()
    )


def test_the_configs_path_still_works(monkeypatch):
    monkeypatch.chdir(REPO)
    assert resolve_config("configs/digits.toml") == pathlib.Path("configs/digits.toml")
    assert load("configs/digits.toml") == load("digits")


def test_an_existing_file_wins_over_a_packaged_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = (REPO / "configs" / "digits.toml").read_text(encoding="utf-8")
    pathlib.Path("digits").write_text(
        text.replace('name = "digits"\nseed', 'name = "mine"\nseed', 1), encoding="utf-8"
    )
    assert resolve_config("digits") == pathlib.Path("digits")
    assert load("digits").run.name == "mine"


@pytest.mark.parametrize("value", ["digitz", "configs/digits.toml", "no/such/file.toml"])
def test_an_unknown_name_lists_the_packaged_names(value, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # configs/digits.toml is not here: a path is never a name
    with pytest.raises(FileNotFoundError) as info:
        load(value)
    message = str(info.value)
    assert f"--config {value}: no such file" in message
    assert NAMES in message and "pate init-config" in message


def test_the_cli_reports_an_unknown_config_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--config", "fashion-mnst", "--no-ledger"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pate run: error: --config fashion-mnst: no such file")
    assert "fashion-mnist" in err and "\n" not in err


def test_shipped_configs_set_no_relative_ledger():
    # A relative [privacy] ledger resolves against the config's folder: inside site-packages for a
    # packaged config. The shipped ones use the default ledger; copies (init-config) customise.
    for path in CONFIGS:
        privacy = tomllib.loads(path.read_text(encoding="utf-8"))["privacy"]
        assert privacy.get("ledger", True) is True, path.name


def _write_tables(folder: pathlib.Path, private_rows: int = 3000) -> None:
    """The own-data template's three tables (tests/teachers/test_tables.py's hospital export):
    3000 private rows, about the 5000 the template declares (within the factor 2 the planner
    accepts); the public rows unlabelled."""
    from tests.teachers.test_tables import hospital

    hospital(private_rows, 0).to_csv(folder / "private.csv", index=False)
    public = hospital(300, 1, first_id=900000).assign(outcome="")
    public.to_csv(folder / "public.csv", index=False)
    hospital(200, 2, first_id=950000).to_csv(folder / "evaluation.csv", index=False)


def test_own_data_leaves_the_choices_to_the_planner(tmp_path, monkeypatch):
    """The template plans from the records it declares (mechanism "auto", a target eps, no number
    of teachers): unchanged, it names the data file it needs; pointed at tables it plans."""
    monkeypatch.chdir(tmp_path)
    given = load("own-data")  # loading reads no data: the plan does, where the run starts
    assert given.needs_plan and given.aggregator.mechanism == "auto"
    with pytest.raises(pate.DatasetNotFoundError, match="private.csv does not exist"):
        plan(given)
    _write_tables(tmp_path)
    config, _ = plan(given)
    assert config.data.name == "csv:private.csv" and config.data.label == "outcome"
    assert config.teachers.model == "auto" and config.privacy.ledger is True
    assert config.aggregator.mechanism in ("auto", "class-means")  # the planner decides
    assert config.privacy.budget_eps <= 4.0
    text = (REPO / "configs" / "own_data.toml").read_text(encoding="utf-8")
    for documented in (
        "csv:PATH",
        "parquet:PATH",
        "npz:PATH",
        "imagefolder:PATH",
        "x_private",
        "y_public",
        "split",
        "classes",
        "label = ",
        "id = ",
        "drop = ",
        "preprocess = ",
        "PATH/train/<class>/<image>",
        "PATH/test",
        "REPLACE",
        "records = ",
        "pate init-config",
    ):
        assert documented in text, documented


def test_own_data_template_runs_on_named_tables(tmp_path, monkeypatch, capsys):
    """A copy of the template pointed at three CSV tables with named columns (an id, gaps, text
    columns, a text label) plans, printing which columns it uses and how, and runs (partition
    only)."""
    monkeypatch.chdir(tmp_path)
    _write_tables(tmp_path)
    assert main(["init-config", "own-data", "--output", "my_run.toml"]) == 0
    capsys.readouterr()
    assert main(["plan", "--config", "my_run.toml", "--no-ledger"]) == 0
    shown = capsys.readouterr().out
    assert "categorical sex, region, smoker" in shown and "id          patient_id" in shown
    assert "encoding    " in shown and "public rows" in shown
    flags = ["--run-dir", "run", "--no-ledger", "--until", "partition", "--no-progress"]
    assert main(["run", "--config", "my_run.toml", *flags]) == 0
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert (
        plan["mechanism"] == "class-means"
        and (tmp_path / "run" / rundir.STAGE_DIR / "partition.json").is_file()
    )
    data = load("my_run.toml").load_data(cache=False)
    assert data.class_names == ("home", "readmitted", "died") and len(data.unit_ids) == 3000
    assert (len(data.private), len(data.public), len(data.evaluation)) == (3000, 300, 200)


def test_run_a_packaged_config_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert (
        main(
            [
                "run",
                "--config",
                "digits",
                "--run-dir",
                str(tmp_path / "run"),
                "--no-ledger",
                "--until",
                "partition",
                "--no-progress",
            ]
        )
        == 0
    )
    saved = json.loads((tmp_path / "run" / "config.json").read_text(encoding="utf-8"))
    assert saved["run"]["name"] == "digits"
    assert (tmp_path / "run" / rundir.PARTITION).is_file()


def test_run_json_prints_the_stage_result(tmp_path, capsys):
    """`pate run --config F --json` prints JSON (json was imported only on the no-config path)."""
    assert (
        main(
            [
                "run",
                "--config",
                "digits",
                "--run-dir",
                str(tmp_path / "run"),
                "--no-ledger",
                "--until",
                "partition",
                "--no-progress",
                "--json",
            ]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    assert isinstance(printed, dict) and printed


def test_init_config_writes_an_editable_copy(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "mine.toml"
    assert main(["init-config", "digits", "--output", str(out)]) == 0
    assert out.read_bytes() == (REPO / "configs" / "digits.toml").read_bytes()
    assert load(out) == load("digits")
    assert str(out) in capsys.readouterr().out
    # default output: the packaged file name in the working directory
    assert main(["init-config", "fashion-mnist"]) == 0
    assert load(tmp_path / "fashion_mnist.toml").run.name == "fashion-mnist"
    # a folder: the packaged name inside it
    (tmp_path / "sub").mkdir()
    assert main(["init-config", "own_data", "-o", "sub"]) == 0
    assert (tmp_path / "sub" / "own_data.toml").is_file()


def test_init_config_refuses_to_overwrite(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "mine.toml"
    out.write_text("# my edits\n", encoding="utf-8")
    assert main(["init-config", "digits", "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "--force" in err and str(out) in err
    assert out.read_text(encoding="utf-8") == "# my edits\n"
    assert main(["init-config", "digits", "--output", str(out), "--force"]) == 0
    assert out.read_bytes() == (REPO / "configs" / "digits.toml").read_bytes()
    assert [p.name for p in tmp_path.iterdir()] == ["mine.toml"]  # no temporary file left


def test_init_config_unknown_name_lists_the_names(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["init-config", "cifar"]) == 2
    err = capsys.readouterr().err
    assert "'cifar' is not a config that ships with pate-learn" in err
    assert NAMES in err
    assert list(tmp_path.iterdir()) == []
    assert main(["init-config"]) == 2  # neither NAME nor --list
    assert "--list" in capsys.readouterr().err
    assert main(["init-config", "digits", "-o", str(tmp_path / "missing" / "x.toml")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_init_config_list(capsys):
    assert main(["init-config", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    listed = {line.split()[0] for line in lines if line and not line.startswith("installed in")}
    assert listed == PACKAGED
    assert any(line.startswith("own-data") and "CSV" in line for line in lines)
    assert init_config.packaged_name("Own_Data.toml") == "own-data"


def test_release_parameters_are_optional_without_a_release(tmp_path):
    """A config with [privacy] release = false may leave the release parameters out (the knn
    config does); with a release they stay required, and the error says when they are not."""
    text = (REPO / "configs" / "digits.toml").read_text()
    kept = [line for line in text.splitlines() if not line.startswith("release_")]
    no_release = tmp_path / "no_release.toml"
    no_release.write_text("\n".join(kept).replace("[privacy]", "[privacy]\nrelease = false") + "\n")
    config = load(no_release)
    assert config.privacy.release is False and config.privacy.release_order == 10.0
    with_release = tmp_path / "with_release.toml"
    with_release.write_text("\n".join(kept) + "\n")
    with pytest.raises(
        ConfigError, match=r"release_order is required \(unless \[privacy\] release = false\)"
    ):
        load(with_release)
    assert "release_order" not in (REPO / "configs" / "fashion_mnist_knn.toml").read_text()


def test_knn_dims_left_out_fit_a_narrow_table():
    """A 30-column table: the default PCA keeps 30 dimensions, not the 64 that were refused
    (class-means could not run on such a table with its defaults); a given value is kept."""
    assert knn_run().knn_settings((30,))["dims"] == 30
    assert knn_run().knn_settings((784,))["dims"] == 64
    assert knn_run(dims=50).knn_settings((30,))["dims"] == 50  # refused later, by name
    assert knn_run().knn_settings((1, 28, 28))["features"] == "scatternet"


def knn_run(**knn) -> RunConfig:
    """A parsed Private-kNN config with ``[knn]`` = ``knn`` (nothing else set)."""
    return RunConfig.parse(
        {
            "run": {"name": "x"},
            "data": {"name": "digits"},
            "aggregator": {"mechanism": "private-knn"},
            "privacy": {"delta": 1e-5, "release": False},
            "knn": knn,
        }
    )
