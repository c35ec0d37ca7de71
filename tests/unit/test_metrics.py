"""mf.metrics behaves as TF1's tf.metrics: (value, update_op) pairs whose running sums are
local metric variables, accumulated batch by batch and reset by
local_variables_initializer, checked against numpy."""

import numpy as np
import pytest

import mpiflow as mf
from mpiflow import errors

LABELS = np.array([0, 1, 2, 1, 1, 0], np.int64)
PREDICTIONS = np.array([0, 2, 2, 1, 0, 0], np.int64)
WEIGHTS = np.array([1.0, 2.0, 0.0, 1.0, 3.0, 0.5], np.float32)


def _stream(value, update, feeds):
    """Run ``update`` once per feed after resetting the locals; return the updates'
    results and the final value."""
    with mf.Session() as sess:
        sess.run(mf.local_variables_initializer())
        seen = [sess.run(update, feed) for feed in feeds]
        return seen, sess.run(value)


def _batches(*arrays, size=3):
    return [[a[i:i + size] for a in arrays] for i in range(0, len(arrays[0]), size)]


def test_accuracy_keeps_total_and_count_as_local_metric_variables():
    value, update = mf.metrics.accuracy(LABELS, PREDICTIONS)
    names = [v.op.name for v in mf.local_variables()]
    assert names == ["accuracy/total", "accuracy/count"]
    assert [v.op.name for v in mf.get_collection(mf.GraphKeys.METRIC_VARIABLES)] == names
    assert mf.global_variables() == [] and mf.trainable_variables() == []
    assert value.op.name == "accuracy/value" and update.op.name == "accuracy/update_op"


def test_accuracy_streams_over_batches_and_starts_again_after_a_reset():
    labels = mf.placeholder(mf.int64, [None])
    predictions = mf.placeholder(mf.int64, [None])
    value, update = mf.metrics.accuracy(labels, predictions)
    feeds = [{labels: y, predictions: p} for y, p in _batches(LABELS, PREDICTIONS)]
    seen, final = _stream(value, update, feeds)
    correct = LABELS == PREDICTIONS
    np.testing.assert_allclose(seen, [correct[:3].mean(), correct.mean()], rtol=1e-6)
    np.testing.assert_allclose(final, correct.mean(), rtol=1e-6)
    with mf.Session() as sess:
        sess.run(mf.local_variables_initializer())
        assert sess.run(value) == 0, "a metric over no examples is 0, not NaN"


def test_weighted_accuracy_counts_each_example_by_its_weight():
    value, update = mf.metrics.accuracy(LABELS[:, None], PREDICTIONS, weights=WEIGHTS[:, None])
    _, final = _stream(value, update, [None])
    correct = LABELS == PREDICTIONS
    np.testing.assert_allclose(final, (correct * WEIGHTS).sum() / WEIGHTS.sum(), rtol=1e-6)


def test_mean_weights_values_and_numbers_its_scopes_per_call():
    values = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    value, update = mf.metrics.mean(values, weights=[[1.0], [3.0]])
    mf.metrics.mean(values)
    assert [v.op.name for v in mf.local_variables()] == [
        "mean/total", "mean/count", "mean_1/total", "mean_1/count"]
    _, final = _stream(value, update, [None, None])
    np.testing.assert_allclose(final, (1 + 2 + 9 + 12) / 8, rtol=1e-6)


def test_metrics_and_updates_go_to_the_collections_asked_for():
    value, update = mf.metrics.mean(WEIGHTS, metrics_collections=["evals"],
                                    updates_collections=["eval_updates"])
    assert mf.get_collection("evals") == [value]
    assert mf.get_collection("eval_updates") == [update]


BINARY_LABELS = np.array([1, 0, 1, 1, 0, 0, 1, 0], np.int64)
BINARY_PREDICTIONS = np.array([1, 1, 0, 1, 0, 1, 1, 0], np.int64)


