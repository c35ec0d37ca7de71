"""DynamicPartition and DynamicStitch: split rows by a partition id, and merge them back.

``embedding_lookup`` over a sharded table partitions the ids by shard, gathers on each
shard and stitches the rows back into the ids' order; the two ops are each other's
gradient (TensorFlow's data_flow_grad). Gather and the IndexedSlices densifier live in
``sparse_ops.py``, which imports this module, so the gradients here create them by type.
"""

from __future__ import annotations

import numpy as np

from mpiflow import errors
from mpiflow.framework.graph import Tensor
from mpiflow.framework.indexed_slices import IndexedSlices
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops import array_ops, math_ops
from mpiflow.ops.array_ops import kernel_error
from mpiflow.ops.constant_ops import convert_to_tensor
from mpiflow.ops.registry import (
    REQUIRED, OpDef, apply_op, const_value, is_index, register_op, require_dtype, same_dtype)


def _rows_shape(b, data: TensorShape, prefix: TensorShape, what: str):
    """Return data's dims after the ``prefix`` dims (None if unknown); check the prefix."""
    if data.ndims is None or prefix.ndims is None:
        return None
    if data.ndims < prefix.ndims or not TensorShape(
            data.as_list()[:prefix.ndims]).is_compatible_with(prefix):
        raise b.error(f"{what} shape must be a prefix of the data shape",
                      expected=f"data shape starting with {prefix}", got=data)
    return data.as_list()[prefix.ndims:]


@register_op("DynamicPartition", attrs={"num_partitions": REQUIRED})
class DynamicPartitionOp(OpDef):
    """outputs[i] = the rows of data whose partition id is i, in their original order."""

    tuple_outputs = True
    aliases_input = True        # one partition may be a view of the data

    def infer(self, b):
        require_dtype(b, 1, is_index, "partitions")
        n = b.attrs["num_partitions"]
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise b.error("Invalid num_partitions", expected="an integer >= 1", got=n)
        rest = _rows_shape(b, b.shape(0), b.shape(1), "partitions")
        shape = TensorShape(None) if rest is None else TensorShape([None] + rest)
        return [(b.dtype(0), shape)] * int(n)

    def forward(self, xp, ctx, data, partitions):
        n = ctx.attrs["num_partitions"]
        if data.shape[:partitions.ndim] != partitions.shape:
            raise kernel_error(ctx, "partitions shape must be a prefix of the data shape",
                               expected=f"data shape starting with {partitions.shape}",
                               got=data.shape)
        flat = partitions.reshape(-1)
        if flat.size and (flat.min() < 0 or flat.max() >= n):
            bad = flat[(flat < 0) | (flat >= n)][0]
            raise errors.op_error(errors.InvalidArgumentError, "Partition index out of range",
                                  ctx.op, expected=f"partitions in [0, {n})", got=int(bad))
        rows = data.reshape((flat.size,) + data.shape[partitions.ndim:])
        if n == 1:
            return (rows,)
        # One stable sort groups the rows by partition and keeps their order within each.
        order = xp.argsort(flat, kind="stable")
        bounds = xp.cumsum(xp.bincount(flat, minlength=n))[:-1].tolist()
        return tuple(xp.split(rows[order], bounds))

    def gradient(self, op, *grads):
        data, partitions = op.inputs
        n = op.get_attr("num_partitions")
        positions = array_ops.reshape(math_ops.range_(array_ops.size(partitions)),
                                      math_ops.shape(partitions))
        where = dynamic_partition(positions, partitions, n)
        grads = [_dense(g) if g is not None else math_ops.zeros_like(o)
                 for g, o in zip(grads, op.outputs)]
        stitched = dynamic_stitch(where, grads)
        return [array_ops.reshape(stitched, math_ops.shape(data)), None]


