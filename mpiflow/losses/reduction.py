"""``Reduction`` and ``compute_weighted_loss``: how ``mf.losses`` turn per-element losses
and weights into the loss a model minimizes (TF1's rules).

Every reduction divides with ``div_no_nan``, so a batch whose weights are all zero gives a
loss of 0 (and zero gradients) rather than NaN.
"""

from __future__ import annotations

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.graph import GraphKeys
from mpiflow.framework.scopes import name_scope
from mpiflow.losses.collection import add_loss
from mpiflow.ops import math_ops
from mpiflow.ops.array_ops import size
from mpiflow.ops.constant_ops import convert_to_tensor, is_tensor_like
from mpiflow.ops.reduction_ops import reduce_sum
from mpiflow.ops.weights_broadcast import broadcast_weights, checked_weights


class Reduction:
    """The ways to reduce weighted losses; the values are TF1's strings."""

    NONE = "none"
    SUM = "weighted_sum"
    SUM_OVER_BATCH_SIZE = "weighted_sum_over_batch_size"
    MEAN = "weighted_mean"
    SUM_BY_NONZERO_WEIGHTS = "weighted_sum_by_nonzero_weights"
    SUM_OVER_NONZERO_WEIGHTS = SUM_BY_NONZERO_WEIGHTS

    @classmethod
    def all(cls) -> tuple:
        return tuple(REDUCERS)

    @classmethod
    def validate(cls, key) -> None:
        if key not in REDUCERS:
            raise errors.InvalidArgumentError(
                f"Invalid Reduction Key {key!r}: expected one of "
                f"{', '.join(repr(k) for k in REDUCERS)} (mf.losses.Reduction)")


def _num_present(losses, weights):
    """How many losses have a nonzero weight (weights broadcast onto the losses)."""
    with name_scope(None, "num_present"):
        present = math_ops.cast(math_ops.not_equal(weights, 0.0), losses.dtype)
        return reduce_sum(broadcast_weights(present, losses))


def _num_elements(losses):
    return math_ops.cast(size(losses), losses.dtype)


# Reduction -> f(weighted losses, losses, weights): the reduced loss.
REDUCERS = {
    Reduction.NONE: lambda weighted, losses, weights: weighted,
    Reduction.SUM: lambda weighted, losses, weights: reduce_sum(weighted),
    Reduction.MEAN: lambda weighted, losses, weights: math_ops.div_no_nan(
        reduce_sum(weighted), reduce_sum(weights * math_ops.ones_like(losses)), name="value"),
    Reduction.SUM_OVER_BATCH_SIZE: lambda weighted, losses, weights: math_ops.div_no_nan(
        reduce_sum(weighted), _num_elements(losses), name="value"),
    Reduction.SUM_BY_NONZERO_WEIGHTS: lambda weighted, losses, weights: math_ops.div_no_nan(
        reduce_sum(weighted), _num_present(losses, weights), name="value"),
}


def compute_dtype(dtype: dtypes.DType) -> dtypes.DType:
    """The dtype losses are reduced in: float32 as TF1, but float64 stays float64 (TF1
    would round it to float32 and back, for no gain)."""
    return dtypes.float64 if dtype is dtypes.float64 else dtypes.float32


def compute_weighted_loss(losses, weights=1.0, scope=None, loss_collection=GraphKeys.LOSSES,
                          reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """Return ``losses * weights`` reduced by ``reduction``, added to ``loss_collection``.

    Args:
        losses: a tensor of per-element losses.
        weights: a scalar, or a tensor of the losses' rank with each dimension 1 or the
            losses' (TF1's broadcasting rule).
        loss_collection: where the result goes (None: nowhere).
        reduction: a ``Reduction``; the default divides by the number of nonzero weights.

    Returns:
        The loss, of the losses' dtype: a scalar, or the weighted losses for NONE.

    Raises:
        InvalidArgumentError: an unknown reduction, or weights that do not broadcast.
    """
    Reduction.validate(reduction)
    with name_scope(scope, "weighted_loss") as where:
        losses = convert_to_tensor(losses)
        input_dtype = losses.dtype
        wide = compute_dtype(input_dtype)
        losses = math_ops.cast(losses, wide)
        weights = math_ops.cast(
            convert_to_tensor(weights, dtype=None if is_tensor_like(weights) else wide), wide)
        weights = checked_weights(weights, losses, f"'{where.rstrip('/')}'")
        weighted = math_ops.multiply(losses, weights)
        loss = math_ops.cast(REDUCERS[reduction](weighted, losses, weights), input_dtype)
        add_loss(loss, loss_collection)
        return loss