def test_precision_and_recall_stream_true_and_false_positives():
    precision, precision_update = mf.metrics.precision(BINARY_LABELS, BINARY_PREDICTIONS)
    recall, recall_update = mf.metrics.recall(BINARY_LABELS, BINARY_PREDICTIONS)
    assert [v.op.name for v in mf.local_variables()][:2] == [
        "precision/true_positives/count", "precision/false_positives/count"]
    with mf.Session() as sess:
        sess.run(mf.local_variables_initializer())
        assert sess.run([precision, recall]) == [0, 0]
        sess.run([precision_update, recall_update])
        got = sess.run([precision, recall])
    tp = ((BINARY_LABELS == 1) & (BINARY_PREDICTIONS == 1)).sum()
    np.testing.assert_allclose(got, [tp / BINARY_PREDICTIONS.sum(), tp / BINARY_LABELS.sum()],
                               rtol=1e-6)


@pytest.mark.parametrize("kind,label,prediction", [
    ("true_positives", 1, 1), ("false_positives", 0, 1), ("true_negatives", 0, 0),
    ("false_negatives", 1, 0)])
def test_each_count_counts_its_label_and_prediction_pair(kind, label, prediction):
    value, update = getattr(mf.metrics, kind)(BINARY_LABELS, BINARY_PREDICTIONS)
    _, final = _stream(value, update, [None, None])
    expected = ((BINARY_LABELS == label) & (BINARY_PREDICTIONS == prediction)).sum()
    assert final == 2 * expected


def test_error_metrics_average_the_squared_and_absolute_errors():
    labels = np.array([1.0, 2.0, 3.0, 5.0], np.float32)
    predictions = np.array([1.5, 2.0, 1.0, 4.0], np.float32)
    fetched = [mf.metrics.mean_squared_error(labels, predictions),
               mf.metrics.mean_absolute_error(labels, predictions),
               mf.metrics.root_mean_squared_error(labels, predictions)]
    with mf.Session() as sess:
        sess.run(mf.local_variables_initializer())
        sess.run([update for _, update in fetched])
        got = sess.run([value for value, _ in fetched])
    squared = (labels - predictions) ** 2
    np.testing.assert_allclose(got, [squared.mean(), np.abs(labels - predictions).mean(),
                                     np.sqrt(squared.mean())], rtol=1e-6)


def test_mismatched_shapes_and_weights_name_the_metric():
    with pytest.raises(errors.InvalidArgumentError, match="labels and predictions must have "
                       "the same shape in metric 'accuracy'"):
        mf.metrics.accuracy(np.zeros((3, 2)), np.zeros(3))
    with pytest.raises(errors.InvalidArgumentError, match="weights can not be broadcast to "
                       "values in metric 'mean'"):
        mf.metrics.mean(np.zeros((3, 2)), weights=np.ones((2, 3)))


# -- ranks known only at run time ---------------------------------------------------------------

VALUES = np.arange(16, dtype=np.float32).reshape(4, 4)
ROW_WEIGHTS = np.array([1.0, 0.0, 2.0, 3.0], np.float32)


def test_per_example_weights_of_unknown_rank_weight_rows_as_tf1():
    # TF1 adds the missing trailing 1 when the step runs: one weight per row, not per column.
    values, weights = mf.placeholder(mf.float32), mf.placeholder(mf.float32)
    value, update = mf.metrics.mean(values, weights)
    _, final = _stream(value, update, [{values: VALUES, weights: ROW_WEIGHTS}])
    expected = (VALUES * ROW_WEIGHTS[:, None]).sum() / (4 * ROW_WEIGHTS.sum())
    np.testing.assert_allclose(final, expected, rtol=1e-6)


def test_column_labels_of_unknown_rank_are_squeezed_as_tf1():
    labels, predictions = mf.placeholder(mf.int64), mf.placeholder(mf.int64)
    value, update = mf.metrics.accuracy(labels, predictions)
    _, final = _stream(value, update, [{labels: LABELS[:, None], predictions: PREDICTIONS}])
    np.testing.assert_allclose(final, (LABELS == PREDICTIONS).mean(), rtol=1e-6)


