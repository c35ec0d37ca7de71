"""``mf.metrics`` that count at a list of thresholds: the four counts, precision and recall
at thresholds, and ``auc`` (ROC or PR) from counts at evenly spaced thresholds.

A prediction (a probability in [0, 1]) counts as positive at threshold t when it is
greater than t. Each count is a local metric variable with one entry per threshold, as
in TF1, so ``auc`` approximates the curve by ``num_thresholds`` points.
"""

from __future__ import annotations

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.metrics.streaming import _check_same_shape, _collect, _prepare, metric_variable
from mpiflow.ops import math_ops
from mpiflow.ops.array_ops import reshape
from mpiflow.ops.constant_ops import constant, convert_to_tensor
from mpiflow.ops.control_ops import identity
from mpiflow.ops.reduction_ops import reduce_sum
from mpiflow.ops.registry import const_value
from mpiflow.ops.state_ops import assign_add
from mpiflow.ops.variable_scope import variable_scope
from mpiflow.ops.weights_broadcast import broadcast_weights

# A count's short name -> (its variable's name, the label it counts, the prediction).
_COUNTS = {"tp": ("true_positives", True, True), "fn": ("false_negatives", True, False),
           "tn": ("true_negatives", False, False), "fp": ("false_positives", False, True)}

_SUMMATIONS = ("trapezoidal", "careful_interpolation", "minoring", "majoring")


def _counts_at_thresholds(metric, labels, predictions, thresholds, weights, kinds):
    """Return ({kind: count per threshold}, {kind: the op adding a batch}) for ``kinds``
    (a subset of tp, fn, tn, fp, made in that order), inside the caller's scope."""
    predictions = math_ops.cast(convert_to_tensor(predictions), dtypes.float32)
    known = const_value(predictions)
    if known is not None and known.size and not (known.min() >= 0 and known.max() <= 1):
        raise errors.InvalidArgumentError(
            f"predictions must be in [0, 1] in metric '{metric}': expected probabilities, "
            f"got values from {known.min()} to {known.max()}")
    predictions, labels, weights = _prepare(
        predictions, math_ops.cast(convert_to_tensor(labels), dtypes.bool_), weights)
    _check_same_shape(metric, labels, predictions)
    column = constant(np.asarray(thresholds, np.float32).reshape(-1, 1))
    # [thresholds, examples]: each row says which examples are predicted positive there.
    positive = math_ops.greater(reshape(predictions, [1, -1]), column)
    label_row = reshape(labels, [1, -1])
    if weights is not None:
        weights = reshape(broadcast_weights(math_ops.cast(weights, dtypes.float32),
                                            predictions, f"metric '{metric}'"), [1, -1])
    values, updates = {}, {}
    for kind in ("tp", "fn", "tn", "fp"):
        if kind not in kinds:
            continue
        var_name, want_label, want_positive = _COUNTS[kind]
        predicted = positive if want_positive else math_ops.logical_not(positive)
        labelled = label_row if want_label else math_ops.logical_not(label_row)
        hits = math_ops.cast(math_ops.logical_and(labelled, predicted), dtypes.float32)
        if weights is not None:
            hits = math_ops.multiply(hits, weights)
        count = metric_variable([len(thresholds)], dtypes.float32, name=var_name)
        values[kind] = identity(count)
        updates[kind] = assign_add(count, reduce_sum(hits, axis=1))
    return values, updates


def _finish(value, update_op, metrics_collections, updates_collections):
    _collect(metrics_collections, value)
    _collect(updates_collections, update_op)
    return value, update_op


def _count_at_thresholds_metric(kind):
    var_name = _COUNTS[kind][0]

    def metric(labels, predictions, thresholds, weights=None, metrics_collections=None,
               updates_collections=None, name=None):
        with variable_scope(name, var_name, (predictions, labels, weights)):
            values, updates = _counts_at_thresholds(name or var_name, labels, predictions,
                                                    thresholds, weights, (kind,))
        return _finish(values[kind], updates[kind], metrics_collections,
                       updates_collections)
    metric.__name__ = f"{var_name}_at_thresholds"
    metric.__doc__ = (f"Return (the weighted number of {var_name.replace('_', ' ')} at each "
                      "threshold so far, the update op); a prediction is positive above a "
                      "threshold.")
    return metric


true_positives_at_thresholds = _count_at_thresholds_metric("tp")
false_negatives_at_thresholds = _count_at_thresholds_metric("fn")
true_negatives_at_thresholds = _count_at_thresholds_metric("tn")
false_positives_at_thresholds = _count_at_thresholds_metric("fp")


def _ratio_at_thresholds_metric(default_name, short, other):
    def metric(labels, predictions, thresholds, weights=None, metrics_collections=None,
               updates_collections=None, name=None):
        with variable_scope(name, default_name, (predictions, labels, weights)):
            values, updates = _counts_at_thresholds(name or default_name, labels,
                                                    predictions, thresholds, weights,
                                                    ("tp", other))

            def ratio(counts, which):
                tp = counts["tp"]
                return math_ops.divide(tp, 1e-7 + tp + counts[other],
                                       name=f"{short}_{which}")
            value, update_op = ratio(values, "value"), ratio(updates, "update_op")
        return _finish(value, update_op, metrics_collections, updates_collections)
    metric.__name__ = default_name
    metric.__doc__ = (f"Return (the {short} at each threshold, tp / (tp + {other} + 1e-7), "
                      "of every example so far, the update op).")
    return metric


