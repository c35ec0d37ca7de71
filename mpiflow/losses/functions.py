"""The ``mf.losses`` loss functions: a per-element loss from mpiflow's ops, then
``compute_weighted_loss`` (weights, reduction, collection) as TF1.

Each opens the name scope TF1 opens (``softmax_cross_entropy_loss`` ...), so graphs and
their op names read as in TF1. Regression losses compute in float32, as TF1 does, except
that float64 inputs stay float64.
"""

from __future__ import annotations

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.graph import GraphKeys
from mpiflow.framework.scopes import name_scope
from mpiflow.losses.collection import add_loss
from mpiflow.losses.reduction import Reduction, compute_dtype, compute_weighted_loss
from mpiflow.ops import math_ops
from mpiflow.ops.activation_ops import relu
from mpiflow.ops.array_ops import squeeze
from mpiflow.ops.constant_ops import convert_to_tensor, is_tensor_like
from mpiflow.ops.control_ops import stop_gradient
from mpiflow.ops.nn_ops import (
    sigmoid_cross_entropy_with_logits,
    softmax_cross_entropy_with_logits_v2,
    sparse_softmax_cross_entropy_with_logits,
)
from mpiflow.ops.reduction_ops import reduce_sum
from mpiflow.ops.weights_broadcast import (
    align_rank, broadcast_weights, checked_weights, remove_squeezable_dimensions)

_DEFAULT = Reduction.SUM_BY_NONZERO_WEIGHTS


def _given(loss: str, **values) -> None:
    for what, value in values.items():
        if value is None:
            raise errors.InvalidArgumentError(f"{loss}: {what} must not be None")


def _same_shape(scope: str, a, b, what_a: str, what_b: str) -> None:
    if not a.shape.is_compatible_with(b.shape):
        raise errors.InvalidArgumentError(
            f"{what_a} and {what_b} must have the same shape in '{scope.rstrip('/')}': "
            f"expected {what_a} of shape {b.shape}, got {a.shape}")


def _like(labels, reference):
    """``labels`` as a tensor of ``reference``'s dtype (numbers and arrays too)."""
    labels = convert_to_tensor(labels, dtype=None if is_tensor_like(labels) else
                               reference.dtype)
    return math_ops.cast(labels, reference.dtype)


def _squeeze_weights(weights, labels):
    """Per-example weights given as [batch, 1] against [batch] labels lose the 1."""
    weights = convert_to_tensor(weights, dtype=None if is_tensor_like(weights) else
                                dtypes.float32)
    w, y = weights.shape.ndims, labels.shape.ndims
    if w is None or y is None:
        if w == 0 or w is not None and weights.shape[-1] not in (1, None):
            return weights
        return align_rank(weights, labels, "sparse_softmax_cross_entropy", squeeze_if=1)
    if w - y == 1 and weights.shape[-1] in (1, None):
        return squeeze(weights, [-1])
    return weights


def _pointwise(loss, labels, predictions, weights, scope, loss_collection, reduction,
               elementwise):
    """A regression loss: ``elementwise(labels, predictions)``, weighted and reduced."""
    _given(loss, labels=labels, predictions=predictions)
    Reduction.validate(reduction)
    with name_scope(scope, loss) as sc:
        predictions = convert_to_tensor(predictions)
        predictions = math_ops.cast(predictions, compute_dtype(predictions.dtype))
        labels = _like(labels, predictions)
        _same_shape(sc, predictions, labels, "predictions", "labels")
        return compute_weighted_loss(elementwise(labels, predictions), weights, sc,
                                     loss_collection, reduction)


def absolute_difference(labels, predictions, weights=1.0, scope=None,
                        loss_collection=GraphKeys.LOSSES, reduction=_DEFAULT):
    """Return the weighted |predictions - labels|."""
    return _pointwise("absolute_difference", labels, predictions, weights, scope,
                      loss_collection, reduction, lambda y, p: math_ops.abs(p - y))


def mean_squared_error(labels, predictions, weights=1.0, scope=None,
                       loss_collection=GraphKeys.LOSSES, reduction=_DEFAULT):
    """Return the weighted (predictions - labels) ** 2."""
    return _pointwise("mean_squared_error", labels, predictions, weights, scope,
                      loss_collection, reduction, math_ops.squared_difference)


