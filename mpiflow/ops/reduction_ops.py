"""Reductions (sum, mean, max, min, prod, all, any) and arg-reductions (argmax, argmin)."""

from __future__ import annotations

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops import math_ops
from mpiflow.ops.constant_ops import convert_to_tensor
from mpiflow.ops.registry import (
    OpDef, apply_op, is_numeric, normalize_axis, register_op, require_dtype)


def _axes(b, ndims):
    """Return the normalized reduction axes as a sorted tuple (all axes for None).

    An axis named twice (``[1, -2]`` of a 3-D tensor) is refused, as TensorFlow refuses it
    ("duplicate dimension"); numpy's reduce would fail on it only when the step runs.
    """
    axis = b.attrs["axis"]
    if axis is None:
        return tuple(range(ndims))
    axes = [normalize_axis(b, a, ndims) for a in axis]
    if len(set(axes)) != len(axes):
        raise b.error("Reduction axes contain a duplicate dimension",
                      expected=f"distinct axes of a rank-{ndims} tensor", got=list(axis))
    return tuple(sorted(axes))


def _reduced_shape(b, axes=None):
    s = b.shape(0)
    if s.ndims is None:
        return TensorShape(None)
    axes = _axes(b, s.ndims) if axes is None else axes
    keep = b.attrs["keepdims"]
    return TensorShape([1 if i in axes else d for i, d in enumerate(s.as_list())
                        if keep or i not in axes])


# numpy's sum, prod, max and min are these ufuncs' reduce behind a Python wrapper that
# costs 1-2 us a call (a reduce_sum per variable: 200 a step in a model of 200 of them).
_HOST_REDUCTIONS = {"sum": np.add.reduce, "prod": np.multiply.reduce,
                    "max": np.maximum.reduce, "min": np.minimum.reduce,
                    "all": np.logical_and.reduce, "any": np.logical_or.reduce}


class _Reduce(OpDef):
    """A reduction ``xp.<method>(x, axis, keepdims)`` with TensorFlow's axis rules."""

    method = None
    allowed = staticmethod(is_numeric)

    def infer(self, b):
        require_dtype(b, 0, self.allowed)
        if b.attrs["axis"] is None and b.shape(0).ndims is None:
            return [(b.dtype(0), TensorShape(None if b.attrs["keepdims"] else []))]
        return [(b.dtype(0), _reduced_shape(b))]

    def prepare(self, ctx):
        axis = ctx.attrs["axis"]
        ctx.axis = None if axis is None else tuple(axis)
        ctx.dtype = ctx.op.outputs[0].dtype.np_dtype
        ctx.reduce = _HOST_REDUCTIONS.get(self.method) if ctx.xp is np else None
        if ctx.reduce is None:
            ctx.reduce = getattr(ctx.xp, self.method)
        # Sums of half floats add in float32 and round once, as TensorFlow's (ml_dtypes'
        # bfloat16 adds in bfloat16: 5000 ones of 1.1 summed to 512).
        wide = math_ops.accumulating_dtype(ctx.xp, ctx.dtype)
        ctx.wide = {"dtype": wide} if self.method in ("sum", "mean") and \
            wide != ctx.dtype else {}

    def forward(self, xp, ctx, x):
        out = ctx.reduce(x, axis=ctx.axis, keepdims=ctx.attrs["keepdims"], **ctx.wide)
        return xp.asarray(out, dtype=ctx.dtype)


@register_op("Sum", attrs={"axis": None, "keepdims": False})
class SumOp(_Reduce):
    method = "sum"

    def gradient(self, op, g):
        return [_reduce_grad(op, g, "sum")]


def _result_shape(shape, ctx) -> tuple:
    """The shape a kernel's reduction of an input of ``shape`` gives (its axes, keepdims)."""
    return np.add.reduce(np.zeros(shape, np.int8), axis=ctx.axis,
                         keepdims=ctx.attrs["keepdims"]).shape


