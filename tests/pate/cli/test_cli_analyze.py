"""`pate analyze`: the privacy analysis from the command line."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from pate import analysis
from pate.cli import main


@pytest.fixture
def votes_file(tmp_path):
    rng = np.random.default_rng(11)
    votes = np.stack([rng.multinomial(250, rng.dirichlet(np.full(10, 0.2))) for _ in range(120)])
    path = tmp_path / "votes.npy"
    np.save(path, votes)
    return path, votes


def run_json(capsys, *args):
    assert main(["analyze", *map(str, args), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_confident_gnmax_expected_and_realised(capsys, tmp_path, votes_file):
    path, votes = votes_file
    common = [
        "--votes",
        path,
        "--mechanism",
        "confident-gnmax",
        "--threshold",
        200,
        "--sigma1",
        150,
        "--sigma2",
        40,
        "--delta",
        1e-5,
        "--orders",
        "reference",
    ]
    out = run_json(capsys, *common)
    kw = dict(threshold=200, sigma1=150, sigma2=40, orders=analysis.REFERENCE_ORDERS)
    eps, order = analysis.eps_from_rdp(
        analysis.confident_gnmax_rdp(votes, **kw), orders=analysis.REFERENCE_ORDERS, delta=1e-5
    )
    assert out["eps_data_dependent"] == eps and out["order"] == order
    assert out["answered_kind"] == "expected" and 0 < out["answered"] < 120
    assert out["eps_data_dependent"] <= out["eps_data_independent"]
    assert out["data_dependent_is_private"] is False

    mask = np.arange(120) % 2 == 0
    np.save(tmp_path / "mask.npy", mask)
    out = run_json(capsys, *common, "--answered", tmp_path / "mask.npy")
    eps, _ = analysis.eps_from_rdp(
        analysis.confident_gnmax_rdp(votes, answered=mask, **kw),
        orders=analysis.REFERENCE_ORDERS,
        delta=1e-5,
    )
    assert (
        out["eps_data_dependent"] == eps
        and out["answered"] == 60
        and out["answered_kind"] == "realised"
    )


def test_gnmax_lnmax_and_text_output(capsys, votes_file):
    path, votes = votes_file
    out = run_json(capsys, "--votes", path, "--mechanism", "gnmax", "--sigma", 40, "--delta", 1e-6)
    expected = analysis.eps_from_rdp(
        120 * analysis.DEFAULT_ORDERS / 40**2, orders=analysis.DEFAULT_ORDERS, delta=1e-6
    )[0]
    assert out["eps_data_independent"] == pytest.approx(expected, rel=1e-12)
    out = run_json(
        capsys,
        "--votes",
        path,
        "--mechanism",
        "lnmax",
        "--scale",
        50,
        "--delta",
        1e-5,
        "--orders",
        "2,4,8,16",
        "--conversion",
        "tight",
    )
    assert out["orders"] == "custom" and out["order"] in (2, 4, 8, 16)
    assert (
        main(
            [
                "analyze",
                "--votes",
                str(path),
                "--mechanism",
                "gnmax",
                "--sigma",
                "40",
                "--delta",
                "1e-5",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "eps data-independent" in text and "NOT private" in text


@pytest.mark.parametrize(
    "args, message",
    [
        (["--mechanism", "gnmax", "--delta", "1e-5"], "needs --sigma"),
        (["--mechanism", "gnmax", "--sigma", "-1", "--delta", "1e-5"], "--sigma must be > 0"),
        (["--mechanism", "gnmax", "--sigma", "4", "--delta", "1"], "--delta must lie"),
        (
            [
                "--mechanism",
                "confident-gnmax",
                "--threshold",
                "1",
                "--sigma1",
                "1",
                "--delta",
                "1e-5",
            ],
            "needs --sigma2",
        ),
        (
            ["--mechanism", "gnmax", "--sigma", "4", "--delta", "1e-5", "--orders", "0.5,2"],
            "--orders",
        ),
    ],
)
def test_bad_input_gives_one_clear_line(capsys, votes_file, args, message):
    path, _ = votes_file
    assert main(["analyze", "--votes", str(path), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_missing_and_malformed_votes(capsys, tmp_path):
    assert (
        main(
            [
                "analyze",
                "--votes",
                str(tmp_path / "nope.npy"),
                "--mechanism",
                "gnmax",
                "--sigma",
                "4",
                "--delta",
                "1e-5",
            ]
        )
        == 2
    )
    assert "not found" in capsys.readouterr().err
    np.save(tmp_path / "bad.npy", np.array([1, 2, 3]))
    assert (
        main(
            [
                "analyze",
                "--votes",
                str(tmp_path / "bad.npy"),
                "--mechanism",
                "gnmax",
                "--sigma",
                "4",
                "--delta",
                "1e-5",
            ]
        )
        == 2
    )
    assert "2-D" in capsys.readouterr().err


def test_analyze_does_not_import_torch(votes_file):
    path, _ = votes_file
    code = (
        "import sys; from pate.cli import main; "
        f"rc = main(['analyze', '--votes', {str(path)!r}, '--mechanism', 'gnmax', '--sigma', '40', "
        "'--delta', '1e-5', '--json']); "
        "assert 'torch' not in sys.modules, 'torch was imported'; sys.exit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["queries"] == 120


@pytest.mark.parametrize(
    "args, message",
    [
        (
            [
                "--mechanism",
                "confident-gnmax",
                "--threshold",
                "1",
                "--sigma1",
                "1",
                "--sigma2",
                "1",
                "--sigma",
                "3",
            ],
            "--sigma is not a parameter of confident-gnmax",
        ),
        (
            ["--mechanism", "gnmax", "--sigma", "4", "--smooth-sensitivity"],
            "--smooth-sensitivity needs a mechanism with a threshold check",
        ),
        (["--mechanism", "lnmax", "--scale", "0"], "--scale must be > 0"),
    ],
)
def test_noise_flags_are_validated_by_the_mechanism(capsys, votes_file, args, message):
    path, _ = votes_file
    assert main(["analyze", "--votes", str(path), "--delta", "1e-5", *args]) == 2
    assert message in capsys.readouterr().err


def test_answered_mask_refused_where_every_query_is_answered(capsys, tmp_path, votes_file):
    path, _ = votes_file
    np.save(tmp_path / "mask.npy", np.ones(120, dtype=bool))
    assert (
        main(
            [
                "analyze",
                "--votes",
                str(path),
                "--mechanism",
                "gnmax",
                "--sigma",
                "4",
                "--delta",
                "1e-5",
                "--answered",
                str(tmp_path / "mask.npy"),
            ]
        )
        == 2
    )
    assert "--answered does not apply to --mechanism gnmax" in capsys.readouterr().err


def test_flags_and_choices_come_from_the_registry(capsys):
    from pate import mechanisms

    with pytest.raises(SystemExit):
        main(["analyze", "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps long help lines
    analysable = [s for s in mechanisms.REGISTRY.values() if not s.needs_student]
    assert "{" + ",".join(s.name for s in analysable) + "}" in text
    for spec in analysable:
        for param in spec.params:
            assert f"{param.flag} " in text and param.help in text
    # No student predictions to analyse here: Interactive GNMax and its flag are left out.
    assert "interactive-gnmax" not in text and "--student-confidence" not in text


def test_realised_cost_is_the_event_the_aggregator_charges(capsys, tmp_path, votes_file):
    from pate.core.aggregators import confident_gnmax

    path, votes = votes_file
    result = confident_gnmax(
        votes, threshold=200, sigma1=150, sigma2=40, rng=np.random.default_rng(0)
    )
    np.save(tmp_path / "mask.npy", result.answered_mask)
    out = run_json(
        capsys,
        "--votes",
        path,
        "--mechanism",
        "confident-gnmax",
        "--threshold",
        200,
        "--sigma1",
        150,
        "--sigma2",
        40,
        "--delta",
        1e-5,
        "--answered",
        tmp_path / "mask.npy",
    )
    eps, order = analysis.eps_from_rdp(result.event.rdp, orders=analysis.DEFAULT_ORDERS, delta=1e-5)
    assert out["eps_data_dependent"] == eps and out["order"] == order
    eps_ind, _ = analysis.eps_from_rdp(
        result.event.rdp_data_independent, orders=analysis.DEFAULT_ORDERS, delta=1e-5
    )
    assert out["eps_data_independent"] == eps_ind
