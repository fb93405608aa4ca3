"""benchmarks/rule_product_fmnist.py: its refusals before any work (the benchmark runs on demand; the
recovery and the product it uses are tested with the library: tests/pate/core/test_mean_release.py,
tests/student/test_rule_product.py)."""

from __future__ import annotations

import pytest

from pate.run import rundir


@pytest.fixture(scope="module")
def rule_product(load_benchmark):
    return load_benchmark("rule_product_fmnist")


def test_a_directory_that_is_not_a_finished_class_means_run_is_refused(
    rule_product, tmp_path, capsys
):
    (tmp_path / rundir.CONFIG).write_text('{"aggregator": {"mechanism": "gnmax"}}')
    with pytest.raises(SystemExit) as exit_info:
        rule_product.main([str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    files = (rundir.KNN_EMBEDDINGS, rundir.LABEL_SCORES, rundir.LABELS, rundir.STUDENT_WEIGHTS)
    assert f"has no {', '.join(files)}" in err
    (tmp_path / rundir.PRIVATE_DIR).mkdir()
    for name in files:
        (tmp_path / name).write_bytes(b"")
    with pytest.raises(SystemExit):
        rule_product.main([str(tmp_path)])
    assert "mechanism 'gnmax', not 'class-means'" in capsys.readouterr().err
    (tmp_path / rundir.CONFIG).write_text(
        '{"aggregator": {"mechanism": "class-means"}, "knn": {"features": "student"}}'
    )
    with pytest.raises(SystemExit):
        rule_product.main([str(tmp_path)])
    assert "[knn] features = 'student'; only the PCA front-ends" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        rule_product.main([str(tmp_path), "--temperatures", "0"])
    assert "--temperatures must be > 0, got 0.0" in capsys.readouterr().err