@register_op("Mean", attrs={"axis": None, "keepdims": False})
class MeanOp(_Reduce):
    """The mean; of integers, the sum divided by the count in integer arithmetic, rounded
    toward zero and in their dtype, as TensorFlow's (``reduce_mean([1, 2])`` is 1)."""

    method = "mean"

    def forward(self, xp, ctx, x):
        if ctx.dtype.kind not in "iu":
            if x.size == 0:     # NaN, as TensorFlow's 0 / 0 (numpy also warns "Mean of
                #                 empty slice" on the script's stderr)
                return xp.full(_result_shape(x.shape, ctx), np.nan, dtype=ctx.dtype)
            return super().forward(xp, ctx, x)
        # Summed in 64 bits, as TensorFlow's: the mean of [127, 127, 1] as int8 is 85 (a
        # sum in int8 wraps to -1, and the mean to 0).
        wide = np.uint64 if ctx.dtype.kind == "u" else np.int64
        total = xp.sum(x, axis=ctx.axis, keepdims=ctx.attrs["keepdims"], dtype=wide)
        count = x.size // max(int(xp.size(total)), 1)
        if count == 0:          # nothing to average (an empty axis): 0, as numpy's sum
            return xp.asarray(total, dtype=ctx.dtype)
        quotient = xp.abs(total) // count
        return xp.asarray(xp.where(total < 0, -quotient, quotient), dtype=ctx.dtype)

    def gradient(self, op, g):
        return [_reduce_grad(op, g, "mean")]


@register_op("Prod", attrs={"axis": None, "keepdims": False})
class ProdOp(_Reduce):
    method = "prod"

    def gradient(self, op, g):
        # d prod / d x_i is the product of the others in x_i's group: ProdOthers, not
        # prod / x_i, which is 0/0 = NaN wherever x_i is 0 (TensorFlow's is exact there).
        others = apply_op("ProdOthers", [op.inputs[0]],
                          {"axis": _normalized_axis(op)}).outputs[0]
        return [math_ops.multiply(_broadcast_back(op, g), others)]


def _runtime_axes(axis, ndim) -> tuple:
    """The reduction axes of ``axis`` (all for None) in [0, ndim), sorted, for a kernel
    whose input's rank may have been unknown when the graph was built."""
    if axis is None:
        return tuple(range(ndim))
    return tuple(sorted({a % max(ndim, 1) for a in axis}))


@register_op("ProdOthers", attrs={"axis": None})
class ProdOthersOp(OpDef):
    """For each element, the product of the other elements of its group (the elements a
    ``Prod`` over ``axis`` multiplies together): ``d prod / d x``.

    Computed from the products before and after each element (exclusive cumulative
    products both ways along the group, TensorFlow's way), so it never divides: exact
    where ``x`` holds zeros, where ``prod / x`` is NaN.
    """

    def infer(self, b):
        require_dtype(b, 0, is_numeric)
        return [(b.dtype(0), b.shape(0))]

    def forward(self, xp, ctx, x):
        axes = _runtime_axes(ctx.attrs["axis"], x.ndim)
        front = tuple(range(len(axes)))
        moved = xp.moveaxis(x, axes, front)
        flat = moved.reshape((-1,) + moved.shape[len(axes):])
        ones = xp.ones((1,) + flat.shape[1:], dtype=x.dtype)
        before = xp.cumprod(xp.concatenate([ones, flat]), axis=0)[:-1]
        after = xp.cumprod(xp.concatenate([ones, flat[::-1]]), axis=0)[:-1][::-1]
        others = (before * after).reshape(moved.shape)
        return xp.ascontiguousarray(xp.moveaxis(others, front, axes))

    def gradient(self, op, gg):
        # d others_i / d x_k = prod of the group but x_i and x_k (k != i), which is
        # others_i / x_k: the same division TensorFlow's second derivative (its cumprod's
        # gradient) makes, so exact where x has no zeros.
        x, others = op.inputs[0], op.outputs[0]
        weighted = math_ops.multiply(gg, others)
        total = apply_op("Sum", [weighted], {"axis": op.get_attr("axis"),
                                             "keepdims": True}).outputs[0]
        return [math_ops.divide(math_ops.subtract(total, weighted), x)]


class _ReduceExtreme(_Reduce):
    """Max and Min. Over no elements (an axis of size 0) each gives its identity, as
    TensorFlow does: Max the least value of the dtype (-inf for floats), Min the greatest
    (inf), where numpy has no identity for them and refuses."""

    lowest = None       # True: Max's identity; False: Min's

    def forward(self, xp, ctx, x):
        if x.size == 0:
            shape = _result_shape(x.shape, ctx)
            dtype = ctx.op.outputs[0].dtype
            if dtype.is_floating:
                value = -np.inf if self.lowest else np.inf
            else:
                value = dtype.min if self.lowest else dtype.max
            return xp.full(shape, value, dtype=ctx.dtype)
        return super().forward(xp, ctx, x)

    def gradient(self, op, g):
        x = op.inputs[0]
        y_b = _broadcast_back(op, op.outputs[0])
        mask = math_ops.cast(math_ops.equal(x, y_b), g.dtype)
        count = apply_op("Sum", [mask], {"axis": op.get_attr("axis"),
                                         "keepdims": op.get_attr("keepdims")}).outputs[0]
        return [math_ops.multiply(mask, _broadcast_back(op, math_ops.divide(g, count)))]


