"""TF1's streaming metrics (``mf.metrics``), as ``(value, update_op)`` pairs.

A metric keeps running sums in local variables (collections ``LOCAL_VARIABLES`` and
``METRIC_VARIABLES``, zeroed by ``local_variables_initializer()``): each run of
``update_op`` adds a batch and returns the metric so far, ``value`` reads it without
adding. Running ``local_variables_initializer()`` again starts a new evaluation. Ratios
divide with ``div_no_nan``: a metric over no (weighted) examples is 0. Values and weights
are counted in float32, as TF1.
"""

from __future__ import annotations

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.graph import GraphKeys, get_default_graph
from mpiflow.ops import math_ops
from mpiflow.ops.array_ops import size
from mpiflow.ops.constant_ops import convert_to_tensor
from mpiflow.ops.control_ops import identity
from mpiflow.ops.random_ops import zeros
from mpiflow.ops.reduction_ops import reduce_sum
from mpiflow.ops.state_ops import assign_add
from mpiflow.ops.variable_scope import variable_scope
from mpiflow.ops.variables import Variable
from mpiflow.ops.weights_broadcast import (
    align_weights,
    broadcast_weights,
    remove_squeezable_dimensions,
)


def metric_variable(shape, dtype, validate_shape=True, name=None) -> Variable:
    """Return a zeroed, non-trainable local variable for a metric's running sums."""
    return Variable(lambda: zeros(shape, dtype), trainable=False,
                    collections=[GraphKeys.LOCAL_VARIABLES, GraphKeys.METRIC_VARIABLES],
                    validate_shape=validate_shape, name=name)


def _collect(collections, value) -> None:
    if collections:
        get_default_graph().add_to_collections(collections, value)


def _prepare(predictions, labels, weights):
    """Tensors with a stray trailing 1 dropped; weights shaped like the predictions."""
    predictions = convert_to_tensor(predictions)
    if labels is not None:
        labels, predictions = remove_squeezable_dimensions(convert_to_tensor(labels),
                                                           predictions)
    if weights is None:
        return predictions, labels, None
    return predictions, labels, align_weights(convert_to_tensor(weights), predictions)


def _check_same_shape(metric: str, labels, predictions) -> None:
    if not predictions.shape.is_compatible_with(labels.shape):
        raise errors.InvalidArgumentError(
            f"labels and predictions must have the same shape in metric '{metric}': "
            f"expected predictions of shape {labels.shape}, got {predictions.shape}")


def mean(values, weights=None, metrics_collections=None, updates_collections=None,
         name=None):
    """Return (the weighted mean of every value seen so far, the op that adds ``values``).

    Variables ``<name>/total`` and ``<name>/count``.
    """
    with variable_scope(name, "mean", (values, weights)):
        values = math_ops.cast(convert_to_tensor(values), dtypes.float32)
        total = metric_variable([], dtypes.float32, name="total")
        count = metric_variable([], dtypes.float32, name="count")
        if weights is None:
            num_values = math_ops.cast(size(values), dtypes.float32)
        else:
            values, _, weights = _prepare(values, None, weights)
            weights = broadcast_weights(math_ops.cast(weights, dtypes.float32), values,
                                        f"metric '{name or 'mean'}'")
            values = math_ops.multiply(values, weights)
            num_values = reduce_sum(weights)
        update_total = assign_add(total, reduce_sum(values))
        update_count = assign_add(count, num_values)
        value = math_ops.div_no_nan(total, count, name="value")
        update_op = math_ops.div_no_nan(update_total, update_count, name="update_op")
    _collect(metrics_collections, value)
    _collect(updates_collections, update_op)
    return value, update_op


def accuracy(labels, predictions, weights=None, metrics_collections=None,
             updates_collections=None, name=None):
    """Return (how often ``predictions`` equal ``labels``, weighted, the update op).

    Labels and predictions are class ids (or any comparable values) of one shape; a
    trailing dimension of 1 on either is dropped. Variables ``accuracy/total``, ``/count``.
    """
    predictions, labels, weights = _prepare(predictions, labels, weights)
    _check_same_shape(name or "accuracy", labels, predictions)
    if predictions.dtype is not labels.dtype:
        predictions = math_ops.cast(predictions, labels.dtype)
    is_correct = math_ops.cast(math_ops.equal(predictions, labels), dtypes.float32)
    return mean(is_correct, weights, metrics_collections, updates_collections,
                name or "accuracy")


def _errors_metric(default_name, elementwise):
    def metric(labels, predictions, weights=None, metrics_collections=None,
               updates_collections=None, name=None):
        predictions, labels, weights = _prepare(predictions, labels, weights)
        _check_same_shape(name or default_name, labels, predictions)
        errors_ = elementwise(math_ops.cast(labels, dtypes.float32),
                              math_ops.cast(predictions, dtypes.float32))
        return mean(errors_, weights, metrics_collections, updates_collections,
                    name or default_name)
    metric.__name__ = default_name
    metric.__doc__ = (f"Return (the weighted mean of ``{default_name}`` over every example "
                      "seen so far, the update op).")
    return metric


mean_squared_error = _errors_metric("mean_squared_error", math_ops.squared_difference)
mean_absolute_error = _errors_metric("mean_absolute_error",
                                     lambda y, p: math_ops.abs(p - y))


def root_mean_squared_error(labels, predictions, weights=None, metrics_collections=None,
                            updates_collections=None, name=None):
    """Return (the square root of the running mean squared error, the update op)."""
    mse, update_mse = mean_squared_error(labels, predictions, weights,
                                         name=name or "root_mean_squared_error")
    rmse, update_op = math_ops.sqrt(mse), math_ops.sqrt(update_mse)
    _collect(metrics_collections, rmse)
    _collect(updates_collections, update_op)
    return rmse, update_op