def huber_loss(labels, predictions, weights=1.0, delta=1.0, scope=None,
               loss_collection=GraphKeys.LOSSES, reduction=_DEFAULT):
    """Return the weighted Huber loss: quadratic up to |error| = delta, linear beyond."""
    def huber(y, p):
        error = math_ops.abs(p - y)
        quadratic = math_ops.minimum(error, delta)
        return 0.5 * quadratic * quadratic + delta * (error - quadratic)
    return _pointwise("huber_loss", labels, predictions, weights, scope, loss_collection,
                      reduction, huber)


def log_loss(labels, predictions, weights=1.0, epsilon=1e-7, scope=None,
             loss_collection=GraphKeys.LOSSES, reduction=_DEFAULT):
    """Return the weighted binary cross entropy of probabilities ``predictions``."""
    def log_likelihood(y, p):
        return -y * math_ops.log(p + epsilon) - (1 - y) * math_ops.log(1 - p + epsilon)
    return _pointwise("log_loss", labels, predictions, weights, scope, loss_collection,
                      reduction, log_likelihood)


def hinge_loss(labels, logits, weights=1.0, scope=None, loss_collection=GraphKeys.LOSSES,
               reduction=_DEFAULT):
    """Return the weighted hinge loss max(0, 1 - (2 * labels - 1) * logits); labels 0/1."""
    return _pointwise("hinge_loss", labels, logits, weights, scope, loss_collection,
                      reduction, lambda y, x: relu(1 - (2 * y - 1) * x))


def cosine_distance(labels, predictions, axis=None, weights=1.0, scope=None,
                    loss_collection=GraphKeys.LOSSES, reduction=_DEFAULT, dim=None):
    """Return the weighted 1 - sum(labels * predictions) along ``axis`` (both normalized
    by the caller, as TF1 expects), keeping ``axis`` as size 1."""
    axis = dim if axis is None else axis
    if axis is None:
        raise errors.InvalidArgumentError("cosine_distance: give axis, the axis to sum over")
    return _pointwise("cosine_distance_loss", labels, predictions, weights, scope,
                      loss_collection, reduction,
                      lambda y, p: 1 - reduce_sum(y * p, axis=axis, keepdims=True))


def mean_pairwise_squared_error(labels, predictions, weights=1.0, scope=None,
                                loss_collection=GraphKeys.LOSSES):
    """Return the weighted sum over examples of the mean of (d_i - d_j) ** 2 over the
    pairs of an example's elements, where d = predictions - labels (TF1's definition).

    An example is a row of the first axis; its elements are everything after it. The
    loss is invariant to a shift of the predictions within an example, so it fits
    relative values (depth up to scale, rankings). Per example, with n the count of its
    elements whose weight is nonzero: 2 * sum(d ** 2) / (n - 1) - 2 * sum(d) ** 2 /
    (n * (n - 1)), 0 where n < 2; each is multiplied by the weights and summed (no
    ``reduction``: TF1 has none for this loss). Weights of shape [batch] or [batch, 1]
    weight examples; weights of full shape count only where they are nonzero and scale
    every element's share, as TF1.

    Raises:
        InvalidArgumentError: labels or predictions None or of different shapes, weights
            that do not broadcast, or predictions whose rank is unknown when the graph is
            built (the per-example axes must be known).
    """
    _given("mean_pairwise_squared_error", labels=labels, predictions=predictions)
    with name_scope(scope, "mean_pairwise_squared_error") as sc:
        predictions = convert_to_tensor(predictions)
        predictions = math_ops.cast(predictions, compute_dtype(predictions.dtype))
        labels = _like(labels, predictions)
        _same_shape(sc, predictions, labels, "predictions", "labels")
        ndims = predictions.shape.merge_with(labels.shape).ndims
        if ndims is None:
            raise errors.InvalidArgumentError(
                f"mean_pairwise_squared_error in '{sc.rstrip('/')}': the rank of the "
                "predictions must be known when the graph is built, got a tensor of unknown "
                "shape")
        weights = math_ops.cast(
            convert_to_tensor(weights, dtype=None if is_tensor_like(weights) else
                              predictions.dtype), predictions.dtype)
        weights = checked_weights(weights, predictions, f"'{sc.rstrip('/')}'")
        axes = list(range(1, ndims))
        diffs = predictions - labels
        with name_scope(None, "num_present"):
            present = math_ops.cast(math_ops.not_equal(weights, 0.0), diffs.dtype)
            n = reduce_sum(broadcast_weights(present, diffs), axis=axes, keepdims=True)
        squares = reduce_sum(math_ops.square(diffs), axis=axes, keepdims=True)
        # Named as TF1 names them, so the loss is '<scope>/value_2' there and here.
        term1 = 2.0 * math_ops.div_no_nan(squares, math_ops.maximum(n - 1, 0.0), name="value")
        total = reduce_sum(diffs, axis=axes, keepdims=True)
        term2 = 2.0 * math_ops.div_no_nan(math_ops.square(total),
                                          math_ops.maximum(n * (n - 1), 0.0), name="value")
        loss = reduce_sum((term1 - term2) * weights)
        loss = math_ops.where(math_ops.greater(reduce_sum(n), 0.0), loss,
                              math_ops.zeros_like(loss), name="value")
        add_loss(loss, loss_collection)
        return loss


