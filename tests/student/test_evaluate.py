import json

import numpy as np
import pytest

from pate.student.evaluate import confusion_matrix, evaluation_metrics


def test_confusion_matrix_counts():
    cm = confusion_matrix([0, 0, 1, 2, 2, 2], [0, 1, 1, 2, 0, 2], num_classes=3)
    assert cm.tolist() == [[1, 1, 0], [0, 1, 0], [1, 0, 2]]


def test_metrics_per_class_and_absent_class():
    m = evaluation_metrics(np.array([0, 0, 1, 1]), np.array([0, 1, 1, 1]), num_classes=3)
    assert m["accuracy"] == pytest.approx(0.75)
    assert m["per_class_accuracy"] == [0.5, 1.0, None]
    assert m["per_class_support"] == [2, 2, 0]
    assert np.array(m["confusion_matrix"]).sum() == 4
    json.dumps(m)


def test_metrics_refuse_bad_labels():
    with pytest.raises(ValueError, match="y_pred"):
        evaluation_metrics([0, 1], [0, 3], num_classes=3)
    with pytest.raises(ValueError, match="same length"):
        confusion_matrix([0, 1], [0], num_classes=2)
    with pytest.raises(TypeError, match="y_true"):
        confusion_matrix([0.5, 1.0], [0, 1], num_classes=2)
