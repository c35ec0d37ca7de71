"""Picking elements by rank, coordinates and masks: top_k, gather_nd / scatter_nd and
boolean_mask.

TopKV2, GatherNd and ScatterNd are kernels; their gradients are built from ops that
have gradients of their own (top_k's scatters through UnsortedSegmentSum, GatherNd and
ScatterNd are each other's adjoint), so second derivatives come for free. boolean_mask
is TensorFlow's composition: the mask's dimensions flattened into one, the coordinates
of its true elements, and a gather.
"""

from __future__ import annotations

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.graph import Tensor, get_default_graph
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops import array_ops, math_ops, reduction_ops, sparse_ops
from mpiflow.ops.constant_ops import constant, convert_to_tensor
from mpiflow.ops.registry import (
    OpDef, add_at, apply_op, const_value, is_index, is_numeric, register_op, require_dtype)


# -- top_k --------------------------------------------------------------------------------

@register_op("TopKV2", attrs={"sorted": True})
class TopKOp(OpDef):
    """The ``k`` largest entries of each last-axis row and their positions (int32),
    largest first, equal values in the order of their positions, as TensorFlow's.
    ``k`` is an input, as in TensorFlow: a constant gives the static shape, a computed
    one is read on the host when the step runs."""

    tuple_outputs = True
    host_inputs = (1,)

    def infer(self, b):
        require_dtype(b, 0, is_numeric, "input")
        require_dtype(b, 1, (dtypes.int32,), "k")
        s = b.shape(0)
        if b.shape(1).ndims not in (None, 0):
            raise b.error("top_k k must be a scalar", got=f"shape {b.shape(1)}")
        if s.ndims == 0:
            raise b.error("top_k needs an input of rank >= 1", got=s)
        known = const_value(b.inputs[1])
        k = None if known is None else int(known)
        if k is not None and k < 0:
            raise b.error("top_k k must be non-negative", got=k)
        if s.ndims is None:
            return [(b.dtype(0), TensorShape(None)), (dtypes.int32, TensorShape(None))]
        if k is not None and s[-1] is not None and s[-1] < k:
            raise b.error("top_k input must have at least k entries in its last dimension",
                          expected=f"a last dimension >= {k}", got=f"shape {s}")
        out = s.as_list()[:-1] + [k]
        return [(b.dtype(0), out), (dtypes.int32, out)]

    def forward(self, xp, ctx, x, k):
        k = int(k)
        if x.ndim == 0 or k < 0 or x.shape[-1] < k:
            raise array_ops.kernel_error(
                ctx, "top_k needs k in [0, the last dimension]",
                expected=f"0 <= k <= {x.shape[-1] if x.ndim else 'the last dimension'}",
                got=f"k={k} for shape {x.shape}")
        n = x.shape[-1]
        # A stable ascending sort of the reversed row, read backwards, is descending with
        # equal values in increasing position (any dtype: nothing is negated); NaN sorts
        # as the largest value.
        order = xp.argsort(x[..., ::-1], axis=-1, kind="stable")[..., ::-1][..., :k]
        indices = (n - 1 - order).astype(np.int32)
        return xp.take_along_axis(x, indices, axis=-1), indices

    def gradient(self, op, g, _):
        if g is None:
            return [None, None]
        return [_scatter_into_rows(g, op.outputs[1], op.inputs[0]), None]


def _scatter_into_rows(g, indices, x) -> Tensor:
    """Zeros shaped like ``x`` with ``g[..., j]`` at ``[..., indices[..., j]]`` (the
    positions in a row are distinct): one UnsortedSegmentSum over flat positions."""
    shape = math_ops.shape(x)
    n = shape[-1]
    rows = array_ops.reshape(indices, [-1, math_ops.shape(indices)[-1]])
    starts = math_ops.range_(math_ops.shape(rows)[0]) * n
    flat = array_ops.reshape(rows + array_ops.expand_dims(starts, -1), [-1])
    total = array_ops.size(x)
    summed = sparse_ops.unsorted_segment_sum(array_ops.reshape(g, [-1]), flat, total)
    return array_ops.reshape(summed, shape)


def top_k(input, k=1, sorted=True, name=None):
    """Return (values, indices): the ``k`` largest entries of each row of ``input``'s
    last dimension and their positions (int32), as TensorFlow's ``tf.nn.top_k``.

    Largest first; equal values come in the order of their positions. ``sorted=False``
    gives the same order (TensorFlow leaves it open then). The gradient in ``input``
    puts each value's gradient at the position it was taken from.

    Raises:
        InvalidArgumentError: a bool or scalar input, a k that is not an int32 scalar,
            negative, or (when known) larger than the last dimension.
    """
    x = convert_to_tensor(input)
    k = convert_to_tensor(k, dtype=dtypes.int32) if not isinstance(k, Tensor) else k
    op = apply_op("TopKV2", [x, k], {"sorted": bool(sorted)}, name=name)
    return op.outputs[0], op.outputs[1]


# -- gather_nd / scatter_nd ---------------------------------------------------------------

