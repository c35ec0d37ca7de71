"""``tf.confusion_matrix``: how often each (label, prediction) pair of class ids occurs.

Built from existing ops: each pair becomes one id ``label * num_classes + prediction``,
and ``unsorted_segment_sum`` adds the pairs' weights (or ones) into ``num_classes**2``
cells, reshaped to the [labels, predictions] matrix. A class id outside
[0, num_classes) would land in another pair's cell (or, negative, be dropped) without a
word, so both inputs are checked when the step runs, as TensorFlow checks them, and the
step fails naming the input that is out of range.
"""

from __future__ import annotations

from mpiflow.framework import dtypes
from mpiflow.framework.scopes import control_dependencies, name_scope
from mpiflow.ops import math_ops
from mpiflow.ops.array_ops import reshape, stack
from mpiflow.ops.check_ops import assert_less, assert_non_negative
from mpiflow.ops.constant_ops import convert_to_tensor
from mpiflow.ops.reduction_ops import reduce_max
from mpiflow.ops.registry import const_value
from mpiflow.ops.sparse_ops import unsorted_segment_sum
from mpiflow.ops.weights_broadcast import remove_squeezable_dimensions


def confusion_matrix(labels, predictions, num_classes=None, weights=None,
                     dtype=dtypes.int32, name=None):
    """Return the [num_classes, num_classes] matrix whose entry [i, j] is the (weighted)
    number of examples labelled i and predicted j, in ``dtype``.

    Args:
        labels, predictions: 1-D class ids (a trailing dimension of 1 on either is
            dropped); cast to int64, as TensorFlow does.
        num_classes: the matrix's size; without it, one more than the largest id seen in
            the step, so the shape is known only when the step runs.
        weights: one weight per example, added (cast to ``dtype``) in place of a 1.

    Raises (when the step runs):
        InvalidArgumentError: a negative id, or one not below ``num_classes``.
    """
    with name_scope(name, "confusion_matrix"):
        labels = math_ops.cast(convert_to_tensor(labels), dtypes.int64)
        predictions = math_ops.cast(convert_to_tensor(predictions), dtypes.int64)
        labels, predictions = remove_squeezable_dimensions(labels, predictions)
        dtype = dtypes.as_dtype(dtype)
        checks = [assert_non_negative(labels, message="`labels` contains negative values"),
                  assert_non_negative(predictions,
                                      message="`predictions` contains negative values")]
        known = None
        if num_classes is None:
            n = math_ops.maximum(reduce_max(labels), reduce_max(predictions)) + 1
        else:
            num_classes = convert_to_tensor(num_classes)
            known = const_value(num_classes)
            n = math_ops.cast(num_classes, dtypes.int64)
            checks += [assert_less(labels, n, message="`labels` out of bound"),
                       assert_less(predictions, n, message="`predictions` out of bound")]
        if weights is None:
            counted = math_ops.ones_like(predictions, dtype=dtype)
        else:
            weights = convert_to_tensor(weights)
            weights, predictions = remove_squeezable_dimensions(weights, predictions)
            counted = math_ops.cast(weights, dtype)
        with control_dependencies(checks):
            cells = math_ops.add(math_ops.multiply(labels, n), predictions)
        if known is not None:
            side = int(known)
            return reshape(unsorted_segment_sum(counted, cells, side * side), [side, side])
        side = math_ops.cast(n, dtypes.int32)
        return reshape(unsorted_segment_sum(counted, cells, math_ops.multiply(side, side)),
                       stack([side, side]))
