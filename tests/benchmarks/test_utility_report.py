"""benchmarks/utility_report.py: the output files of one benchmark run (the plot here; the table
and the merge through benchmarks/utility.py --merge in test_utility.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def utility(load_benchmark):
    return load_benchmark("utility_report")


def test_the_plot_draws_every_method(utility, tmp_path, monkeypatch):
    """Twelve guarantee methods, twelve lines (eight markers once silently dropped the ninth)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.axes import Axes

    drawn = []
    plot = Axes.plot

    def spy(self, *args, **kwargs):
        drawn.append(kwargs.get("label"))
        return plot(self, *args, **kwargs)

    monkeypatch.setattr(Axes, "plot", spy)
    rows = [
        {
            "method": f"method {i}",
            "kind": "guarantee",
            "target_eps": 1.0,
            "eps": 1.0,
            "accuracy": 0.5,
            "seconds": 1.0,
        }
        for i in range(12)
    ]
    utility.write_outputs(rows, tmp_path, {"delta": 1e-5}, quiet=True)
    assert sorted(drawn) == sorted(f"method {i}" for i in range(12))
    assert (tmp_path / "utility_fmnist.png").stat().st_size > 0