def _linear_indices(xp, ctx, indices, shape):
    """Row numbers into ``shape``'s first ``indices.shape[-1]`` dimensions flattened into
    one; an index outside ``shape`` raises, naming the op and the index."""
    depth = indices.shape[-1]
    if depth > len(shape):
        raise array_ops.kernel_error(
            ctx, "indices.shape[-1] must be <= the rank of the indexed shape",
            expected=f"at most {len(shape)}", got=f"indices of shape {indices.shape}")
    linear = xp.zeros(indices.shape[:-1], dtype=np.int64)
    for i in range(depth):
        column = indices[..., i]
        bad = (column < 0) | (column >= shape[i])
        if bad.any():
            at = tuple(int(j) for j in xp.argwhere(bad)[0].tolist())
            raise array_ops.kernel_error(
                ctx, "Index out of range",
                expected=f"indices inside shape {tuple(shape)}",
                got=f"indices{list(at)} = {[int(v) for v in indices[at].tolist()]}")
        linear = linear * shape[i] + column
    return linear


def _nd_shape(b, indices_shape, table_shape, what):
    """Static shape indices.shape[:-1] + table_shape[depth:], or None where unknown."""
    if indices_shape.ndims == 0:
        raise b.error(f"{what} indices must have rank >= 1", got=indices_shape)
    if indices_shape.ndims is None or table_shape.ndims is None or indices_shape[-1] is None:
        return None
    depth = indices_shape[-1]
    if depth > table_shape.ndims:
        raise b.error("indices.shape[-1] must be <= the rank of the indexed shape",
                      expected=f"at most {table_shape.ndims} (shape {table_shape})",
                      got=f"indices of shape {indices_shape}")
    return indices_shape.as_list()[:-1] + table_shape.as_list()[depth:]


@register_op("GatherNd")
class GatherNdOp(OpDef):
    """``out[i...] = params[indices[i..., :]]``: each index row picks an element or a
    slice of params by its leading coordinates."""

    def infer(self, b):
        require_dtype(b, 1, is_index, "indices")
        out = _nd_shape(b, b.shape(1), b.shape(0), "gather_nd")
        return [(b.dtype(0), TensorShape(None) if out is None else out)]

    def forward(self, xp, ctx, params, indices):
        depth = indices.shape[-1]
        linear = _linear_indices(xp, ctx, indices, params.shape)
        rows = params.reshape((int(np.prod(params.shape[:depth], dtype=np.int64)),)
                              + params.shape[depth:])
        return xp.take(rows, linear, axis=0)

    def gradient(self, op, g):
        params, indices = op.inputs
        return [scatter_nd(indices, g, math_ops.shape(params, out_type=indices.dtype)),
                None]


@register_op("ScatterNd")
class ScatterNdOp(OpDef):
    """Zeros of ``shape`` with ``updates[i...]`` added at ``indices[i..., :]`` (repeated
    indices sum)."""

    host_inputs = (2,)

    def infer(self, b):
        require_dtype(b, 0, is_index, "indices")
        require_dtype(b, 2, is_index, "shape")
        known = const_value(b.inputs[2])
        table = math_ops.shape_from_tensor(b.inputs[2]) if known is None else \
            TensorShape([int(d) for d in np.reshape(known, -1)])
        if known is not None and np.any(np.asarray(known) < 0):
            raise b.error("scatter_nd shape must be non-negative", got=known.tolist())
        want = _nd_shape(b, b.shape(0), table, "scatter_nd")
        if want is not None and not b.shape(1).is_compatible_with(want):
            raise b.error("scatter_nd updates must have shape indices.shape[:-1] + "
                          "shape[indices.shape[-1]:]", expected=TensorShape(want),
                          got=b.shape(1))
        return [(b.dtype(1), table)]

    def forward(self, xp, ctx, indices, updates, shape):
        shape = tuple(int(d) for d in shape)
        depth = indices.shape[-1]
        linear = _linear_indices(xp, ctx, indices, shape)
        if updates.shape != linear.shape + shape[depth:]:
            raise array_ops.kernel_error(
                ctx, "scatter_nd updates must have shape indices.shape[:-1] + "
                "shape[indices.shape[-1]:]", expected=linear.shape + shape[depth:],
                got=updates.shape)
        out = xp.zeros(shape, dtype=updates.dtype)
        add_at(xp, out.reshape((int(np.prod(shape[:depth], dtype=np.int64)),)
                               + shape[depth:]), linear, updates)
        return out

    def gradient(self, op, g):
        return [None, gather_nd(g, op.inputs[0]), None]


def gather_nd(params, indices, name=None, batch_dims=0) -> Tensor:
    """Return ``params`` at the coordinates in the last dimension of ``indices``:
    shape ``indices.shape[:-1] + params.shape[indices.shape[-1]:]``, as TensorFlow's.

    ``batch_dims=b``: the first b dimensions of params and indices are a batch, each
    example's indices address its own part of params. The gradient in params adds the
    gradient of each picked element or slice at its coordinates (a ScatterNd).

    Raises:
        InvalidArgumentError: non-integer or scalar indices, a last dimension of indices
            above params' rank, or (when the step runs) an index outside params.
    """
    p, i = convert_to_tensor(params), convert_to_tensor(indices)
    batch_dims = array_ops.static_axis(batch_dims, "gather_nd batch_dims")
    if batch_dims:
        with get_default_graph().name_scope(name or "BatchGatherND"):
            i = _with_batch_coordinates(i, batch_dims)
            return apply_op("GatherNd", [p, i]).outputs[0]
    return apply_op("GatherNd", [p, i], name=name).outputs[0]


