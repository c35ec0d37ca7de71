"""``mf.metrics`` that keep a running sum per class of class-id predictions: the
confusion matrix behind ``mean_iou`` and the per-class counts behind
``mean_per_class_accuracy``.

Labels, predictions and weights are flattened first, as TF1 flattens them (a
segmentation map is a batch of pixels). Each sum is a local metric variable named as
TF1's, so a checkpoint or a script reading ``mean_iou/total_confusion_matrix`` finds it.
"""

from __future__ import annotations

import numpy as np

from mpiflow.framework import dtypes
from mpiflow.metrics.streaming import _check_same_shape, _collect, metric_variable
from mpiflow.ops import math_ops
from mpiflow.ops.array_ops import reshape
from mpiflow.ops.confusion_ops import confusion_matrix
from mpiflow.ops.constant_ops import constant, convert_to_tensor
from mpiflow.ops.reduction_ops import reduce_mean, reduce_sum
from mpiflow.ops.state_ops import assign_add, scatter_add
from mpiflow.ops.variable_scope import variable_scope


def _flat(tensor, dtype=None):
    tensor = convert_to_tensor(tensor)
    if dtype is not None:
        tensor = math_ops.cast(tensor, dtype)
    return reshape(tensor, [-1]) if tensor.shape.ndims != 1 else tensor


def _finish(value, update_op, metrics_collections, updates_collections):
    _collect(metrics_collections, value)
    _collect(updates_collections, update_op)
    return value, update_op


def _mean_iou_of(total_cm, num_classes):
    """The mean over classes of diag / (row + column - diag), over the classes that
    occur as a label or a prediction (0 when none does), in float32."""
    cm = math_ops.cast(total_cm, dtypes.float32)
    diag = reduce_sum(cm * constant(np.eye(num_classes, dtype=np.float32)), axis=1)
    union = reduce_sum(cm, axis=0) + reduce_sum(cm, axis=1) - diag
    present = reduce_sum(math_ops.cast(math_ops.not_equal(union, 0.0), dtypes.float32))
    iou = math_ops.divide(diag, math_ops.where(math_ops.greater(union, 0.0), union,
                                               math_ops.ones_like(union)))
    return math_ops.where(math_ops.greater(present, 0.0),
                          math_ops.div_no_nan(reduce_sum(iou), present),
                          math_ops.zeros_like(present))


def mean_iou(labels, predictions, num_classes, weights=None, metrics_collections=None,
             updates_collections=None, name=None):
    """Return (the mean intersection over union of every example so far, the update op).

    The IoU of a class is the examples labelled and predicted as it, over those labelled
    or predicted as it; the mean is over the classes seen at all. As in TF1 the update
    op returns the running confusion matrix (float64 [num_classes, num_classes], variable
    ``mean_iou/total_confusion_matrix``), not the mean.
    """
    num_classes = int(num_classes)
    with variable_scope(name, "mean_iou", (predictions, labels, weights)):
        predictions, labels = convert_to_tensor(predictions), convert_to_tensor(labels)
        _check_same_shape(name or "mean_iou", labels, predictions)
        total_cm = metric_variable([num_classes, num_classes], dtypes.float64,
                                   name="total_confusion_matrix")
        batch_cm = confusion_matrix(
            _flat(labels, dtypes.int64), _flat(predictions, dtypes.int64), num_classes,
            weights=None if weights is None else _flat(weights), dtype=dtypes.float64)
        update_op = assign_add(total_cm, batch_cm)
        value = _mean_iou_of(total_cm, num_classes)
    return _finish(value, update_op, metrics_collections, updates_collections)


def mean_per_class_accuracy(labels, predictions, num_classes, weights=None,
                            metrics_collections=None, updates_collections=None, name=None):
    """Return (the mean over classes of each class's accuracy so far, the update op).

    A class's accuracy is its (weighted) examples predicted right over its examples; a
    class with no examples counts as 0 in the mean, as in TF1. The update op returns
    the per-class accuracies ([num_classes]). Variables ``mean_accuracy/total`` (examples
    per class) and ``mean_accuracy/count`` (right per class).
    """
    num_classes = int(num_classes)
    with variable_scope(name, "mean_accuracy", (predictions, labels, weights)):
        labels = _flat(labels, dtypes.int64)
        predictions = _flat(predictions, dtypes.int64)
        _check_same_shape(name or "mean_per_class_accuracy", labels, predictions)
        total = metric_variable([num_classes], dtypes.float32, name="total")
        count = metric_variable([num_classes], dtypes.float32, name="count")
        examples = math_ops.ones_like(labels, dtype=dtypes.float32)
        right = math_ops.cast(math_ops.equal(predictions, labels), dtypes.float32)
        if weights is not None:
            weights = _flat(weights, dtypes.float32)
            examples, right = examples * weights, right * weights
        update_total = scatter_add(total, labels, examples)
        update_count = scatter_add(count, labels, right)

        def per_class(right_so_far, examples_so_far, name_):
            return math_ops.div_no_nan(right_so_far, math_ops.maximum(examples_so_far, 0.0),
                                       name=name_)
        value = reduce_mean(per_class(count, total, None), name="mean_accuracy")
        update_op = per_class(update_count, update_total, "update_op")
    return _finish(value, update_op, metrics_collections, updates_collections)
