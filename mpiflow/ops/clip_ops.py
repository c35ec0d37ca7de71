"""Gradient clipping (TF1's ``tf.clip_by_value``, ``tf.clip_by_norm``, ``tf.global_norm``,
``tf.clip_by_global_norm``), composed from registered ops so their gradients come from
the ops' own.

Sparse gradients (``IndexedSlices``) are clipped through their values and stay sparse: a
clipped embedding gradient still touches only the rows the batch used (densified, it
would move every row of a momentum or RMSProp slot).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mpiflow import errors
from mpiflow.framework.graph import Tensor, get_default_graph
from mpiflow.framework.indexed_slices import IndexedSlices
from mpiflow.ops import math_ops, reduction_ops
from mpiflow.ops.constant_ops import constant, convert_to_tensor


def _values(t, what: str) -> Tensor:
    if isinstance(t, IndexedSlices):
        return t.values
    t = convert_to_tensor(t)
    if not t.dtype.is_floating:
        raise errors.InvalidArgumentError(
            f"{what}: expected floating tensors, got {t.dtype.name} tensor '{t.name}'")
    return t


def _with_values(t, values):
    if isinstance(t, IndexedSlices):
        return IndexedSlices(values, t.indices, t.dense_shape)
    return values


def _check_list(t_list, what: str) -> list:
    # A single tensor would otherwise be iterated along its first axis.
    if isinstance(t_list, (Tensor, IndexedSlices, str, np.ndarray)) or \
            not isinstance(t_list, Sequence):
        raise errors.InvalidArgumentError(
            f"{what}: t_list must be a list or tuple of tensors, got {type(t_list).__name__}")
    return list(t_list)


def global_norm(t_list, name=None) -> Tensor:
    """Return sqrt(sum of the squares of every element of every tensor in ``t_list``).

    None entries are skipped (variables without a gradient); IndexedSlices count their
    values once each, as their dense form would unless indices repeat.

    Raises:
        InvalidArgumentError: ``t_list`` is not a list, holds only None, or mixes dtypes.
    """
    t_list = _check_list(t_list, "global_norm")
    with get_default_graph().name_scope(name or "global_norm"):
        values = [_values(t, "global_norm") for t in t_list if t is not None]
        if not values:
            raise errors.InvalidArgumentError(
                "global_norm: expected at least one tensor in t_list, got only None")
        kinds = sorted({v.dtype.name for v in values})
        if len(kinds) > 1:
            raise errors.InvalidArgumentError(
                f"global_norm: expected tensors of one dtype, got {kinds}")
        squares = [reduction_ops.reduce_sum(math_ops.square(v)) for v in values]
        total = squares[0] if len(squares) == 1 else math_ops.add_n(squares)
        return math_ops.sqrt(total, name="global_norm")


def clip_by_global_norm(t_list, clip_norm, use_norm=None, name=None):
    """Scale every tensor of ``t_list`` by clip_norm / max(global_norm, clip_norm).

    All tensors are scaled by one factor, so the direction of the whole update is kept
    (unlike clipping each tensor on its own). A non-finite norm makes every entry NaN, as
    in TensorFlow, so a diverged step shows instead of being silently clipped.

    Args:
        t_list: tensors, IndexedSlices or None.
        clip_norm: the largest global norm let through (a positive scalar).
        use_norm: a global norm computed already (else ``global_norm(t_list)``).

    Returns:
        ``(list_clipped, global_norm)``: None stays None, IndexedSlices stay sparse.
    """
    t_list = _check_list(t_list, "clip_by_global_norm")
    with get_default_graph().name_scope(name or "clip_by_global_norm"):
        if use_norm is None:
            use_norm = global_norm(t_list)
        use_norm = convert_to_tensor(use_norm)
        clip_norm = convert_to_tensor(clip_norm, dtype=use_norm.dtype, name="clip_norm")
        one = constant(1.0, dtype=use_norm.dtype)
        scale = clip_norm * math_ops.minimum(one / use_norm, one / clip_norm)
        nan = constant(np.nan, dtype=use_norm.dtype)
        scale = math_ops.where(math_ops.is_finite(use_norm), scale, nan)
        clipped = []
        for i, t in enumerate(t_list):
            if t is None:
                clipped.append(None)
                continue
            values = _values(t, "clip_by_global_norm")
            factor = math_ops.cast(scale, values.dtype)
            out = math_ops.multiply(values, factor, name=f"clipped_{i}")
            clipped.append(_with_values(t, out))
        return clipped, use_norm


def clip_by_norm(t, clip_norm, axes=None, name=None):
    """Scale ``t`` so that its L2 norm over ``axes`` (all axes for None) is at most
    ``clip_norm``: t * clip_norm / max(norm, clip_norm).

    The norm of an all-zero slice is taken without a square root of zero, so the
    gradient stays finite there. IndexedSlices are clipped through their values.
    """
    with get_default_graph().name_scope(name or "clip_by_norm"):
        values = _values(t, "clip_by_norm")
        clip_norm = convert_to_tensor(clip_norm, dtype=values.dtype, name="clip_norm")
        sum_sq = reduction_ops.reduce_sum(values * values, axis=axes, keepdims=True)
        positive = math_ops.greater(sum_sq, constant(0, dtype=values.dtype))
        safe = math_ops.where(positive, sum_sq, math_ops.ones_like(sum_sq))
        norm = math_ops.where(positive, math_ops.sqrt(safe), sum_sq)
        out = math_ops.divide(values * clip_norm, math_ops.maximum(norm, clip_norm))
        return _with_values(t, out)


def clip_by_value(t, clip_value_min, clip_value_max, name=None):
    """Return ``t`` with every element clipped into [clip_value_min, clip_value_max]:
    maximum(minimum(t, clip_value_max), clip_value_min), TF1's order (where min > max
    every element is clip_value_min).

    The gradient passes where ``t`` is inside the range and is zero where it was
    clipped. IndexedSlices are clipped through their values and stay sparse.

    Raises:
        InvalidArgumentError: the bounds would broadcast ``t`` to a larger shape.
    """
    with get_default_graph().name_scope(name or "clip_by_value"):
        values = t.values if isinstance(t, IndexedSlices) else convert_to_tensor(t)
        high = convert_to_tensor(clip_value_max, dtype=values.dtype)
        low = convert_to_tensor(clip_value_min, dtype=values.dtype)
        out = math_ops.maximum(math_ops.minimum(values, high), low)
        if not out.shape.is_compatible_with(values.shape):
            raise errors.InvalidArgumentError(
                f"clip_by_value: the bounds (shapes {low.shape} and {high.shape}) would "
                f"broadcast '{values.name}' of shape {values.shape} to {out.shape}; "
                "TensorFlow refuses it too")
        return _with_values(t, out)
