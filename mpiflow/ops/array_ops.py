"""Shape and layout ops: reshape, concat, and (below) the rest of the array family."""

from __future__ import annotations

import numpy as np

from mpiflow.framework import dtypes
from mpiflow.framework.graph import Tensor
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops import math_ops
from mpiflow.ops.constant_ops import constant, convert_to_tensor
from mpiflow.ops.registry import (
    OpDef, apply_op, normalize_axis, register_op, require_dtype, same_dtype)


@register_op("Reshape")
class ReshapeOp(OpDef):
    aliases_input = True

    def infer(self, b):
        require_dtype(b, 1, (dtypes.int32, dtypes.int64), "shape")
        target = math_ops.shape_from_tensor(b.inputs[1])
        if target.ndims is None:
            return [(b.dtype(0), TensorShape(None))]
        value = None
        if b.inputs[1].op.type == "Const":
            value = [int(d) for d in b.inputs[1].op.get_attr("value").tolist()]
        if value is None:
            return [(b.dtype(0), target)]
        if sum(d == -1 for d in value) > 1:
            raise b.error("Reshape: only one dimension may be -1", got=value)
        n = b.shape(0).num_elements()
        known = int(np.prod([d for d in value if d != -1], dtype=np.int64))
        if -1 in value:
            if n is not None:
                if known == 0 or n % known:
                    raise b.error("Cannot reshape", expected=f"a shape whose size divides {n}",
                                  got=f"{value} from {b.shape(0)}")
                value = [n // known if d == -1 else d for d in value]
            else:
                value = [None if d == -1 else d for d in value]
        elif n is not None and n != known:
            raise b.error("Cannot reshape", expected=f"{n} elements (input {b.shape(0)})",
                          got=f"shape {value} with {known} elements")
        return [(b.dtype(0), value)]

    def forward(self, xp, ctx, x, shape):
        return xp.reshape(x, tuple(int(d) for d in shape))

    def gradient(self, op, g):
        return [reshape(g, math_ops.shape(op.inputs[0])), None]


def reshape(tensor, shape, name=None) -> Tensor:
    """Return ``tensor`` with a new shape (one dim may be -1); a view, no copy."""
    x = convert_to_tensor(tensor)
    s = shape if isinstance(shape, Tensor) else constant(np.asarray(shape, dtype=np.int32),
                                                         name="shape")
    return apply_op("Reshape", [x, s], name=name).outputs[0]


@register_op("ConcatV2", attrs={"axis": 0})
class ConcatOp(OpDef):
    def infer(self, b):
        if not b.inputs:
            raise b.error("concat needs at least one input")
        dt = same_dtype(b)
        shapes = [b.shape(i) for i in range(len(b.inputs))]
        if any(s.ndims is None for s in shapes):
            return [(dt, TensorShape(None))]
        nd = shapes[0].ndims
        if any(s.ndims != nd for s in shapes):
            raise b.error("concat inputs must have the same rank",
                          got=", ".join(str(s) for s in shapes))
        axis = normalize_axis(b, b.attrs["axis"], nd)
        out = []
        for d in range(nd):
            dims = [s[d] for s in shapes]
            if d == axis:
                out.append(None if None in dims else sum(dims))
            else:
                known = {x for x in dims if x is not None}
                if len(known) > 1:
                    raise b.error("concat inputs must match in every dimension but the axis",
                                  expected=f"equal dimension {d}",
                                  got=", ".join(str(s) for s in shapes))
                out.append(known.pop() if known else None)
        return [(dt, out)]

    def prepare(self, ctx):
        ctx.axis = ctx.attrs["axis"] % max(ctx.op.outputs[0].shape.ndims or 1, 1) \
            if ctx.op.outputs[0].shape.ndims is not None else ctx.attrs["axis"]

    def forward(self, xp, ctx, *xs):
        return xp.concatenate(xs, axis=ctx.axis)

    def gradient(self, op, g):
        axis = op.get_attr("axis")
        sizes = [math_ops.shape(x) for x in op.inputs]
        return apply_op("ConcatGrad", [g] + sizes, {"axis": axis}).outputs


@register_op("ConcatGrad", attrs={"axis": 0})
class ConcatGradOp(OpDef):
    """Split a concat's gradient back into pieces of the inputs' runtime shapes."""

    tuple_outputs = True

    def infer(self, b):
        return [(b.dtype(0), math_ops.shape_from_tensor(t)) for t in b.inputs[1:]]

    def forward(self, xp, ctx, g, *shapes):
        axis = ctx.attrs["axis"] % g.ndim
        bounds = np.cumsum([int(s[axis]) for s in shapes])[:-1]
        return tuple(xp.split(g, bounds, axis=axis))

    def gradient(self, op, *gs):
        gs = [g if g is not None else math_ops.zeros_like(o) for g, o in zip(gs, op.outputs)]
        return [concat(gs, op.get_attr("axis"))] + [None] * (len(op.inputs) - 1)


def concat(values, axis, name="concat") -> Tensor:
    """Join tensors along ``axis``."""
    values = [convert_to_tensor(v) for v in values]
    if len(values) == 1:
        return values[0]
    return apply_op("ConcatV2", values, {"axis": int(axis)}, name=name).outputs[0]