def test_weights_of_unknown_rank_that_do_not_broadcast_are_refused_when_the_step_runs():
    values, weights = mf.placeholder(mf.float32, [None, None]), mf.placeholder(mf.float32)
    value, update = mf.metrics.mean(values, weights)
    with pytest.raises(errors.InvalidArgumentError, match=r"weights can not be broadcast to "
                       r"values in metric 'mean'.*AlignRank.*got weights of shape \(3, 4\)"):
        _stream(value, update, [{values: VALUES, weights: np.ones((3, 4), np.float32)}])


# -- mean_relative_error, percentage_below, mean_cosine_distance -------------------------------

# Two batches of four [4]-vectors; the expected values were recorded from TF 2.21's
# tf.compat.v1.metrics streaming the same halves.
VECTORS = np.array([[0.1, 0.5, 0.2, 0.2], [0.3, 0.3, 0.3, 0.1], [0.9, 0.0, 0.05, 0.05],
                    [0.2, 0.2, 0.5, 0.1], [0.25, 0.25, 0.25, 0.25], [0.6, 0.1, 0.1, 0.2],
                    [0.0, 0.4, 0.4, 0.2], [0.1, 0.2, 0.3, 0.4]], np.float32)
GUESSES = (VECTORS * 2 - 0.3).astype(np.float32)
VECTOR_WEIGHTS = np.array([1.0, 2.0, 0.5, 1.0, 3.0, 0.0, 1.0, 2.0], np.float32)

_VECTOR_METRICS = {
    "relative_error": lambda y, p, w: mf.metrics.mean_relative_error(
        y, p, normalizer=y + 1.0, weights=w[:, None]),
    "relative_error_zero_normalizer": lambda y, p, w: mf.metrics.mean_relative_error(
        y, p, normalizer=y),
    "percentage_below": lambda y, p, w: mf.metrics.percentage_below(p, 0.25,
                                                                    weights=w[:, None]),
    "percentage_below_unweighted": lambda y, p, w: mf.metrics.percentage_below(p, 0.25),
    "cosine_distance": lambda y, p, w: mf.metrics.mean_cosine_distance(
        y, p, dim=1, weights=w[:, None]),
    "cosine_distance_unweighted": lambda y, p, w: mf.metrics.mean_cosine_distance(y, p, 1),
}


@pytest.mark.parametrize("metric,expected", [
    ("relative_error", [0.10407016, 0.08458604]),
    ("relative_error_zero_normalizer", [1.2166667, 0.9067709]),
    ("percentage_below", [0.5277778, 0.6547619]),
    ("percentage_below_unweighted", [0.625, 0.65625]),
    ("cosine_distance", [0.56777775, 0.6604762]),
    ("cosine_distance_unweighted", [0.41250002, 0.52375])])
def test_vector_metrics_stream_weighted_means_as_tf1(metric, expected):
    y, p = mf.placeholder(mf.float32, [None, 4]), mf.placeholder(mf.float32, [None, 4])
    w = mf.placeholder(mf.float32, [None])
    value, update = _VECTOR_METRICS[metric](y, p, w)
    feeds = [{y: VECTORS[h], p: GUESSES[h], w: VECTOR_WEIGHTS[h]}
             for h in (slice(0, 4), slice(4, 8))]
    seen, final = _stream(value, update, feeds)
    np.testing.assert_allclose(seen, expected, rtol=1e-6)
    np.testing.assert_allclose(final, expected[-1], rtol=1e-6)


def test_vector_metrics_keep_total_and_count_named_as_tf1():
    mf.metrics.mean_relative_error(VECTORS, GUESSES, VECTORS)
    mf.metrics.percentage_below(GUESSES, 0.5)
    mf.metrics.mean_cosine_distance(VECTORS, GUESSES, 1)
    assert [v.op.name for v in mf.get_collection(mf.GraphKeys.METRIC_VARIABLES)] == [
        f"{scope}/{sum_}" for scope in ("mean_relative_error", "percentage_below_threshold",
                                        "mean_cosine_distance") for sum_ in ("total", "count")]
