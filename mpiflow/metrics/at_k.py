"""``mf.metrics`` over the k classes predicted for each example: precision and recall at
k from scores (``precision_at_k``, ``recall_at_k``) or from the predicted class ids
(``precision_at_top_k``, ``recall_at_top_k``), against sparse labels (class ids, one or
several per example).

As TF1 defines them, per example: the labels are a set (a repeated id counts once); a
true positive is a predicted class in that set, a false positive a predicted class not in
it, a false negative a label not predicted. For ``*_at_k`` a label outside
[0, num_classes) stands for no class: never predicted, so it is a false negative (all
such labels of an example one), as in TF1. With ``class_id`` only that class is counted.
The counts are float64 local metric variables named as TF1's
(``precision_at_5/true_positive_at_5``), weighted per example; a ratio over nothing is
NaN, as in TF1.

The k classes of highest score are found without sorting, by each class's rank: how many
classes score higher, or as high with a lower id (TF1's tie order). That compares every
pair of classes ([batch, classes, classes]), fine for the class counts these metrics
are used with.
"""

from __future__ import annotations

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.metrics.streaming import _collect, metric_variable
from mpiflow.ops import math_ops
from mpiflow.ops.array_ops import expand_dims, reshape
from mpiflow.ops.constant_ops import constant, convert_to_tensor
from mpiflow.ops.reduction_ops import reduce_any, reduce_sum
from mpiflow.ops.state_ops import assign_add
from mpiflow.ops.variable_scope import variable_scope


def _label_sets(labels):
    """[batch, labels] int64 ids (a [batch] tensor becomes one label per example) and a
    mask of the first time each id occurs in its row (the set's members)."""
    labels = math_ops.cast(convert_to_tensor(labels), dtypes.int64)
    if labels.shape.ndims == 1:
        labels = expand_dims(labels, -1)
    if labels.shape.ndims != 2:
        raise errors.InvalidArgumentError(
            f"labels must be class ids of shape [batch] or [batch, num_labels], got "
            f"{labels.shape}")
    width = labels.shape[1]
    if width is None:
        raise errors.InvalidArgumentError(
            "the number of labels per example must be known when the graph is built")
    # earlier[j, i]: label i comes before label j in the row.
    earlier = constant(np.tril(np.ones((width, width), bool), -1))
    repeated = reduce_any(math_ops.logical_and(
        math_ops.equal(expand_dims(labels, 2), expand_dims(labels, 1)), earlier), axis=2)
    return labels, math_ops.logical_not(repeated)


def _top_k_mask(scores, k):
    """[batch, classes] bool: the k classes of highest score in each row, ties to the
    lower class id."""
    scores = convert_to_tensor(scores)
    classes = scores.shape[-1] if scores.shape.ndims == 2 else None
    if classes is None:
        raise errors.InvalidArgumentError(
            f"predictions must be scores of shape [batch, num_classes] with num_classes "
            f"known when the graph is built, got {scores.shape}")
    if not 1 <= k <= classes:
        raise errors.InvalidArgumentError(
            f"k must be in [1, num_classes = {classes}], got {k}")
    # before[b, j, i]: class i ranks before class j.
    mine, other = expand_dims(scores, 2), expand_dims(scores, 1)
    lower_id = constant(np.tril(np.ones((classes, classes), bool), -1))
    before = math_ops.logical_or(math_ops.greater(other, mine), math_ops.logical_and(
        math_ops.equal(other, mine), lower_id))
    rank = reduce_sum(math_ops.cast(before, dtypes.int32), axis=2)
    return math_ops.less(rank, k), classes


def _example_counts(labels, in_prediction, k, class_id, num_classes):
    """Per example float64 (tp, fp, fn) of ``k`` predicted classes; ``in_prediction(ids)``
    says, for int64 ids of shape [batch, n], which are among them."""
    labels, first = _label_sets(labels)
    if num_classes is not None:     # ids outside the classes stand for no class
        outside = math_ops.logical_or(math_ops.less(labels, 0),
                                      math_ops.greater_equal(labels, num_classes))
        labels = math_ops.where(outside, math_ops.zeros_like(labels) - 1, labels)
        first = _label_sets(labels)[1]

    def count(mask):
        return math_ops.cast(mask, dtypes.float64)

    if class_id is not None:
        column = math_ops.zeros_like(labels[:, :1]) + int(class_id)
        predicted = in_prediction(column)[:, 0]
        labelled = reduce_any(math_ops.equal(labels, int(class_id)), axis=1)
        tp = count(math_ops.logical_and(predicted, labelled))
        fp = count(math_ops.logical_and(predicted, math_ops.logical_not(labelled)))
        fn = count(math_ops.logical_and(labelled, math_ops.logical_not(predicted)))
        return tp, fp, fn
    hit = in_prediction(labels)
    tp = reduce_sum(count(math_ops.logical_and(first, hit)), axis=1)
    fn = reduce_sum(count(math_ops.logical_and(first, math_ops.logical_not(hit))), axis=1)
    return tp, float(k) - tp, fn