def mean_relative_error(labels, predictions, normalizer, weights=None,
                        metrics_collections=None, updates_collections=None, name=None):
    """Return (the weighted mean of |labels - predictions| / normalizer over every element
    so far, the update op); an element whose normalizer is 0 counts as an error of 0, as
    in TF1. Variables ``mean_relative_error/total`` and ``/count``."""
    metric = name or "mean_relative_error"
    predictions, labels, weights = _prepare(predictions, labels, weights)
    _check_same_shape(metric, labels, predictions)
    normalizer, predictions = remove_squeezable_dimensions(convert_to_tensor(normalizer),
                                                           predictions)
    labels = math_ops.cast(labels, dtypes.float32)
    predictions = math_ops.cast(predictions, dtypes.float32)
    normalizer = math_ops.cast(normalizer, dtypes.float32)
    zero = math_ops.equal(normalizer, 0.0)
    relative = math_ops.divide(math_ops.abs(labels - predictions),
                               math_ops.where(zero, math_ops.ones_like(normalizer), normalizer))
    relative = math_ops.where(zero, math_ops.zeros_like(relative), relative)
    return mean(relative, weights, metrics_collections, updates_collections, metric)


def percentage_below(values, threshold, weights=None, metrics_collections=None,
                     updates_collections=None, name=None):
    """Return (the weighted fraction of the values so far that are below ``threshold``,
    the update op). Variables ``percentage_below_threshold/total`` and ``/count``."""
    below = math_ops.cast(math_ops.less(convert_to_tensor(values), threshold), dtypes.float32)
    return mean(below, weights, metrics_collections, updates_collections,
                name or "percentage_below_threshold")


def mean_cosine_distance(labels, predictions, dim, weights=None, metrics_collections=None,
                         updates_collections=None, name=None):
    """Return (1 - the weighted mean over the examples so far of sum(labels * predictions)
    along ``dim``, the update op): the mean cosine distance of unit-normalized vectors, as
    TF1 computes it (nothing is normalized here). Weights are per example (size 1 along
    ``dim``). Variables ``mean_cosine_distance/total`` and ``/count``."""
    metric = name or "mean_cosine_distance"
    predictions, labels, weights = _prepare(predictions, labels, weights)
    _check_same_shape(metric, labels, predictions)
    products = math_ops.multiply(math_ops.cast(predictions, dtypes.float32),
                                 math_ops.cast(labels, dtypes.float32))
    agreement = reduce_sum(products, axis=[dim], keepdims=True)
    mean_agreement, update_agreement = mean(agreement, weights, name=metric)
    value = math_ops.subtract(1.0, mean_agreement)
    update_op = math_ops.subtract(1.0, update_agreement)
    _collect(metrics_collections, value)
    _collect(updates_collections, update_op)
    return value, update_op


# -- counts of a binary condition, precision, recall -------------------------------------------

# Which (label, prediction) pair each count counts.
_CONDITIONS = {"true_positives": (True, True), "false_positives": (False, True),
               "true_negatives": (False, False), "false_negatives": (True, False)}


def _count(kind, labels, predictions, weights, metrics_collections, updates_collections, name):
    with variable_scope(name, kind, (predictions, labels, weights)):
        predictions, labels, weights = _prepare(math_ops.cast(predictions, dtypes.bool_),
                                                math_ops.cast(labels, dtypes.bool_), weights)
        _check_same_shape(name or kind, labels, predictions)
        want_label, want_prediction = _CONDITIONS[kind]
        hits = math_ops.cast(math_ops.logical_and(
            math_ops.equal(labels, want_label), math_ops.equal(predictions, want_prediction)),
            dtypes.float32)
        if weights is not None:
            hits = math_ops.multiply(hits, broadcast_weights(
                math_ops.cast(weights, dtypes.float32), hits, f"metric '{name or kind}'"))
        count = metric_variable([], dtypes.float32, name="count")
        value = identity(count)
        update_op = assign_add(count, reduce_sum(hits))
    _collect(metrics_collections, value)
    _collect(updates_collections, update_op)
    return value, update_op


def _count_metric(kind):
    def metric(labels, predictions, weights=None, metrics_collections=None,
               updates_collections=None, name=None):
        return _count(kind, labels, predictions, weights, metrics_collections,
                      updates_collections, name)
    metric.__name__ = kind
    metric.__doc__ = (f"Return (the weighted number of {kind.replace('_', ' ')} so far, the "
                      "update op); labels and predictions are cast to bool.")
    return metric


true_positives = _count_metric("true_positives")
false_positives = _count_metric("false_positives")
true_negatives = _count_metric("true_negatives")
false_negatives = _count_metric("false_negatives")


def _ratio_metric(default_name, other_kind):
    """tp / (tp + other) over the examples so far, 0 before any (precision, recall)."""
    def metric(labels, predictions, weights=None, metrics_collections=None,
               updates_collections=None, name=None):
        with variable_scope(name, default_name, (predictions, labels, weights)):
            tp, update_tp = _count("true_positives", labels, predictions, weights, None, None,
                                   None)
            other, update_other = _count(other_kind, labels, predictions, weights, None, None,
                                         None)
            value = math_ops.div_no_nan(tp, tp + other, name="value")
            update_op = math_ops.div_no_nan(update_tp, update_tp + update_other,
                                            name="update_op")
        _collect(metrics_collections, value)
        _collect(updates_collections, update_op)
        return value, update_op
    metric.__name__ = default_name
    metric.__doc__ = (f"Return (the {default_name}, true_positives / (true_positives + "
                      f"{other_kind}), of every example so far, the update op).")
    return metric


precision = _ratio_metric("precision", "false_positives")
recall = _ratio_metric("recall", "false_negatives")
