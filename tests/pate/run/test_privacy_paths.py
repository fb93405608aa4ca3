"""The privacy promise on every path (issue #13): real runs on the digits data, real ledgers.

Each test names the break it guards against: stage commands that skipped the ledger, one dataset
with several budgets, a config budget that silently lost to the ledger's, answers written before
they were charged (tight conversion, concurrent runs), replayable noise, forks that shared their
source's run id.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from pate.cli import main
from pate.ledger import Ledger, dataset_identity
from pate.run import rundir, stages
from pate.run.config import build, load
from pate.run.pipeline import Pipeline, fork_run
from pate.run.rundir import Run
from pate.teachers.errors import ConfigError

REPO = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def base(tmp_path_factory, small_digits):
    """One trained ensemble (partition, teachers, votes) that the tests fork from."""
    tmp = tmp_path_factory.mktemp("base")
    config = load(small_digits(tmp), run_dir=str(tmp / "base"), ledger=False)
    pipeline = Pipeline(config, progress=False)
    pipeline.run(until="votes")
    return pipeline


def forked(base, tmp_path, name, *, ledger, privacy=None, aggregator=None):
    """A fork of ``base`` (new run id) with other [privacy]/[aggregator] settings."""
    raw = base.config.to_dict()
    raw["privacy"].update(privacy or {})
    raw["aggregator"].update(aggregator or {})
    config = build(
        raw, run_dir=str(tmp_path / name), ledger=False if ledger is None else str(ledger)
    )
    return fork_run(base.run_dir, config)


def charged_answers(ledger_path, run_dir) -> int:
    """Answers the ledger charged to the run in ``run_dir``."""
    run_id = json.loads((pathlib.Path(run_dir) / "run.json").read_text())["run_id"] + ":aggregate"
    with Ledger(ledger_path) as ledger:
        (dataset,) = [d["digest"] for d in ledger.datasets()]
        return sum(e.event.answered for e in ledger.events(dataset, run_id=run_id))


def spent(ledger_path) -> float:
    with Ledger(ledger_path) as ledger:
        (dataset,) = [d["digest"] for d in ledger.datasets()]
        return ledger.summary(dataset)["spent"]


# ---------------------------------------------------------------- 1. every path charges the ledger


def test_pate_aggregate_after_an_exhausted_budget_is_refused(base, tmp_path, capsys):
    ledger = tmp_path / "ledger.sqlite3"
    first = forked(base, tmp_path, "first", ledger=ledger, privacy={"budget_eps": 30.0})
    Pipeline(
        build(json.loads((first / "config.json").read_text())), resume=True, progress=False
    ).run(until="aggregate")
    before = spent(ledger)
    assert 0 < before <= 30.0
    second = forked(base, tmp_path, "second", ledger=ledger, privacy={"budget_eps": 30.0})
    rc = main(["aggregate", "--run-dir", str(second), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 3 and "no room for even one query" in err, err
    assert "pate budget set --dataset" in err and f"pate run --run-dir {second} --resume" in err
    assert not (second / "labels.npy").exists() and not (second / rundir.PENDING).exists()
    assert spent(ledger) == before  # nothing drawn, nothing charged
    # and the student cannot train on labels that were never released
    assert main(["train-student", "--run-dir", str(second), "--no-progress"]) != 0


def test_stage_commands_charge_the_same_ledger_as_pate_run(base, tmp_path, capsys):
    ledger = tmp_path / "ledger.sqlite3"
    run_dir = forked(base, tmp_path, "stepwise", ledger=ledger)
    assert main(["aggregate", "--run-dir", str(run_dir), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    labels = np.load(run_dir / "labels.npy")
    assert info["answered"] == int((labels >= 0).sum()) == charged_answers(ledger, run_dir) > 0


# ---------------------------------------------------------------- 2. one dataset, one identity


def _npz(path, x, y, data):
    np.savez(
        path,
        x_private=x,
        y_private=y,
        x_public=data.public.x,
        y_public=data.public.y,
        x_evaluation=data.evaluation.x,
        y_evaluation=data.evaluation.y,
    )
    return f"npz:{path}"


def _preflight(tmp_path, small_digits, name, source, ledger, **privacy):
    extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in privacy.items())
    config_path = small_digits(
        tmp_path,
        name=f"{name}.toml",
        replace=(
            ('name = "digits"\n\n[partition]', f'name = "{source}"\nrecords = 1000\n\n[partition]'),
            ("[privacy]\n", "[privacy]\n" + extra),
        ),
    )
    config = load(config_path, run_dir=str(tmp_path / name), ledger=str(ledger))
    run = Run.create(config, progress=False)
    stages.preflight(run)
    return run


def test_the_same_records_get_one_budget_whatever_their_order_file_name_or_cwd(
    tmp_path, small_digits, digits, monkeypatch, capsys
):
    ledger = tmp_path / "ledger.sqlite3"
    x, y = digits.private.x, digits.private.y
    order = np.random.default_rng(1).permutation(len(y))
    sources = [
        _npz(tmp_path / "a.npz", x, y, digits),
        _npz(tmp_path / "shuffled.npz", x[order], y[order], digits),
    ]
    (tmp_path / "elsewhere").mkdir()
    for i, source in enumerate(sources * 2):
        if i >= 2:
            monkeypatch.chdir(tmp_path / "elsewhere")
        _preflight(tmp_path, small_digits, f"run{i}", source, ledger)
    _preflight(tmp_path, small_digits, "named", sources[1], ledger, dataset="hospital-a")
    with Ledger(ledger) as led:
        datasets = led.datasets()
        stored = led.dataset_id(dataset_identity(x, y))
    assert len(datasets) == 1
    assert datasets[0]["digest"] == stored != dataset_identity(x, y).digest  # keyed
    # the first name is kept (main renamed the dataset after each run's source, so that
    # `pate budget show --dataset <first name>` said "not in the ledger; register it")
    assert datasets[0]["name"] == sources[0]
    assert datasets[0]["aliases"] == [sources[1], "hospital-a"]
    for name in (sources[0], sources[1], "hospital-a"):
        assert main(["budget", "show", "--dataset", name, "--ledger", str(ledger), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["dataset"] == datasets[0]["digest"]
    assert main(["budget", "list", "--ledger", str(ledger)]) == 0
    listed = capsys.readouterr().out
    assert f"also named {sources[1]}, hospital-a" in listed and sources[0] in listed


def test_a_run_refused_for_its_budget_leaves_the_ledger_as_it_was(tmp_path, small_digits, digits):
    """Refused before the ledger is written: no new name for the dataset, nothing registered."""
    ledger = tmp_path / "ledger.sqlite3"
    x, y = digits.private.x, digits.private.y
    _preflight(tmp_path, small_digits, "first", _npz(tmp_path / "a.npz", x, y, digits), ledger)
    with Ledger(ledger) as led:
        led.set_budget(dataset_identity(x, y).digest, eps=50.0, delta=1e-5)
        before = (led.datasets(), led.audit_log(dataset_identity(x, y).digest))
    with pytest.raises(ConfigError, match="eps=50"):
        _preflight(tmp_path, small_digits, "other", _npz(tmp_path / "b.npz", x, y, digits), ledger)
    with Ledger(ledger) as led:
        assert (led.datasets(), led.audit_log(dataset_identity(x, y).digest)) == before


def test_a_superset_of_spent_records_shares_their_budget(tmp_path, small_digits, digits):
    from pate.core.errors import BudgetExceededError

    ledger = tmp_path / "ledger.sqlite3"
    x, y = digits.private.x, digits.private.y
    run = _preflight(
        tmp_path, small_digits, "subset", _npz(tmp_path / "a.npz", x[:-1], y[:-1], digits), ledger
    )
    subset = dataset_identity(x[:-1], y[:-1]).digest
    orders = run.config.privacy.order_grid()
    with Ledger(ledger) as led:  # an earlier run spent eps ~900 of the subset's 1000
        led.charge(subset, [_event(orders, _curve(orders, 900.0))], run_id="earlier-run")
    _preflight(tmp_path, small_digits, "superset", _npz(tmp_path / "b.npz", x, y, digits), ledger)
    superset = dataset_identity(x, y).digest
    with Ledger(ledger) as led:
        assert len(led.datasets()) == 2 and superset != subset
        assert led.summary(superset)["spent"] >= led.summary(subset)["spent"] > 850
        with pytest.raises(BudgetExceededError):  # a fresh budget of 1000 would have allowed it
            led.reserve(superset, orders=orders, rdp=_curve(orders, 300.0), run_id="greedy")


def _curve(orders, eps):
    """A Gaussian-like RDP curve c * order whose (eps, 1e-5) conversion is ``eps``."""
    from pate import analysis

    lo, hi = 0.0, eps
    for _ in range(100):
        mid = (lo + hi) / 2
        if analysis.eps_from_rdp(mid * orders, orders=orders, delta=1e-5)[0] < eps:
            lo = mid
        else:
            hi = mid
    return lo * orders


def _event(orders, rdp):
    from pate.analysis import PrivacyEvent

    return PrivacyEvent("gnmax", {"sigma": 1.0}, orders, rdp, rdp, queries=1, answered=1)


# ---------------------------------------------------------------- 3. the budget has one authority


def test_a_config_budget_that_differs_from_the_ledger_s_is_refused_before_anything(
    base, tmp_path, small_digits, capsys
):
    ledger = tmp_path / "ledger.sqlite3"
    run_dir = forked(base, tmp_path, "spent", ledger=ledger)  # registers budget 1000
    Pipeline(
        build(json.loads((run_dir / "config.json").read_text())), resume=True, progress=False
    ).run(until="aggregate")
    config = small_digits(
        tmp_path, name="other-budget.toml", replace=(("budget_eps = 1000.0", "budget_eps = 120.0"),)
    )
    target = tmp_path / "new-run"
    rc = main(["run", "--config", str(config), "--run-dir", str(target), "--ledger", str(ledger)])
    err = capsys.readouterr().err
    assert rc != 0 and "eps=1000" in err and "[privacy] budget_eps = 120" in err, err
    assert "pate budget set" in err
    assert not target.exists()
    # raising the ledger's budget is possible, recorded, and then the config agrees
    digest = dataset_identity(base.ctx.data.private.x, base.ctx.data.private.y).digest
    assert (
        main(
            [
                "budget",
                "set",
                "--dataset",
                digest,
                "--eps",
                "1200",
                "--delta",
                "1e-5",
                "--ledger",
                str(ledger),
            ]
        )
        == 0
    )
    with Ledger(ledger) as led:
        changes = led.budget_changes(digest)
    assert [c["change"] for c in changes] == ["initial", "raised"] and changes[1]["spent_eps"] > 0


def _snapshot(folder: pathlib.Path) -> dict:
    """Every file and folder under ``folder``: bytes (files) and modification time."""
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }


@pytest.mark.parametrize(
    "flags", [["--budget-eps", "1000"], ["--budget-eps", "999", "--queries", "30"]]
)
def test_a_refused_stage_command_changes_no_file_of_the_run(base, tmp_path, capsys, flags):
    """A stage command whose flags the ledger refuses (another budget for the dataset) leaves
    the run directory exactly as it was (main rewrote config.json and run.json first)."""
    ledger = tmp_path / "ledger.sqlite3"
    run_dir = forked(base, tmp_path, "refused", ledger=ledger, privacy={"budget_eps": 40.0})
    digest = dataset_identity(base.ctx.data.private.x, base.ctx.data.private.y).digest
    with Ledger(ledger) as led:
        led.set_budget(digest, eps=40.0, delta=1e-5)
    before = _snapshot(run_dir)
    rc = main(["aggregate", "--run-dir", str(run_dir), "--no-progress", *flags])
    err = capsys.readouterr().err
    assert rc == 2 and "eps=40" in err and "pate budget set" in err, err
    assert _snapshot(run_dir) == before
    assert json.loads((run_dir / "config.json").read_text())["privacy"]["budget_eps"] == 40.0
    # flags the ledger accepts are saved (and the stage runs)
    assert main(["aggregate", "--run-dir", str(run_dir), "--no-progress", "--queries", "30"]) == 0
    assert json.loads((run_dir / "config.json").read_text())["aggregator"]["queries"] == 30


# ---------------------------------------------------------------- 4. charge before release


def test_tight_conversion_never_leaves_uncharged_labels(base, tmp_path):
    ledger = tmp_path / "ledger.sqlite3"
    run_dir = forked(
        base, tmp_path, "tight", ledger=ledger, privacy={"budget_eps": 25.0, "conversion": "tight"}
    )
    Pipeline(
        build(json.loads((run_dir / "config.json").read_text())), resume=True, progress=False
    ).run(until="aggregate")
    labels = np.load(run_dir / "labels.npy")
    assert charged_answers(ledger, run_dir) == int((labels >= 0).sum()) > 0
    with Ledger(
        ledger
    ) as led:  # the ledger judges this budget with the conversion the run stops on
        (dataset,) = led.datasets()
        assert led.budget(dataset["digest"]).conversion == "tight"
    assert spent(ledger) <= 25.0
    # a run that would judge the same budget with the classic conversion is refused up front
    other = forked(base, tmp_path, "classic", ledger=ledger, privacy={"budget_eps": 25.0})
    with pytest.raises(ConfigError, match="conversion"):
        Pipeline(
            build(json.loads((other / "config.json").read_text())),
            resume=True,
            progress=False,
        ).run(until="aggregate")
    assert not (other / "labels.npy").exists()


def test_two_concurrent_runs_never_leave_uncharged_labels(base, tmp_path):
    ledger = tmp_path / "ledger.sqlite3"
    runs = [
        forked(base, tmp_path, f"concurrent{i}", ledger=ledger, privacy={"budget_eps": 40.0})
        for i in range(2)
    ]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "pate", "aggregate", "--run-dir", str(r), "--no-progress"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in runs
    ]
    results = [p.communicate(timeout=300) for p in procs]
    codes = [p.returncode for p in procs]
    assert set(codes) <= {0, 3} and 0 in codes, results
    for run_dir, code in zip(runs, codes):
        assert not (run_dir / rundir.PENDING).exists()
        if code == 0:
            labels = np.load(run_dir / "labels.npy")
            assert charged_answers(ledger, run_dir) == int((labels >= 0).sum())
        else:
            assert not (run_dir / "labels.npy").exists()
    assert spent(ledger) <= 40.0


def test_data_dependent_budget_basis_needs_the_ledger_off_and_the_run_marked_not_private(tmp_path):
    text = (
        (REPO / "configs" / "digits.toml")
        .read_text()
        .replace("queries = 400", 'queries = 400\nbudget_basis = "data-dependent"')
    )
    path = tmp_path / "dd.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="NOT private"):
        load(path)
    with pytest.raises(ConfigError, match="NOT private"):
        load(path, ledger=False)
    path.write_text(text.replace("[privacy]\n", "[privacy]\nprivate = false\n"))
    config = load(path, ledger=False)
    assert not config.is_private


# ---------------------------------------------------------------- 5. fresh noise by default


def test_two_runs_of_a_shipped_config_with_the_same_seed_draw_different_noise(base, tmp_path):
    labels = []
    for name in ("fresh-a", "fresh-b"):
        run_dir = forked(base, tmp_path, name, ledger=None)
        config = build(json.loads((run_dir / "config.json").read_text()))
        assert config.aggregator.noise_seed is None and config.run.seed == 0
        Pipeline(config, resume=True, progress=False).run(until="aggregate")
        labels.append(np.load(run_dir / "labels.npy"))
    assert not np.array_equal(*labels)


def test_seeded_noise_replays_and_the_report_says_not_private(base, tmp_path):
    outputs = []
    for name in ("seeded-a", "seeded-b"):
        run_dir = forked(base, tmp_path, name, ledger=None, aggregator={"noise_seed": 7})
        Pipeline(
            build(json.loads((run_dir / "config.json").read_text())),
            resume=True,
            progress=False,
        ).run()
        outputs.append(np.load(run_dir / "labels.npy"))
    np.testing.assert_array_equal(*outputs)
    report = (run_dir / "report.md").read_text()
    statement = report[report.index("## Privacy statement") :]
    first = statement.split("\n\n")[1]
    assert "NOT" in first and "private" in first and "reproducible" in first.lower()
    assert "no budget was enforced" in statement.split("##")[1].lower()


# ---------------------------------------------------------------- 6. forks are runs of their own


def test_a_fork_gets_its_own_run_id_and_its_own_charges(base, tmp_path):
    ledger = tmp_path / "ledger.sqlite3"
    forks = [forked(base, tmp_path, f"fork{i}", ledger=ledger) for i in range(2)]
    ids = {json.loads((f / "run.json").read_text())["run_id"] for f in forks}
    assert len(ids) == 2 and base.ctx.state["run_id"] not in ids
    for f in forks:
        Pipeline(
            build(json.loads((f / "config.json").read_text())), resume=True, progress=False
        ).run(until="aggregate")
        assert charged_answers(ledger, f) == int((np.load(f / "labels.npy") >= 0).sum()) > 0


# ---------------------------------------------------------------- 7. the ledger's location


def test_a_relative_ledger_path_resolves_against_the_config_folder(
    tmp_path, small_digits, monkeypatch
):
    folder = tmp_path / "project"
    folder.mkdir()
    config_path = small_digits(
        folder, replace=(("[privacy]\n", '[privacy]\nledger = "budget.sqlite3"\n'),)
    )
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    config = load(pathlib.Path("..") / "project" / config_path.name, run_dir=str(tmp_path / "r"))
    run = Run.create(config, progress=False)
    assert run.ledger_path == (folder / "budget.sqlite3").resolve()
    stages.preflight(run)
    assert (folder / "budget.sqlite3").exists() and not (
        tmp_path / "cwd" / "budget.sqlite3"
    ).exists()
