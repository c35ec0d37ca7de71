"""mf.metrics at thresholds behave as TF1's: counts per threshold (a prediction above a
threshold is positive), precision and recall at thresholds, and auc over ROC or PR with
each summation method; expected values are TF1's on the same inputs."""

import numpy as np
import pytest

import mpiflow as mf
from mpiflow import errors

Y = np.array([1, 0, 1, 1, 0, 0, 1, 0], np.int64)
P = np.array([0.9, 0.4, 0.35, 0.8, 0.1, 0.6, 0.7, 0.2], np.float32)
W = np.array([1.0, 2.0, 0.5, 1.0, 0.0, 1.0, 3.0, 1.0], np.float32)


def _two_batches(metric):
    """Stream (Y, P, W) in two halves through ``metric(labels, predictions, weights)``."""
    y, p = mf.placeholder(mf.int64, [None]), mf.placeholder(mf.float32, [None])
    w = mf.placeholder(mf.float32, [None])
    value, update = metric(y, p, w)
    with mf.Session() as sess:
        sess.run(mf.local_variables_initializer())
        initial = sess.run(value)
        for half in (slice(0, 4), slice(4, 8)):
            sess.run(update, {y: Y[half], p: P[half], w: W[half]})
        return initial, sess.run(value)


@pytest.mark.parametrize("curve,summation_method,expected", [
    ("ROC", "trapezoidal", 0.88636345), ("PR", "careful_interpolation", 0.9139441),
    ("PR", "trapezoidal", 0.9309268), ("ROC", "minoring", 0.7954544),
    ("ROC", "majoring", 0.9772725)])
def test_auc_streams_weighted_counts_as_tf1(curve, summation_method, expected):
    initial, final = _two_batches(lambda y, p, w: mf.metrics.auc(
        y, p, w, num_thresholds=5, curve=curve, summation_method=summation_method))
    assert initial == 0
    np.testing.assert_allclose(final, expected, rtol=1e-5)


def test_auc_with_many_thresholds_approaches_the_exact_roc_area():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 300)
    scores = np.clip(0.5 * rng.random(300) + 0.4 * labels, 0, 1).astype(np.float32)
    _, update = mf.metrics.auc(labels, scores, num_thresholds=2000)
    with mf.Session() as sess:
        sess.run(mf.local_variables_initializer())
        got = sess.run(update)
    pos, neg = scores[labels == 1], scores[labels == 0]
    exact = ((pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean())
    np.testing.assert_allclose(got, exact, atol=2e-3)


def test_auc_keeps_four_counts_per_threshold_as_local_metric_variables():
    value, update = mf.metrics.auc(Y, P, num_thresholds=7)
    names = ["auc/true_positives", "auc/false_negatives", "auc/true_negatives",
             "auc/false_positives"]
    assert [v.op.name for v in mf.local_variables()] == names
    assert [v.op.name for v in mf.get_collection(mf.GraphKeys.METRIC_VARIABLES)] == names
    assert all(v.shape == [7] for v in mf.local_variables())
    assert (value.op.name, update.op.name) == ("auc/value", "auc/update_op")


def test_precision_and_recall_at_thresholds_count_predictions_above_each_threshold():
    _, precision = _two_batches(
        lambda y, p, w: mf.metrics.precision_at_thresholds(y, p, [0.3, 0.65], w))
    _, recall = _two_batches(
        lambda y, p, w: mf.metrics.recall_at_thresholds(y, p, [0.3, 0.65], w))
    tp = np.array([5.5, 5.0])                    # labels 1 weighted, above 0.3 / 0.65
    np.testing.assert_allclose(precision, tp / (tp + [3.0, 0.0] + 1e-7), rtol=1e-6)
    np.testing.assert_allclose(recall, tp / (tp + [0.0, 0.5] + 1e-7), rtol=1e-6)


@pytest.mark.parametrize("kind,label,above", [
    ("true_positives", 1, True), ("false_negatives", 1, False),
    ("true_negatives", 0, False), ("false_positives", 0, True)])
def test_each_count_at_thresholds_counts_its_label_and_side(kind, label, above):
    thresholds = [0.0, 0.35, 0.5, 1.0]
    _, got = _two_batches(lambda y, p, w: getattr(mf.metrics, f"{kind}_at_thresholds")(
        y, p, thresholds, w))
    side = P[None, :] > np.array(thresholds)[:, None]
    expected = (((side == above) & (Y == label)) * W).sum(1)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert mf.local_variables()[0].op.name == f"{kind}/{kind}"


def test_auc_refuses_unknown_curves_and_methods_and_out_of_range_predictions():
    with pytest.raises(errors.InvalidArgumentError, match="auc: curve must be 'ROC' or 'PR'"):
        mf.metrics.auc(Y, P, curve="roc")
    with pytest.raises(errors.InvalidArgumentError, match="auc: summation_method must be"):
        mf.metrics.auc(Y, P, summation_method="riemann")
    with pytest.raises(errors.InvalidArgumentError, match="num_thresholds must be at least 2"):
        mf.metrics.auc(Y, P, num_thresholds=1)
    with pytest.raises(errors.InvalidArgumentError, match=r"predictions must be in \[0, 1\] "
                       "in metric 'auc'"):
        mf.metrics.auc(Y, P * 3 - 1)
