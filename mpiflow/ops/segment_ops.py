"""The unsorted segment reductions besides the sum: max, min and prod (op types of their
own), mean and sqrt_n (sums over counts, as TensorFlow builds them).

Each takes ``data``, ``segment_ids`` (a prefix of data's shape) and ``num_segments`` and
reduces the rows of each id into its output row, as TensorFlow's CPU kernels do: rows of a
negative id are dropped, an id at or above ``num_segments`` fails the step, and a segment
with no rows holds the reduction's identity (max: the dtype's lowest value, min: its
highest, prod: 1; mean and sqrt_n: 0). Rows are combined in their order in ``data``:
``acc = x < acc ? acc : x`` for max (so a NaN is kept only until a later row of its
segment, as TensorFlow's), ``acc = acc < x ? acc : x`` for min, ``acc * x`` for prod.
"""

from __future__ import annotations

import numpy as np

from mpiflow.framework import dtypes
from mpiflow.framework.graph import Tensor
from mpiflow.framework.scopes import name_scope
from mpiflow.ops import array_ops, indexing_ops, math_ops
from mpiflow.ops.constant_ops import constant, convert_to_tensor
from mpiflow.ops.registry import apply_op, is_numeric, register_op, require_dtype
from mpiflow.ops.sparse_ops import (
    UnsortedSegmentSumOp, _check_indices, check_segment_ids_prefix, gather,
    unsorted_segment_sum)


def segment_ranks(xp, ids):
    """Each element's position among the elements of the vector ``ids`` that have its id,
    counted in input order (0 for the first row of a segment, 1 for the second, ...)."""
    order = xp.argsort(ids, kind="stable")
    ordered = ids[order]
    ranks = xp.empty_like(order)
    ranks[order] = xp.arange(ids.size) - xp.searchsorted(ordered, ordered, side="left")
    return ranks


def reduce_in_order(xp, out, ids, rows, combine) -> None:
    """``out[id] = combine(out[id], row)`` for each row in input order: one vectorized
    step per rank within the segments, where no id repeats, so any array module does
    exactly what a loop over the rows would (as many steps as the longest segment)."""
    if not ids.size:
        return
    ranks = segment_ranks(xp, ids)
    for rank in range(int(ranks.max()) + 1):
        at = ranks == rank
        segments = ids[at]
        out[segments] = combine(xp, out[segments], rows[at])


def _max(xp, acc, x):
    return xp.where(x < acc, acc, x)


def _min(xp, acc, x):
    return xp.where(acc < x, acc, x)


def _prod(xp, acc, x):
    return acc * x


class _SegmentReductionOp(UnsortedSegmentSumOp):
    """Shape and checks as UnsortedSegmentSum; subclasses name the combination."""

    combine = None
    ufunc = ""          # numpy's ufunc whose ``at`` gives the same result on its fast path

    def infer(self, b):
        require_dtype(b, 0, is_numeric, "data")
        return super().infer(b)

    def initial(self, dtype):
        raise NotImplementedError

    def forward(self, xp, ctx, data, segment_ids, num_segments):
        n = int(num_segments)
        check_segment_ids_prefix(ctx, data, segment_ids)
        ids = segment_ids.reshape(-1)
        rows = data.reshape(ids.shape + data.shape[segment_ids.ndim:])
        if ids.size and ids.min() < 0:          # dropped, as TensorFlow's
            kept = ids >= 0
            ids, rows = ids[kept], rows[kept]
        _check_indices(ctx, ids, n, "num_segments")
        out = xp.full((n,) + rows.shape[1:], self.initial(data.dtype), dtype=data.dtype)
        if xp is np and self.ufunc and not self.sees_nan(rows):
            getattr(np, self.ufunc).at(out, ids, rows)
        else:
            reduce_in_order(xp, out, ids, rows, type(self).combine)
        return out

    def sees_nan(self, rows) -> bool:
        """Whether numpy's ufunc.at would differ from the ordered combination: it keeps a
        NaN to the end of its segment."""
        return rows.dtype.kind not in "iub" and bool(np.isnan(rows).any())


@register_op("UnsortedSegmentMax")
class UnsortedSegmentMaxOp(_SegmentReductionOp):
    combine = staticmethod(_max)
    ufunc = "maximum"

    def initial(self, dtype):
        return dtypes.as_dtype(dtype).min

    def gradient(self, op, g):
        return _min_or_max_grad(op, g)


@register_op("UnsortedSegmentMin")
class UnsortedSegmentMinOp(_SegmentReductionOp):
    combine = staticmethod(_min)
    ufunc = "minimum"

    def initial(self, dtype):
        return dtypes.as_dtype(dtype).max

    def gradient(self, op, g):
        return _min_or_max_grad(op, g)


@register_op("UnsortedSegmentProd")
class UnsortedSegmentProdOp(_SegmentReductionOp):
    combine = staticmethod(_prod)
    ufunc = "multiply"

    def initial(self, dtype):
        return 1

    def sees_nan(self, rows) -> bool:
        return False                            # a product keeps a NaN either way

    def gradient(self, op, g):
        # As TensorFlow's: a segment without zeros passes g * prod / x to each row; one
        # with a single zero passes g * (product of the others) to that zero and 0 to the
        # rest; one with more zeros passes 0 everywhere.
        data, ids, n = op.inputs
        is_zero = math_ops.equal(data, math_ops.zeros_like(data))
        zeros = unsorted_segment_sum(math_ops.cast(is_zero, dtypes.int32), ids, n)
        g = math_ops.where(math_ops.greater(zeros, math_ops.ones_like(zeros)),
                           math_ops.zeros_like(g), g)
        ones = math_ops.ones_like(data)
        non_zero = math_ops.where(is_zero, ones, data)
        non_zero_prod = unsorted_segment_prod(non_zero, ids, n)
        gathered_prod, _ = _gather_drop_negatives(op.outputs[0], ids)
        gathered_non_zero_prod, _ = _gather_drop_negatives(non_zero_prod, ids)
        partial = math_ops.where(is_zero, gathered_non_zero_prod,
                                 math_ops.divide(gathered_prod, non_zero))
        gathered_g, _ = _gather_drop_negatives(g, ids)
        return [math_ops.multiply(gathered_g, partial), None, None]