def softmax_cross_entropy(onehot_labels, logits, weights=1.0, label_smoothing=0, scope=None,
                          loss_collection=GraphKeys.LOSSES, reduction=_DEFAULT):
    """Return the weighted softmax cross entropy of [batch, classes] ``logits``.

    ``label_smoothing`` s moves the labels towards uniform: ``labels * (1 - s) + s / k``.
    No gradient reaches the labels.
    """
    _given("softmax_cross_entropy", onehot_labels=onehot_labels, logits=logits)
    Reduction.validate(reduction)
    with name_scope(scope, "softmax_cross_entropy_loss") as sc:
        logits = convert_to_tensor(logits)
        labels = _like(onehot_labels, logits)
        _same_shape(sc, labels, logits, "onehot_labels", "logits")
        if label_smoothing > 0:
            classes = math_ops.cast(math_ops.shape(labels)[-1], logits.dtype)
            labels = labels * (1 - label_smoothing) + label_smoothing / classes
        losses = softmax_cross_entropy_with_logits_v2(labels=stop_gradient(labels),
                                                      logits=logits, name="xentropy")
        return compute_weighted_loss(losses, weights, sc, loss_collection, reduction)


def sparse_softmax_cross_entropy(labels, logits, weights=1.0, scope=None,
                                 loss_collection=GraphKeys.LOSSES, reduction=_DEFAULT):
    """Return the weighted cross entropy of integer class ``labels`` [batch] (or
    [batch, 1]) against ``logits`` [batch, classes]."""
    _given("sparse_softmax_cross_entropy", labels=labels, logits=logits)
    Reduction.validate(reduction)
    with name_scope(scope, "sparse_softmax_cross_entropy_loss") as sc:
        logits = convert_to_tensor(logits)
        labels, logits = remove_squeezable_dimensions(convert_to_tensor(labels), logits,
                                                      expected_rank_diff=1)
        weights = _squeeze_weights(weights, labels)
        losses = sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits,
                                                          name="xentropy")
        return compute_weighted_loss(losses, weights, sc, loss_collection, reduction)


def sigmoid_cross_entropy(multi_class_labels, logits, weights=1.0, label_smoothing=0,
                          scope=None, loss_collection=GraphKeys.LOSSES, reduction=_DEFAULT):
    """Return the weighted elementwise logistic loss; labels in [0, 1].

    ``label_smoothing`` s moves the labels towards 1/2: ``labels * (1 - s) + s / 2``.
    """
    _given("sigmoid_cross_entropy", multi_class_labels=multi_class_labels, logits=logits)
    Reduction.validate(reduction)
    with name_scope(scope, "sigmoid_cross_entropy_loss") as sc:
        logits = convert_to_tensor(logits)
        labels = _like(multi_class_labels, logits)
        _same_shape(sc, labels, logits, "multi_class_labels", "logits")
        if label_smoothing > 0:
            labels = labels * (1 - label_smoothing) + 0.5 * label_smoothing
        losses = sigmoid_cross_entropy_with_logits(labels=labels, logits=logits,
                                                   name="xentropy")
        return compute_weighted_loss(losses, weights, sc, loss_collection, reduction)