def _with_batch_coordinates(indices, batch_dims) -> Tensor:
    """``indices`` with the batch position of each index row put in front of it, so one
    GatherNd over the whole params reads each example from its own part."""
    rank = indices.shape.ndims
    if rank is None or batch_dims < 0 or batch_dims >= rank:
        raise errors.InvalidArgumentError(
            f"gather_nd: batch_dims={batch_dims} needs indices of known rank above it, "
            f"got indices of shape {indices.shape}")
    shape = math_ops.shape(indices, out_type=indices.dtype)
    grids = []
    for d in range(batch_dims):
        axis_shape = [1] * rank
        axis_shape[d] = -1
        grids.append(math_ops.multiply(
            array_ops.reshape(math_ops.range_(shape[d], dtype=indices.dtype), axis_shape),
            math_ops.ones_like(indices[..., :1])))
    return array_ops.concat(grids + [indices], -1)


def scatter_nd(indices, updates, shape, name=None) -> Tensor:
    """Return zeros of ``shape`` with ``updates`` added at ``indices`` (the adjoint of
    ``gather_nd``; repeated indices sum), as TensorFlow's ``tf.scatter_nd``."""
    i = convert_to_tensor(indices)
    s = shape if isinstance(shape, Tensor) else constant(
        np.asarray(array_ops.static_ints(shape, "scatter_nd shape"), i.dtype.np_dtype
                   if i.dtype in (dtypes.int32, dtypes.int64) else np.int32))
    return apply_op("ScatterNd", [i, convert_to_tensor(updates), s], name=name).outputs[0]


# -- boolean_mask -------------------------------------------------------------------------

def boolean_mask(tensor, mask, name="boolean_mask", axis=None) -> Tensor:
    """Return the slices of ``tensor`` where ``mask`` is true, as TensorFlow's: the
    mask's k dimensions match ``tensor``'s from ``axis`` (default 0) on and become one
    dimension of unknown size holding the picked slices in row-major order.

    Raises:
        InvalidArgumentError: a scalar mask or one of unknown rank, an axis that is not
            a known int, or mask dimensions that do not match the tensor's.
    """
    with get_default_graph().name_scope(name or "boolean_mask"):
        x = convert_to_tensor(tensor, name="tensor")
        m = convert_to_tensor(mask, name="mask")
        k = m.shape.ndims
        if k == 0:
            raise errors.InvalidArgumentError("boolean_mask: mask cannot be a scalar")
        if k is None:
            raise errors.InvalidArgumentError(
                "boolean_mask: the mask's rank must be known when the graph is built (its "
                "dimensions may be unknown)")
        axis = 0 if axis is None else array_ops.static_axis(axis, "boolean_mask axis")
        s = x.shape
        if s.ndims is not None:
            if axis < 0:
                axis += s.ndims
            if not 0 <= axis <= s.ndims - k:
                raise errors.InvalidArgumentError(
                    f"boolean_mask: a mask of rank {k} at axis {axis} does not fit a tensor "
                    f"of shape {s}")
            part = TensorShape(s.as_list()[axis:axis + k])
            if not part.is_compatible_with(m.shape):
                raise errors.InvalidArgumentError(
                    f"boolean_mask: mask of shape {m.shape} does not match dimensions "
                    f"{axis}..{axis + k - 1} of tensor '{x.name}' of shape {s}")
        elif axis < 0:
            raise errors.InvalidArgumentError(
                f"boolean_mask: a negative axis ({axis}) needs the tensor's rank, got "
                f"tensor '{x.name}' of unknown shape")
        if k > 1 or axis > 0:
            x = _merge_mask_dims(x, axis, k)
        picked = array_ops.reshape(math_ops.where(array_ops.reshape(m, [-1])), [-1])
        return sparse_ops.gather(x, picked, axis=axis)


def _merge_mask_dims(x, axis, k) -> Tensor:
    """``x`` with its dimensions axis..axis+k-1 merged into one (row-major)."""
    s = x.shape
    if s.is_fully_defined():
        dims = s.as_list()
        return array_ops.reshape(x, dims[:axis] + [int(np.prod(dims[axis:axis + k]))]
                                 + dims[axis + k:])
    shape = math_ops.shape(x)
    merged = reduction_ops.reduce_prod(shape[axis:axis + k], axis=[0], keepdims=True)
    out = array_ops.reshape(x, array_ops.concat([shape[:axis], merged, shape[axis + k:]], 0))
    if s.ndims is not None:
        part = TensorShape(s.as_list()[axis:axis + k]).num_elements()
        out.set_shape(s.as_list()[:axis] + [part] + s.as_list()[axis + k:])
    return out