precision_at_thresholds = _ratio_at_thresholds_metric("precision_at_thresholds",
                                                      "precision", "fp")
recall_at_thresholds = _ratio_at_thresholds_metric("recall_at_thresholds", "recall", "fn")


def _auc_thresholds(num_thresholds, thresholds):
    """The thresholds auc counts at: given ones sorted, or num_thresholds - 2 evenly
    spaced inside (0, 1); both with one just below 0 and one just above 1."""
    if thresholds is not None:
        inner = sorted(float(t) for t in thresholds)
    else:
        if int(num_thresholds) < 2:
            raise errors.InvalidArgumentError(
                f"auc: num_thresholds must be at least 2, got {num_thresholds}")
        inner = [(i + 1) / (num_thresholds - 1) for i in range(num_thresholds - 2)]
    return [-1e-7] + inner + [1.0 + 1e-7]


def _pr_auc_interpolated(tp, fp, fn):
    """The area under the PR curve with precision interpolated between thresholds as
    the ratio of two linear functions of the predicted positives (Davis & Goadrich)."""
    positives = tp + fp
    dtp = tp[:-1] - tp[1:]
    slope = math_ops.div_no_nan(dtp, math_ops.maximum(positives[:-1] - positives[1:], 0.0))
    intercept = tp[1:] - slope * positives[1:]
    both = math_ops.logical_and(positives[:-1] > 0, positives[1:] > 0)
    ratio = math_ops.where(both, math_ops.div_no_nan(positives[:-1],
                                                     math_ops.maximum(positives[1:], 0.0)),
                           math_ops.ones_like(positives[1:]))
    return reduce_sum(math_ops.div_no_nan(slope * (dtp + intercept * math_ops.log(ratio)),
                                          math_ops.maximum(tp[1:] + fn[1:], 0.0)),
                      name="interpolate_pr_auc")


def _area(counts, curve, summation_method, name):
    tp, fn, tn, fp = (counts[k] for k in ("tp", "fn", "tn", "fp"))
    if curve == "PR" and summation_method == "careful_interpolation":
        return _pr_auc_interpolated(tp, fp, fn)     # named as in TF1, not value/update_op
    eps = 1e-6
    recall = math_ops.divide(tp + eps, tp + fn + eps)
    if curve == "ROC":
        x, y = math_ops.divide(fp, fp + tn + eps), recall
    else:
        x, y = recall, math_ops.divide(tp + eps, tp + fp + eps)
    # Thresholds rise, so x falls: each step's width is x[i] - x[i + 1].
    if summation_method == "minoring":
        height = math_ops.minimum(y[:-1], y[1:])
    elif summation_method == "majoring":
        height = math_ops.maximum(y[:-1], y[1:])
    else:
        height = (y[:-1] + y[1:]) / 2.0
    return reduce_sum((x[:-1] - x[1:]) * height, name=name)


def auc(labels, predictions, weights=None, num_thresholds=200, metrics_collections=None,
        updates_collections=None, curve="ROC", name=None, summation_method="trapezoidal",
        thresholds=None):
    """Return (the area under the ROC or PR curve of every example so far, the update op).

    Args:
        labels: anything cast to bool (the positives).
        predictions: probabilities in [0, 1], of the labels' shape.
        num_thresholds: how many thresholds approximate the curve (at least 2).
        curve: "ROC" (true positive rate against false positive rate) or "PR"
            (precision against recall).
        summation_method: "trapezoidal", "careful_interpolation" (PR: precision
            interpolated between thresholds; ROC: trapezoidal), "minoring" or "majoring"
            (each step's lower or upper height).
        thresholds: explicit thresholds in place of ``num_thresholds`` evenly spaced ones.

    Variables ``auc/true_positives``, ``/false_negatives``, ``/true_negatives`` and
    ``/false_positives``, one entry per threshold.

    Raises:
        InvalidArgumentError: an unknown curve or summation method, fewer than 2
            thresholds, or constant predictions outside [0, 1].
    """
    if curve not in ("ROC", "PR"):
        raise errors.InvalidArgumentError(
            f"auc: curve must be 'ROC' or 'PR', got {curve!r}")
    if summation_method not in _SUMMATIONS:
        raise errors.InvalidArgumentError(
            f"auc: summation_method must be one of {', '.join(map(repr, _SUMMATIONS))}, "
            f"got {summation_method!r}")
    with variable_scope(name, "auc", (labels, predictions, weights)):
        values, updates = _counts_at_thresholds(
            name or "auc", labels, predictions, _auc_thresholds(num_thresholds, thresholds),
            weights, ("tp", "fn", "tn", "fp"))
        value = _area(values, curve, summation_method, "value")
        update_op = _area(updates, curve, summation_method, "update_op")
    return _finish(value, update_op, metrics_collections, updates_collections)