@register_op("Max", attrs={"axis": None, "keepdims": False})
class MaxOp(_ReduceExtreme):
    method = "max"
    lowest = True


@register_op("Min", attrs={"axis": None, "keepdims": False})
class MinOp(_ReduceExtreme):
    method = "min"
    lowest = False


class _ReduceLogical(_Reduce):
    """All and Any of a bool tensor (TensorFlow's reduce_all and reduce_any): over no
    elements each gives its identity, True and False, as numpy's and TensorFlow's do.
    They are not differentiable, as in TensorFlow."""

    allowed = staticmethod(lambda dt: dt.is_bool)
    gradient = None


@register_op("All", attrs={"axis": None, "keepdims": False})
class AllOp(_ReduceLogical):
    method = "all"


@register_op("Any", attrs={"axis": None, "keepdims": False})
class AnyOp(_ReduceLogical):
    method = "any"


def _broadcast_layout(shape: tuple, axis) -> tuple:
    """``(shape, kept, count)``: the reduced tensor's shape with the reduced axes kept as
    1, and how many elements each reduced one stood for."""
    axes = range(len(shape)) if axis is None else [a % max(len(shape), 1) for a in axis]
    kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
    return shape, kept, int(np.prod([shape[a] for a in axes], dtype=np.int64))


def _broadcast_view(reduced: np.ndarray, shape: tuple) -> np.ndarray:
    """``np.broadcast_to(reduced, shape)`` for a C-contiguous ``reduced`` of the same
    rank: a read-only view striding 0 along its size-1 axes, made by the ndarray
    constructor in about a microsecond instead of numpy's 4-5 (the gradient of every
    ``reduce_sum``: 200 of them a step in a model of 200 small variables)."""
    strides = tuple(0 if k == 1 else st for k, st in zip(reduced.shape, reduced.strides))
    out = np.ndarray(shape, reduced.dtype, buffer=reduced, strides=strides)
    out.flags.writeable = False
    return out


@register_op("ReduceGrad", attrs={"axis": None, "keepdims": False, "mode": "sum"})
class ReduceGradOp(OpDef):
    """Broadcast a reduced tensor back to the input's shape (divided by count for mean).

    This is the adjoint of Sum/Mean, so its own gradient is the reduction again.
    """
    host_inputs = (1,)
    aliases_input = True        # a broadcast view of the gradient (for "sum")
    read_only_output = True

    def infer(self, b):
        return [(b.dtype(0), math_ops.shape_from_tensor(b.inputs[1]))]

    def prepare(self, ctx):
        ctx.layout = None       # (shape, kept, count) of the last input shape seen

    def forward(self, xp, ctx, g, x_shape):
        shape = tuple(x_shape.tolist())
        layout = ctx.layout
        if layout is None or layout[0] != shape:
            layout = ctx.layout = _broadcast_layout(shape, ctx.attrs["axis"])
        _, kept, count = layout
        if type(g) is np.ndarray and g.flags.c_contiguous:
            out = _broadcast_view(g.reshape(kept), shape)
        else:
            out = xp.broadcast_to(xp.reshape(g, kept), shape)
        if ctx.attrs["mode"] == "mean":
            out = xp.divide(out, max(count, 1)).astype(g.dtype, copy=False)
        return out

    def gradient(self, op, g):
        reduce_type = "Mean" if op.get_attr("mode") == "mean" else "Sum"
        return [apply_op(reduce_type, [g], {"axis": op.get_attr("axis"),
                                            "keepdims": op.get_attr("keepdims")}).outputs[0],
                None]


def _normalized_axis(op):
    axis = op.get_attr("axis")
    nd = op.inputs[0].shape.ndims
    if axis is None or nd is None:
        return axis
    return sorted({a % max(nd, 1) for a in axis})


def _reduce_grad(op, g, mode):
    x = op.inputs[0]
    return apply_op("ReduceGrad", [g, math_ops.shape(x)],
                    {"axis": _normalized_axis(op), "keepdims": op.get_attr("keepdims"),
                     "mode": mode}).outputs[0]


def _broadcast_back(op, value):
    return _reduce_grad(op, value, "sum")


def _axis_attr(axis, reduction_indices):
    axis = reduction_indices if axis is None else axis
    if axis is None:
        return None
    from mpiflow.ops.array_ops import static_ints     # (array_ops imports this module)
    return static_ints(axis, "reduction axis").reshape(-1).tolist()