@register_op("DynamicStitch", attrs={"N": REQUIRED})
class DynamicStitchOp(OpDef):
    """merged[indices[m][i]] = data[m][i]: interleave the data into one tensor whose row
    count is max(index) + 1; a later (m, i) wins where an index repeats."""

    def infer(self, b):
        n = b.attrs["N"]
        if len(b.inputs) != 2 * n or n < 1:
            raise b.error("DynamicStitch takes N index tensors then N data tensors",
                          expected=f"{2 * n} inputs with N >= 1", got=len(b.inputs))
        for i in range(n):
            require_dtype(b, i, is_index, "indices")
        dt = same_dtype(b, range(n, 2 * n))
        element = TensorShape(None)
        for i in range(n):
            rest = _rows_shape(b, b.shape(n + i), b.shape(i), f"indices[{i}]")
            if rest is None:
                continue
            if not element.is_compatible_with(rest):
                raise b.error("DynamicStitch data must agree in the dims after the indices",
                              expected=element, got=f"{TensorShape(rest)} for data[{i}]")
            element = element.merge_with(rest)
        known = [const_value(t) for t in b.inputs[:n]]
        rows = None
        if all(k is not None for k in known):
            rows = max((int(k.max()) for k in known if k.size), default=-1) + 1
        if element.ndims is None:
            return [(dt, TensorShape(None))]
        return [(dt, [rows] + element.as_list())]

    def forward(self, xp, ctx, *inputs):
        n = len(inputs) // 2
        indices, data = inputs[:n], inputs[n:]
        element = None
        for m, (idx, d) in enumerate(zip(indices, data)):
            if d.shape[:idx.ndim] != idx.shape:
                raise kernel_error(ctx, f"data[{m}] shape must start with indices[{m}] shape",
                                   expected=f"a shape starting with {idx.shape}", got=d.shape)
            if element is None:
                element = d.shape[idx.ndim:]
            elif d.shape[idx.ndim:] != element:
                raise kernel_error(ctx, "DynamicStitch data must agree after the indices dims",
                                   expected=element, got=f"{d.shape[idx.ndim:]} for data[{m}]")
        nonempty = [idx for idx in indices if idx.size]
        if any(int(idx.min()) < 0 for idx in nonempty):
            raise kernel_error(ctx, "DynamicStitch index out of range",
                               expected="indices >= 0", got="a negative index")
        rows = max((int(idx.max()) for idx in nonempty), default=-1) + 1
        out = xp.zeros((rows,) + element, dtype=data[0].dtype)
        for idx, d in zip(indices, data):
            out[idx.reshape(-1)] = d.reshape((idx.size,) + element)
        return out

    def gradient(self, op, grad):
        n = op.get_attr("N")
        grad = _dense(grad)
        # GatherV2 lives in sparse_ops.py (which imports this module), hence by type name.
        values = [apply_op("GatherV2", [grad, idx], {"axis": 0}).outputs[0]
                  for idx in op.inputs[:n]]
        return [None] * n + values


def _dense(grad):
    """Return ``grad`` dense: an IndexedSlices is summed into zeros of its dense shape."""
    if not isinstance(grad, IndexedSlices):
        return grad
    rows = apply_op("GatherFirst", [grad.dense_shape]).outputs[0]
    return apply_op("UnsortedSegmentSum", [grad.values, grad.indices, rows]).outputs[0]


def dynamic_partition(data, partitions, num_partitions: int, name=None) -> list:
    """Split ``data`` into ``num_partitions`` tensors by the ids in ``partitions``.

    ``partitions`` has the shape of a prefix of ``data``'s; output i holds, in order, the
    slices of ``data`` whose id is i.
    """
    data = convert_to_tensor(data)
    partitions = convert_to_tensor(partitions)
    return apply_op("DynamicPartition", [data, partitions],
                    {"num_partitions": int(num_partitions)}, name=name).outputs


def dynamic_stitch(indices, data, name=None) -> Tensor:
    """Interleave ``data`` tensors into one: ``merged[indices[m][i]] = data[m][i]``."""
    indices = [convert_to_tensor(i) for i in indices]
    data = [convert_to_tensor(d) for d in data]
    if len(indices) != len(data) or not indices:
        raise errors.InvalidArgumentError(
            f"dynamic_stitch: expected as many index tensors as data tensors (at least one), "
            f"got {len(indices)} and {len(data)}")
    return apply_op("DynamicStitch", indices + data, {"N": len(indices)},
                    name=name).outputs[0]


parallel_dynamic_stitch = dynamic_stitch