def _from_scores(predictions, k, class_id, labels):
    mask, classes = _top_k_mask(predictions, int(k))
    ids = constant(np.arange(classes, dtype=np.int64))

    def in_prediction(label_ids):
        matches = math_ops.equal(expand_dims(label_ids, 2), ids)
        return reduce_any(math_ops.logical_and(matches, expand_dims(mask, 1)), axis=2)
    return _example_counts(labels, in_prediction, int(k), class_id, classes)


def _from_ids(predictions_idx, k, class_id, labels):
    predictions_idx = math_ops.cast(convert_to_tensor(predictions_idx), dtypes.int64)
    width = predictions_idx.shape[-1] if predictions_idx.shape.ndims == 2 else None
    if width is None:
        raise errors.InvalidArgumentError(
            f"predictions_idx must be class ids of shape [batch, k] with k known when the "
            f"graph is built, got {predictions_idx.shape}")
    if k is not None and int(k) != width:
        raise errors.InvalidArgumentError(
            f"k ({k}) must be the last dimension of predictions_idx ({width})")

    def in_prediction(label_ids):
        return reduce_any(math_ops.equal(expand_dims(label_ids, 2),
                                         expand_dims(predictions_idx, 1)), axis=2)
    return _example_counts(labels, in_prediction, width, class_id, None)


def _at_k_metric(kind, from_what):
    """precision (tp / (tp + fp)) or recall (tp / (tp + fn)) of the counts so far."""
    other = "false_positive" if kind == "precision" else "false_negative"

    def metric(labels, predictions, k=None, class_id=None, weights=None,
               metrics_collections=None, updates_collections=None, name=None):
        suffix = f"{'k' if from_what is _from_ids else k}"
        suffix += "" if class_id is None else f"_class{class_id}"
        default_name = f"{kind}_at_{suffix}"
        with variable_scope(name, default_name, (predictions, labels, weights)):
            tp, fp, fn = from_what(predictions, k, class_id, labels)
            batch_other = fp if kind == "precision" else fn
            if weights is not None:
                weights = math_ops.cast(convert_to_tensor(weights), dtypes.float64)
                if weights.shape.ndims != 0:
                    weights = reshape(weights, [-1])
                tp, batch_other = tp * weights, batch_other * weights
            tp_var = metric_variable([], dtypes.float64, name=f"true_positive_at_{suffix}")
            other_var = metric_variable([], dtypes.float64, name=f"{other}_at_{suffix}")
            update_tp = assign_add(tp_var, reduce_sum(tp))
            update_other = assign_add(other_var, reduce_sum(batch_other))
            update_op = math_ops.divide(update_tp, update_tp + update_other, name="update")
            # TF1 names the value after the scope itself; mpiflow's op names may not
            # repeat a scope's, so it is <scope>/value here.
            value = math_ops.divide(tp_var, tp_var + other_var, name="value")
        _collect(metrics_collections, value)
        _collect(updates_collections, update_op)
        return value, update_op
    return metric


_precision_at_k = _at_k_metric("precision", _from_scores)
_recall_at_k = _at_k_metric("recall", _from_scores)
_precision_at_top_k = _at_k_metric("precision", _from_ids)
_recall_at_top_k = _at_k_metric("recall", _from_ids)


def precision_at_k(labels, predictions, k, class_id=None, weights=None,
                   metrics_collections=None, updates_collections=None, name=None):
    """Return (the precision of the k highest-scoring classes against the sparse
    ``labels`` so far, float64, the update op). ``predictions``: [batch, num_classes]
    scores; ``labels``: [batch] or [batch, num_labels] class ids."""
    return _precision_at_k(labels, predictions, k, class_id, weights, metrics_collections,
                           updates_collections, name)


def recall_at_k(labels, predictions, k, class_id=None, weights=None,
                metrics_collections=None, updates_collections=None, name=None):
    """Return (the recall of the sparse ``labels`` by the k highest-scoring classes so
    far, float64, the update op); a label outside the classes is never recalled."""
    return _recall_at_k(labels, predictions, k, class_id, weights, metrics_collections,
                        updates_collections, name)


def precision_at_top_k(labels, predictions_idx, k=None, class_id=None, weights=None,
                       metrics_collections=None, updates_collections=None, name=None):
    """Return (the precision of the predicted class ids ``predictions_idx`` ([batch, k])
    against the sparse ``labels`` so far, float64, the update op)."""
    return _precision_at_top_k(labels, predictions_idx, k, class_id, weights,
                               metrics_collections, updates_collections, name)


def recall_at_top_k(labels, predictions_idx, k=None, class_id=None, weights=None,
                    metrics_collections=None, updates_collections=None, name=None):
    """Return (the recall of the sparse ``labels`` by the predicted class ids
    ``predictions_idx`` ([batch, k]) so far, float64, the update op)."""
    return _recall_at_top_k(labels, predictions_idx, k, class_id, weights,
                            metrics_collections, updates_collections, name)