def _arg_axis(axis, dimension, what):
    axis = dimension if axis is None else axis
    if axis is None:
        return 0
    from mpiflow.ops.array_ops import static_axis     # (array_ops imports this module)
    return static_axis(axis, f"{what} axis")


def _reduction(type_name):
    def fn(input_tensor, axis=None, keepdims=None, name=None, reduction_indices=None,
           keep_dims=None):
        keep = bool(keepdims if keepdims is not None else (keep_dims or False))
        return apply_op(type_name, [convert_to_tensor(input_tensor)],
                        {"axis": _axis_attr(axis, reduction_indices), "keepdims": keep},
                        name=name).outputs[0]
    fn.__doc__ = f"Reduce with {type_name.lower()} over ``axis`` (all axes for None)."
    return fn


reduce_sum = _reduction("Sum")
reduce_mean = _reduction("Mean")
reduce_max = _reduction("Max")
reduce_min = _reduction("Min")
reduce_prod = _reduction("Prod")
reduce_all = _reduction("All")
reduce_any = _reduction("Any")


def reduce_logsumexp(input_tensor, axis=None, keepdims=None, name=None,
                     reduction_indices=None, keep_dims=None):
    """Return log(sum(exp(x))) over ``axis`` (all axes for None), as TensorFlow computes it:
    the max is subtracted first (no overflow) and added back, a max that is not finite
    counts as 0, so a row of all -inf gives -inf (and an empty one -inf) and a row with
    +inf gives inf. The max is a constant to the gradient: the gradient is the softmax of
    the row (NaN for a row of all -inf, as in TensorFlow)."""
    from mpiflow.framework.scopes import name_scope
    from mpiflow.ops.array_ops import reshape
    from mpiflow.ops.control_ops import stop_gradient
    with name_scope(name, "ReduceLogSumExp", [input_tensor]) as scope:
        x = convert_to_tensor(input_tensor)
        if not x.dtype.is_floating:
            raise errors.InvalidArgumentError(
                f"reduce_logsumexp needs a floating tensor, got {x.dtype.name} (as "
                "TensorFlow, which has no integer kernel for it)")
        keep = bool(keepdims if keepdims is not None else (keep_dims or False))
        axis = axis if axis is not None else reduction_indices
        raw_max = reduce_max(x, axis=axis, keepdims=True)
        my_max = stop_gradient(math_ops.where(math_ops.is_finite(raw_max), raw_max,
                                              math_ops.zeros_like(raw_max)))
        result = math_ops.log(reduce_sum(math_ops.exp(math_ops.subtract(x, my_max)),
                                         axis=axis, keepdims=keep))
        if not keep:
            my_max = reshape(my_max, math_ops.shape(result))
        return math_ops.add(result, my_max, name=scope)


class _ArgReduce(OpDef):
    attrs = {"axis": 0, "output_type": dtypes.int64}
    method = None
    gradient = None

    def infer(self, b):
        # Any dtype, bool too (True is the larger), as TensorFlow's.
        s = b.shape(0)
        if s.ndims is None:
            return [(b.attrs["output_type"], TensorShape(None))]
        axis = normalize_axis(b, b.attrs["axis"], s.ndims)
        return [(b.attrs["output_type"], [d for i, d in enumerate(s.as_list()) if i != axis])]

    def forward(self, xp, ctx, x):
        axis = ctx.attrs["axis"]
        dtype = ctx.op.inputs[0].dtype
        if not dtype.is_floating:
            out = getattr(xp, self.method)(x, axis=axis)
        else:
            # As TensorFlow's: NaN is skipped, and the first index of the best value wins
            # only where that value is past the dtype's finite end, else index 0 (where
            # numpy gives the first NaN's index). So [1, NaN, 3] gives 2 and all NaN 0.
            worst = -np.inf if self.method == "argmax" else np.inf
            filled = xp.where(xp.isnan(x), xp.asarray(worst, dtype=x.dtype), x)
            out = getattr(xp, self.method)(filled, axis=axis)
            best = xp.take_along_axis(filled, xp.expand_dims(out, axis), axis)
            past_end = best > dtype.min if self.method == "argmax" else best < dtype.max
            out = xp.where(xp.squeeze(past_end, axis), out, 0)
        return out.astype(ctx.attrs["output_type"].np_dtype, copy=False)


@register_op("ArgMax", attrs={"axis": 0, "output_type": dtypes.int64})
class ArgMaxOp(_ArgReduce):
    method = "argmax"


