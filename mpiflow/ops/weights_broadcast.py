"""Weights against values, as ``tf.losses`` and ``tf.metrics`` accept them.

A weight may be a scalar or have the values' rank with each dimension 1 or the values'
(TensorFlow's rule: no implicit leading dimensions, so a [batch] weight against [batch, d]
losses is refused instead of silently broadcasting along the wrong axis). Labels and
predictions that differ only by a trailing size-1 dimension ([batch, 1] against [batch])
are squeezed to match. Both are decided on the static ranks when the graph is built;
where a rank is known only at run time (a placeholder of unknown shape), the one op
registered here, ``AlignRank``, decides the same way when the step runs, as TensorFlow's
run-time branches do, instead of leaving the tensors to numpy's broadcasting (which
lines a [batch] weight up with the last axis of [batch, d] values, or pairs [batch, 1]
labels with [batch] predictions into a [batch, batch] grid).
"""

from __future__ import annotations

from mpiflow import errors
from mpiflow.framework.graph import Tensor
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops import math_ops
from mpiflow.ops.array_ops import expand_dims, kernel_error, reshape, squeeze
from mpiflow.ops.constant_ops import convert_to_tensor
from mpiflow.ops.registry import OpDef, apply_op, register_op


def _fits(weights_shape, values_shape) -> bool:
    """TensorFlow's rule on two shapes (lists; None = unknown dimension)."""
    return len(weights_shape) == 0 or len(weights_shape) == len(values_shape) and all(
        dw is None or dv is None or dw in (1, dv) for dw, dv in zip(weights_shape, values_shape))


@register_op("AlignRank", attrs={"squeeze_if": None, "expand_if": None, "check": False,
                                 "where": ""})
class AlignRankOp(OpDef):
    """``x`` against ``reference`` when a rank is known only at run time: with
    d = rank(x) - rank(reference), a non-scalar ``x`` loses its trailing 1 when d is
    ``squeeze_if`` and gains one when d is ``expand_if``; with ``check``, the result must
    then broadcast onto ``reference`` by the weights rule."""

    aliases_input = True

    def infer(self, b):
        return [(b.dtype(0), TensorShape(None))]

    def forward(self, xp, ctx, x, reference):
        squeeze_if, expand_if = ctx.attrs["squeeze_if"], ctx.attrs["expand_if"]
        d = x.ndim - reference.ndim
        if x.ndim and d == squeeze_if:
            if x.shape[-1] != 1:
                raise kernel_error(ctx, f"Cannot squeeze the last dimension in "
                                   f"{ctx.attrs['where']}", expected="a dimension of size 1",
                                   got=f"{x.shape[-1]} (shape {x.shape}, against "
                                   f"{reference.shape})")
            x = x.reshape(x.shape[:-1])
        elif x.ndim and d == expand_if:
            x = x.reshape(x.shape + (1,))
        if ctx.attrs["check"] and not _fits(x.shape, reference.shape):
            raise kernel_error(
                ctx, f"weights can not be broadcast to values in {ctx.attrs['where']}",
                expected=f"a scalar or a shape of rank {reference.ndim} with each dimension "
                f"1 or equal to the values' ({reference.shape})", got=f"weights of shape "
                f"{x.shape}")
        return x

    def gradient(self, op, g):
        return [reshape(g, math_ops.shape(op.inputs[0])), None]


def align_rank(x: Tensor, reference: Tensor, where: str, squeeze_if=None, expand_if=None,
               check=False) -> Tensor:
    """Return ``x`` through an ``AlignRank`` op (ranks decided at run time)."""
    return apply_op("AlignRank", [x, reference],
                    {"squeeze_if": squeeze_if, "expand_if": expand_if, "check": check,
                     "where": where}, name="AlignRank").outputs[0]


def _known_rank(t: Tensor) -> bool:
    return t.shape.ndims is not None


def check_broadcastable(weights: Tensor, values: Tensor, where: str) -> None:
    """Raise unless ``weights`` broadcasts onto ``values`` by TensorFlow's rule.

    Checked on the static shapes; dimensions unknown at build time pass here and meet
    numpy's broadcasting when the graph runs (``checked_weights`` checks an unknown rank).

    Raises:
        InvalidArgumentError: naming ``where`` and both shapes.
    """
    w, v = weights.shape, values.shape
    if w.ndims is None or v.ndims is None or w.ndims == 0:
        return
    if not _fits(w.as_list(), v.as_list()):
        raise errors.InvalidArgumentError(
            f"weights can not be broadcast to values in {where}: expected a scalar or "
            f"a shape of rank {v.ndims} with each dimension 1 or equal to the values' "
            f"({v}), got weights of shape {w}")


def checked_weights(weights: Tensor, values: Tensor, where: str) -> Tensor:
    """Return ``weights``, checked to broadcast onto ``values``: when the graph is built,
    or, where a rank is known only then, when the step runs (as TensorFlow's
    ``assert_broadcastable``)."""
    check_broadcastable(weights, values, where)
    if weights.shape.ndims == 0 or _known_rank(weights) and _known_rank(values):
        return weights
    return align_rank(weights, values, where, check=True)


def broadcast_weights(weights, values: Tensor, where: str = "broadcast_weights") -> Tensor:
    """Return ``weights`` expanded to the shape of ``values`` (checked as above)."""
    weights = checked_weights(convert_to_tensor(weights, dtype=values.dtype), values, where)
    if weights.shape.is_fully_defined() and weights.shape == values.shape:
        return weights
    return math_ops.multiply(weights, math_ops.ones_like(values))


def _squeezable(t: Tensor) -> bool:
    return bool(t.shape.ndims) and t.shape[-1] in (1, None)


def remove_squeezable_dimensions(labels: Tensor, predictions: Tensor,
                                 expected_rank_diff: int = 0):
    """Return (labels, predictions), dropping a trailing size-1 dimension from the one
    whose rank is one more than ``rank(predictions) - rank(labels) == expected_rank_diff``
    allows (decided when the step runs where a rank is unknown when the graph is built)."""
    lr, pr = labels.shape.ndims, predictions.shape.ndims
    if lr is None or pr is None:
        where = "remove_squeezable_dimensions"
        new_predictions = predictions
        if pr is None or _squeezable(predictions):
            new_predictions = align_rank(predictions, labels, where,
                                         squeeze_if=expected_rank_diff + 1)
        if lr is None or _squeezable(labels):
            labels = align_rank(labels, predictions, where, squeeze_if=1 - expected_rank_diff)
        return labels, new_predictions
    if pr - lr == expected_rank_diff + 1 and _squeezable(predictions):
        predictions = squeeze(predictions, [-1])
    elif pr - lr == expected_rank_diff - 1 and _squeezable(labels):
        labels = squeeze(labels, [-1])
    return labels, predictions


def align_weights(weights: Tensor, values: Tensor) -> Tensor:
    """Return ``weights`` with a trailing 1 dropped, or one added, to reach the rank of
    ``values`` (a scalar stays a scalar), as ``tf.metrics`` takes weights."""
    w, v = weights.shape.ndims, values.shape.ndims
    if w == 0:
        return weights
    if w is None or v is None:
        return align_rank(weights, values, "weights", squeeze_if=1, expand_if=-1)
    if w - v == 1 and weights.shape[-1] in (1, None):
        return squeeze(weights, [-1])
    if v - w == 1:
        return expand_dims(weights, -1)
    return weights
