"""mf.metrics at k behave as TF1's: precision and recall of the k highest-scoring classes
(ties to the lower class id) or of given predicted ids, against sparse labels (one or
several per example, repeats counted once, ids outside the classes never recalled), per
class with class_id, weighted per example. Expected values were recorded from TF 2.21's
tf.compat.v1.metrics streaming the same two halves."""

import numpy as np
import pytest

import mpiflow as mf
from mpiflow import errors

SCORES = np.array([[0.1, 0.5, 0.2, 0.2], [0.3, 0.3, 0.3, 0.1], [0.9, 0.0, 0.05, 0.05],
                   [0.2, 0.2, 0.5, 0.1], [0.25, 0.25, 0.25, 0.25], [0.6, 0.1, 0.1, 0.2],
                   [0.0, 0.4, 0.4, 0.2], [0.1, 0.2, 0.3, 0.4]], np.float32)
ONE_LABEL = np.array([0, 1, 2, 1, 3, 0, 2, 2], np.int64)
# -1 padding, a repeated id, and 5 outside the 4 classes.
LABEL_SETS = np.array([[0, 1], [1, 1], [2, -1], [3, 0], [5, 3], [0, 2], [2, 1], [-1, -1]],
                      np.int64)
TOP_IDS = np.array([[1, 2], [0, 1], [0, 2], [2, 0], [0, 1], [0, 3], [1, 2], [3, 2]], np.int32)
WEIGHTS = np.array([1.0, 2.0, 0.5, 1.0, 3.0, 0.0, 1.0, 2.0], np.float32)

M = mf.metrics
METRICS = {
    "p@2": lambda y, s, i, w: M.precision_at_k(y, s, 2),
    "p@2w": lambda y, s, i, w: M.precision_at_k(y, s, 2, weights=w),
    "p@2c1w": lambda y, s, i, w: M.precision_at_k(y, s, 2, class_id=1, weights=w),
    "p@3w": lambda y, s, i, w: M.precision_at_k(y, s, 3, weights=w),
    "r@2": lambda y, s, i, w: M.recall_at_k(y, s, 2),
    "r@2w": lambda y, s, i, w: M.recall_at_k(y, s, 2, weights=w),
    "r@2c2w": lambda y, s, i, w: M.recall_at_k(y, s, 2, class_id=2, weights=w),
    "r@3c3": lambda y, s, i, w: M.recall_at_k(y, s, 3, class_id=3),
    "ptk_w": lambda y, s, i, w: M.precision_at_top_k(y, i, weights=w),
    "ptk_c0": lambda y, s, i, w: M.precision_at_top_k(y, i, class_id=0),
    "rtk_w": lambda y, s, i, w: M.recall_at_top_k(y, i, weights=w),
    "rtk_c2": lambda y, s, i, w: M.recall_at_top_k(y, i, class_id=2),
}


def _two_halves(metric, labels):
    y = mf.placeholder(mf.int64, [None] + list(labels.shape[1:]))
    s, i = mf.placeholder(mf.float32, [None, 4]), mf.placeholder(mf.int32, [None, 2])
    w = mf.placeholder(mf.float32, [None])
    value, update = METRICS[metric](y, s, i, w)
    with mf.Session() as sess:
        sess.run(mf.local_variables_initializer())
        seen = [sess.run(update, {y: labels[h], s: SCORES[h], i: TOP_IDS[h], w: WEIGHTS[h]})
                for h in (slice(0, 4), slice(4, 8))]
        assert value.dtype == mf.float64 and update.dtype == mf.float64
        return seen + [sess.run(value)]


@pytest.mark.parametrize("metric,expected", [
    ("p@2", [0.25, 0.3125]), ("p@2w", [0.27777778, 0.26190476]),
    ("p@2c1w", [0.66666667, 0.28571429]), ("p@3w", [0.25925926, 0.20634921]),
    ("r@2", [0.5, 0.625]), ("r@2w", [0.55555556, 0.52380952]), ("r@2c2w", [1.0, 1.0]),
    ("r@3c3", [np.nan, 0.0]), ("ptk_w", [0.27777778, 0.26190476]), ("ptk_c0", [0.0, 0.2]),
    ("rtk_w", [0.55555556, 0.52380952]), ("rtk_c2", [1.0, 1.0])])
def test_one_label_per_example_streams_as_tf1(metric, expected):
    np.testing.assert_allclose(_two_halves(metric, ONE_LABEL), expected + expected[-1:],
                               rtol=1e-7)


@pytest.mark.parametrize("metric,expected", [
    ("p@2", [0.5, 0.4375]), ("p@2w", [0.5, 0.30952381]), ("p@2c1w", [1.0, 0.57142857]),
    ("p@3w", [0.33333333, 0.20634921]), ("r@2", [0.57142857, 0.5]),
    ("r@2w", [0.64285714, 0.38235294]), ("r@2c2w", [1.0, 1.0]), ("r@3c3", [0.0, 0.0]),
    ("ptk_w", [0.5, 0.30952381]), ("ptk_c0", [0.33333333, 0.4]),
    ("rtk_w", [0.64285714, 0.38235294]), ("rtk_c2", [1.0, 0.66666667])])
def test_label_sets_with_padding_repeats_and_foreign_ids_stream_as_tf1(metric, expected):
    np.testing.assert_allclose(_two_halves(metric, LABEL_SETS), expected + expected[-1:],
                               rtol=1e-7)


def test_counts_are_float64_local_metric_variables_named_as_tf1():
    value, update = M.precision_at_k(ONE_LABEL, SCORES, 2, metrics_collections=["evals"],
                                     updates_collections=["updates"])
    M.recall_at_k(ONE_LABEL, SCORES, 3, class_id=1)
    M.precision_at_top_k(ONE_LABEL, TOP_IDS)
    names = [v.op.name for v in mf.get_collection(mf.GraphKeys.METRIC_VARIABLES)]
    assert names == ["precision_at_2/true_positive_at_2", "precision_at_2/false_positive_at_2",
                     "recall_at_3_class1/true_positive_at_3_class1",
                     "recall_at_3_class1/false_negative_at_3_class1",
                     "precision_at_k/true_positive_at_k", "precision_at_k/false_positive_at_k"]
    assert [v.op.name for v in mf.local_variables()] == names
    assert value.op.name == "precision_at_2/value" and update.op.name == "precision_at_2/update"
    assert mf.get_collection("evals") == [value] and mf.get_collection("updates") == [update]


def test_at_k_refuses_a_k_beyond_the_classes_and_scores_of_unknown_width():
    with pytest.raises(errors.InvalidArgumentError, match=r"k must be in \[1, num_classes = 4\]"):
        M.precision_at_k(ONE_LABEL, SCORES, 5)
    with pytest.raises(errors.InvalidArgumentError, match="num_classes known"):
        M.recall_at_k(ONE_LABEL, mf.placeholder(mf.float32, [None, None]), 2)
    with pytest.raises(errors.InvalidArgumentError, match="last dimension of predictions_idx"):
        M.precision_at_top_k(ONE_LABEL, TOP_IDS, k=3)