def _gather_drop_negatives(params, ids):
    """(the rows of ``params`` (shape [segments, ...]) at ``ids``, zero where an id is
    negative; whether each id is kept, shaped to broadcast against those rows)."""
    zero = math_ops.zeros_like(ids)
    rows = gather(params, math_ops.maximum(ids, zero))
    if ids.shape.is_fully_defined() and params.shape.ndims is not None:
        shape = ids.shape.as_list() + [1] * (params.shape.ndims - 1)
    else:
        row_dims = indexing_ops.slice(math_ops.shape(params), [1], [-1])
        shape = array_ops.concat([math_ops.shape(ids), math_ops.ones_like(row_dims)], 0)
    kept = array_ops.reshape(math_ops.greater_equal(ids, zero), shape)
    return math_ops.where(kept, rows, math_ops.zeros_like(rows)), kept


def _min_or_max_grad(op, g):
    # As TensorFlow's: each segment's gradient goes to the rows equal to its result,
    # split evenly among them; dropped rows (negative ids) get none.
    data, ids, n = op.inputs
    chosen, kept = _gather_drop_negatives(op.outputs[0], ids)
    selected = math_ops.logical_and(math_ops.equal(data, chosen), kept)
    counts = unsorted_segment_sum(math_ops.cast(selected, g.dtype), ids, n)
    shares, _ = _gather_drop_negatives(math_ops.divide(g, counts), ids)
    return [math_ops.where(selected, shares, math_ops.zeros_like(shares)), None, None]


def _segments(num_segments) -> Tensor:
    return num_segments if isinstance(num_segments, Tensor) else \
        constant(int(num_segments))


def _reduce(op_type, data, segment_ids, num_segments, name):
    return apply_op(op_type, [convert_to_tensor(data), convert_to_tensor(segment_ids),
                              _segments(num_segments)], name=name).outputs[0]


def unsorted_segment_max(data, segment_ids, num_segments, name=None) -> Tensor:
    """Return the largest row of ``data`` per segment id (num_segments rows); an empty
    segment holds the dtype's lowest value, rows of a negative id are dropped."""
    return _reduce("UnsortedSegmentMax", data, segment_ids, num_segments, name)


def unsorted_segment_min(data, segment_ids, num_segments, name=None) -> Tensor:
    """Return the smallest row of ``data`` per segment id (num_segments rows); an empty
    segment holds the dtype's highest value, rows of a negative id are dropped."""
    return _reduce("UnsortedSegmentMin", data, segment_ids, num_segments, name)


def unsorted_segment_prod(data, segment_ids, num_segments, name=None) -> Tensor:
    """Return the product of the rows of ``data`` per segment id (num_segments rows); an
    empty segment holds 1, rows of a negative id are dropped."""
    return _reduce("UnsortedSegmentProd", data, segment_ids, num_segments, name)


def _counts(data, segment_ids, num_segments):
    """How many rows each segment has (at least 1), shaped to divide the segment sums:
    as TensorFlow, ones summed per segment, in data's dtype."""
    extra = (data.shape.ndims - segment_ids.shape.ndims
             if data.shape.ndims is not None and segment_ids.shape.ndims is not None
             else None)
    if extra is None:           # ranks known only when the step runs: count whole rows
        ones = math_ops.ones_like(data)
        counts = unsorted_segment_sum(ones, segment_ids, num_segments)
    else:
        ones = math_ops.ones_like(segment_ids, dtype=data.dtype)
        counts = array_ops.reshape(unsorted_segment_sum(ones, segment_ids, num_segments),
                                   [-1] + [1] * extra)
    return math_ops.maximum(counts, math_ops.ones_like(counts))


def unsorted_segment_mean(data, segment_ids, num_segments, name=None) -> Tensor:
    """Return the mean of the rows of ``data`` per segment id (num_segments rows); an
    empty segment holds 0; integers average into float64, as TensorFlow's."""
    with name_scope(name, "UnsortedSegmentMean"):
        data, segment_ids = convert_to_tensor(data), convert_to_tensor(segment_ids)
        n = _segments(num_segments)
        return math_ops.divide(unsorted_segment_sum(data, segment_ids, n),
                               _counts(data, segment_ids, n))


def unsorted_segment_sqrt_n(data, segment_ids, num_segments, name=None) -> Tensor:
    """Return the sum of the rows of ``data`` per segment id divided by the square root
    of their count (num_segments rows; floats); an empty segment holds 0."""
    with name_scope(name, "UnsortedSegmentSqrtN"):
        data, segment_ids = convert_to_tensor(data), convert_to_tensor(segment_ids)
        n = _segments(num_segments)
        return math_ops.divide(unsorted_segment_sum(data, segment_ids, n),
                               math_ops.sqrt(_counts(data, segment_ids, n)))