@register_op("ArgMin", attrs={"axis": 0, "output_type": dtypes.int64})
class ArgMinOp(_ArgReduce):
    method = "argmin"


def argmax(input, axis=None, name=None, dimension=None, output_type=dtypes.int64):
    """Return the index of the largest value along ``axis`` (default 0)."""
    return apply_op("ArgMax", [convert_to_tensor(input)],
                    {"axis": _arg_axis(axis, dimension, "argmax"),
                     "output_type": dtypes.as_dtype(output_type)},
                    name=name).outputs[0]


def argmin(input, axis=None, name=None, dimension=None, output_type=dtypes.int64):
    """Return the index of the smallest value along ``axis`` (default 0)."""
    return apply_op("ArgMin", [convert_to_tensor(input)],
                    {"axis": _arg_axis(axis, dimension, "argmin"),
                     "output_type": dtypes.as_dtype(output_type)},
                    name=name).outputs[0]


def count_nonzero(input_tensor, axis=None, keepdims=False, dtype=dtypes.int64, name=None):
    x = convert_to_tensor(input_tensor)
    nz = math_ops.cast(math_ops.not_equal(x, math_ops.zeros_like(x)), dtype)
    return reduce_sum(nz, axis=axis, keepdims=keepdims, name=name)


# -- cumulative sums and products --------------------------------------------------------

_SCAN_ATTRS = {"axis": 0, "exclusive": False, "reverse": False}


class _ScanOp(OpDef):
    """Cumsum and Cumprod along ``axis``: ``exclusive`` leaves each element out of its own
    entry (the first entry is 0, or 1), ``reverse`` runs from the end, as TensorFlow's."""

    method = None
    identity = None

    def infer(self, b):
        require_dtype(b, 0, is_numeric)
        s = b.shape(0)
        if s.ndims is not None:
            if s.ndims == 0:
                raise b.error(f"{b.type} needs a tensor of rank >= 1", got=s)
            normalize_axis(b, b.attrs["axis"], s.ndims)
        return [(b.dtype(0), s)]

    def forward(self, xp, ctx, x):
        axis = ctx.attrs["axis"] % x.ndim
        if ctx.attrs["reverse"]:
            x = xp.flip(x, axis)
        out = getattr(xp, self.method)(x, axis=axis, dtype=x.dtype)
        if ctx.attrs["exclusive"]:
            shifted = xp.empty_like(out)
            head = (slice(None),) * axis
            shifted[head + (slice(0, 1),)] = self.identity
            shifted[head + (slice(1, None),)] = out[head + (slice(0, -1),)]
            out = shifted
        if ctx.attrs["reverse"]:
            out = xp.flip(out, axis)
        return xp.ascontiguousarray(out)


@register_op("Cumsum", attrs=_SCAN_ATTRS)
class CumsumOp(_ScanOp):
    method, identity = "cumsum", 0

    def gradient(self, op, g):
        return [cumsum(g, op.get_attr("axis"), exclusive=op.get_attr("exclusive"),
                       reverse=not op.get_attr("reverse"))]


@register_op("Cumprod", attrs=_SCAN_ATTRS)
class CumprodOp(_ScanOp):
    method, identity = "cumprod", 1

    def gradient(self, op, g):
        # TensorFlow's: the reverse cumsum of prod * g, divided by x, where x is 0 giving 0
        # (div_no_nan; not the true derivative there, as in TensorFlow).
        x = op.inputs[0]
        axis, exclusive, reverse = (op.get_attr(k) for k in ("axis", "exclusive", "reverse"))
        prod = cumprod(x, axis, exclusive=exclusive, reverse=reverse)
        out = cumsum(math_ops.multiply(prod, g), axis, exclusive=exclusive,
                     reverse=not reverse)
        return [math_ops.div_no_nan(out, x)]


def _scan(type_name, what):
    def fn(x, axis=0, exclusive=False, reverse=False, name=None):
        from mpiflow.ops.array_ops import static_axis
        return apply_op(type_name, [convert_to_tensor(x)],
                        {"axis": static_axis(axis, f"{what} axis"),
                         "exclusive": bool(exclusive), "reverse": bool(reverse)},
                        name=name).outputs[0]
    fn.__name__ = fn.__qualname__ = what
    fn.__doc__ = (f"Return the cumulative {'sum' if type_name == 'Cumsum' else 'product'} "
                  "of ``x`` along ``axis`` (a constant): ``exclusive`` leaves each element out "
                  "of its own entry, ``reverse`` runs from the end.")
    return fn


cumsum = _scan("Cumsum", "cumsum")
cumprod = _scan("Cumprod", "cumprod")
