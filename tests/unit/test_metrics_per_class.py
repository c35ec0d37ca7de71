"""mf.metrics that sum per class behave as TF1's: mean_iou over a running confusion
matrix, mean_per_class_accuracy over per-class counts; inputs flattened, streamed in two
batches, with and without weights. Expected values were recorded from TF 2.21's
tf.compat.v1.metrics on the same inputs."""

import numpy as np
import pytest

import mpiflow as mf
from mpiflow import errors

Y = np.array([0, 1, 2, 1, 3, 0, 2, 2], np.int64)
P = np.array([0, 2, 2, 1, 0, 0, 1, 2], np.int64)
W = np.array([1.0, 2.0, 0.5, 1.0, 3.0, 0.0, 1.0, 2.0], np.float32)


def _two_batches(metric, weighted):
    """Stream (Y, P, W) in two halves; return the initial value, each update's result
    and the final value."""
    y, p = mf.placeholder(mf.int64, [None]), mf.placeholder(mf.int64, [None])
    w = mf.placeholder(mf.float32, [None])
    value, update = metric(y, p, 4, weights=w if weighted else None)
    with mf.Session() as sess:
        sess.run(mf.local_variables_initializer())
        initial = sess.run(value)
        seen = [sess.run(update, {y: Y[h], p: P[h], w: W[h]})
                for h in (slice(0, 4), slice(4, 8))]
        return initial, seen, sess.run(value)


@pytest.mark.parametrize("weighted,expected_cm,expected", [
    (False, [[2, 0, 0, 0], [0, 1, 1, 0], [0, 1, 2, 0], [1, 0, 0, 0]], 0.375),
    (True, [[1, 0, 0, 0], [0, 1, 2, 0], [0, 1, 2.5, 0], [3, 0, 0, 0]], 0.23863637)])
def test_mean_iou_streams_a_confusion_matrix_as_tf1(weighted, expected_cm, expected):
    initial, seen, final = _two_batches(mf.metrics.mean_iou, weighted)
    assert initial == 0, "no class seen yet: 0, not NaN"
    # As in TF1 the update op returns the running confusion matrix, not the mean.
    assert seen[1].dtype == np.float64
    np.testing.assert_array_equal(seen[1], expected_cm)
    np.testing.assert_allclose(final, expected, rtol=1e-6)


@pytest.mark.parametrize("weighted,expected_per_class,expected", [
    (False, [[1.0, 0.5, 1.0, 0.0], [1.0, 0.5, 0.6666667, 0.0]], 0.5416667),
    (True, [[1.0, 0.33333334, 1.0, 0.0], [1.0, 0.33333334, 0.71428573, 0.0]], 0.5119048)])
def test_mean_per_class_accuracy_streams_per_class_counts_as_tf1(weighted, expected_per_class,
                                                                 expected):
    initial, seen, final = _two_batches(mf.metrics.mean_per_class_accuracy, weighted)
    assert initial == 0
    np.testing.assert_allclose(seen, expected_per_class, rtol=1e-6)
    np.testing.assert_allclose(final, expected, rtol=1e-6)


def test_segmentation_maps_are_flattened_and_absent_classes_count_as_tf1():
    # Class 4 never occurs: mean_iou leaves it out, mean_per_class_accuracy counts it 0.
    shape = (2, 2, 2)
    iou, update_iou = mf.metrics.mean_iou(Y.reshape(shape), P.reshape(shape), 5,
                                          weights=W.reshape(shape))
    acc, update_acc = mf.metrics.mean_per_class_accuracy(Y.reshape(shape), P.reshape(shape),
                                                         5, weights=W.reshape(shape))
    with mf.Session() as sess:
        sess.run(mf.local_variables_initializer())
        sess.run([update_iou, update_acc])
        np.testing.assert_allclose(sess.run([iou, acc]), [0.23863637, 0.40952381], rtol=1e-6)


def test_per_class_sums_are_local_metric_variables_named_as_tf1():
    iou, update_iou = mf.metrics.mean_iou(Y, P, 4, metrics_collections=["evals"],
                                          updates_collections=["updates"])
    acc, update_acc = mf.metrics.mean_per_class_accuracy(Y, P, 4, metrics_collections=["evals"],
                                                         updates_collections=["updates"])
    names = [v.op.name for v in mf.local_variables()]
    assert names == ["mean_iou/total_confusion_matrix", "mean_accuracy/total",
                     "mean_accuracy/count"]
    assert [v.op.name for v in mf.get_collection(mf.GraphKeys.METRIC_VARIABLES)] == names
    assert mf.local_variables()[0].dtype.base_dtype == mf.float64
    assert mf.global_variables() == [] and mf.trainable_variables() == []
    assert mf.get_collection("evals") == [iou, acc]
    assert mf.get_collection("updates") == [update_iou, update_acc]
    assert acc.op.name == "mean_accuracy/mean_accuracy"
    assert update_acc.op.name == "mean_accuracy/update_op"


def test_per_class_metrics_refuse_mismatched_shapes_naming_the_metric():
    with pytest.raises(errors.InvalidArgumentError, match="mean_iou"):
        mf.metrics.mean_iou(np.zeros(3, np.int64), np.zeros(4, np.int64), 2)
    with pytest.raises(errors.InvalidArgumentError, match="mean_per_class_accuracy"):
        mf.metrics.mean_per_class_accuracy(np.zeros(3, np.int64), np.zeros(4, np.int64), 2)
