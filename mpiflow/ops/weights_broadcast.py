"""Weights against values, as ``tf.losses`` and ``tf.metrics`` accept them.

A weight may be a scalar or have the values' rank with each dimension 1 or the values'
(TensorFlow's rule: no implicit leading dimensions, so a [batch] weight against [batch, d]
losses is refused instead of silently broadcasting along the wrong axis). Labels and
predictions that differ only by a trailing size-1 dimension ([batch, 1] against [batch])
are squeezed to match. Built from other ops; registers none.
"""

from __future__ import annotations

from mpiflow import errors
from mpiflow.framework.graph import Tensor
from mpiflow.ops import math_ops
from mpiflow.ops.array_ops import squeeze
from mpiflow.ops.constant_ops import convert_to_tensor


def check_broadcastable(weights: Tensor, values: Tensor, where: str) -> None:
    """Raise unless ``weights`` broadcasts onto ``values`` by TensorFlow's rule.

    Checked on the static shapes; dimensions unknown at build time pass here and meet
    numpy's broadcasting when the graph runs.

    Raises:
        InvalidArgumentError: naming ``where`` and both shapes.
    """
    w, v = weights.shape, values.shape
    if w.ndims is None or v.ndims is None or w.ndims == 0:
        return
    fits = w.ndims == v.ndims and all(
        dw is None or dv is None or dw in (1, dv) for dw, dv in zip(w.as_list(), v.as_list()))
    if not fits:
        raise errors.InvalidArgumentError(
            f"weights can not be broadcast to values in {where}: expected a scalar or "
            f"a shape of rank {v.ndims} with each dimension 1 or equal to the values' "
            f"({v}), got weights of shape {w}")


def broadcast_weights(weights, values: Tensor, where: str = "broadcast_weights") -> Tensor:
    """Return ``weights`` expanded to the shape of ``values`` (checked as above)."""
    weights = convert_to_tensor(weights, dtype=values.dtype)
    check_broadcastable(weights, values, where)
    if weights.shape.is_fully_defined() and weights.shape == values.shape:
        return weights
    return math_ops.multiply(weights, math_ops.ones_like(values))


def _squeezable(t: Tensor) -> bool:
    return bool(t.shape.ndims) and t.shape[-1] in (1, None)


def remove_squeezable_dimensions(labels: Tensor, predictions: Tensor,
                                 expected_rank_diff: int = 0):
    """Return (labels, predictions), dropping a trailing size-1 dimension from the one
    whose rank is one more than ``rank(predictions) - rank(labels) == expected_rank_diff``
    allows (static ranks only; unknown ranks are left alone)."""
    lr, pr = labels.shape.ndims, predictions.shape.ndims
    if lr is None or pr is None:
        return labels, predictions
    if pr - lr == expected_rank_diff + 1 and _squeezable(predictions):
        predictions = squeeze(predictions, [-1])
    elif pr - lr == expected_rank_diff - 1 and _squeezable(labels):
        labels = squeeze(labels, [-1])
    return labels, predictions
