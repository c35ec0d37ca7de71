"""Taking parts of a tensor: slice, strided slice (``Tensor.__getitem__``), split, unstack
and one_hot.

A strided slice is numpy basic indexing, so its spec (begin/end/strides and TensorFlow's
five bit masks, all attrs) becomes one index tuple per plan: the kernel is ``x[index]`` (a
view) and its gradient ``StridedSliceGrad`` writes into zeros of the input's runtime shape
at the same index. Slice (and Pad, in ``array_ops.py``) reuse that pair for gradients.
"""

from __future__ import annotations

import builtins

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.graph import Tensor
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops import math_ops
from mpiflow.ops.array_ops import (
    concat, kernel_error, runtime_axis, stack, static_axis, static_ints, static_scalar)
from mpiflow.ops.constant_ops import convert_to_tensor, python_dtype
from mpiflow.ops.control_ops import identity as identity_op
from mpiflow.ops.registry import (
    REQUIRED, OpDef, apply_op, const_value, is_index, normalize_axis, register_op,
    require_dtype)

_MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")
_SPEC = {"begin": REQUIRED, "end": REQUIRED, "strides": REQUIRED, **dict.fromkeys(_MASKS, 0)}


# -- strided slice ------------------------------------------------------------------------

def _index_items(attrs) -> list:
    """Return a strided-slice spec as numpy index items (Ellipsis, None, int or slice)."""
    items = []
    for i, (start, stop, step) in enumerate(zip(attrs["begin"], attrs["end"],
                                                attrs["strides"])):
        bit = 1 << i
        if attrs["ellipsis_mask"] & bit:
            items.append(Ellipsis)
        elif attrs["new_axis_mask"] & bit:
            items.append(None)
        elif attrs["shrink_axis_mask"] & bit:
            items.append(int(start))
        else:
            items.append(builtins.slice(None if attrs["begin_mask"] & bit else start,
                                        None if attrs["end_mask"] & bit else stop, step))
    return items


def _index_tuple(attrs) -> tuple:
    items = _index_items(attrs)
    # TensorFlow's implicit trailing ellipsis; it also makes numpy return a 0-d view, not a
    # scalar, when every dimension is indexed by an int.
    return tuple(items if Ellipsis in items else items + [Ellipsis])


def _sliced_shape(b):
    """Return the static shape of a strided slice of input 0; raise naming the op."""
    s, attrs = b.shape(0), b.attrs
    lengths = [len(attrs[k]) for k in ("begin", "end", "strides")]
    if len(set(lengths)) != 1:
        raise b.error("begin, end and strides must have the same length", got=lengths)
    items = _index_items(attrs)
    if sum(it is Ellipsis for it in items) > 1:
        raise b.error("Invalid index", expected="at most one ellipsis", got=items)
    if any(isinstance(it, builtins.slice) and it.step == 0 for it in items):
        raise b.error("Invalid index", expected="non-zero strides", got=list(attrs["strides"]))
    consumed = sum(it is not None and it is not Ellipsis for it in items)
    if s.ndims is None:
        return TensorShape(None)
    if consumed > s.ndims:
        raise b.error("Too many indices", expected=f"at most {s.ndims} for shape {s}",
                      got=consumed)
    dims, out, d = s.as_list(), [], 0
    for it in items if Ellipsis in items else items + [Ellipsis]:
        if it is Ellipsis:
            out += dims[d:d + s.ndims - consumed]
            d += s.ndims - consumed
        elif it is None:
            out.append(1)
        else:
            n = dims[d]
            if isinstance(it, builtins.slice):
                out.append(None if n is None else len(range(*it.indices(n))))
            elif n is not None and not -n <= it < n:
                raise b.error(f"Index out of range on dimension {d}",
                              expected=f"an index in [{-n}, {n}) for shape {s}", got=it)
            d += 1
    return out


@register_op("StridedSlice", attrs=_SPEC)
class StridedSliceOp(OpDef):
    aliases_input = True

    def infer(self, b):
        return [(b.dtype(0), _sliced_shape(b))]

    def prepare(self, ctx):
        ctx.index = _index_tuple(ctx.attrs)

    def forward(self, xp, ctx, x):
        return x[ctx.index]

    def gradient(self, op, g):
        return [_strided_slice_grad(g, op.inputs[0], _spec_of(op))]


@register_op("StridedSliceGrad", attrs=_SPEC)
class StridedSliceGradOp(OpDef):
    """Write a strided slice's gradient into zeros of the sliced input's runtime shape."""
    host_inputs = (1,)

    def infer(self, b):
        return [(b.dtype(0), math_ops.shape_from_tensor(b.inputs[1]))]

    def prepare(self, ctx):
        ctx.index = _index_tuple(ctx.attrs)

    def forward(self, xp, ctx, g, shape):
        out = xp.zeros(tuple(int(d) for d in shape), dtype=g.dtype)
        out[ctx.index] = g
        return out

    def gradient(self, op, g):
        return [apply_op("StridedSlice", [g], _spec_of(op)).outputs[0], None]


def _spec_of(op) -> dict:
    return {k: op.get_attr(k) for k in _SPEC}


def _strided_slice_grad(g, x, spec) -> Tensor:
    return apply_op("StridedSliceGrad", [g, math_ops.shape(x)], spec).outputs[0]


def strided_slice(input_, begin, end, strides=None, begin_mask=0, end_mask=0,
                  ellipsis_mask=0, new_axis_mask=0, shrink_axis_mask=0,
                  name="strided_slice") -> Tensor:
    """Return ``input_[begin:end:strides]`` per dimension, with TensorFlow's bit masks."""
    begin = static_ints(begin, "strided_slice begin").reshape(-1).tolist()
    end = static_ints(end, "strided_slice end").reshape(-1).tolist()
    strides = [1] * len(begin) if strides is None else \
        static_ints(strides, "strided_slice strides").reshape(-1).tolist()
    masks = dict(zip(_MASKS, (begin_mask, end_mask, ellipsis_mask, new_axis_mask,
                              shrink_axis_mask)))
    return apply_op("StridedSlice", [convert_to_tensor(input_)],
                    {"begin": begin, "end": end, "strides": strides,
                     **{k: int(v) for k, v in masks.items()}}, name=name).outputs[0]


def _index_int(tensor, value) -> int:
    if isinstance(value, Tensor):
        known = const_value(value)
        value = known if known is not None and np.ndim(known) == 0 else value
    if isinstance(value, (int, np.integer, np.ndarray)) and not isinstance(value, bool) and \
            np.ndim(value) == 0 and np.asarray(value).dtype.kind in "iu":
        return int(value)
    raise errors.InvalidArgumentError(
        f"Unsupported index into tensor '{tensor.name}': expected an int, a slice of ints, "
        f"Ellipsis or None (newaxis), got {value!r}; use mf.gather for index tensors")


def _getitem(tensor: Tensor, key) -> Tensor:
    """Return ``tensor[key]``: ints (dropping the dim), slices with steps, Ellipsis, None."""
    spec = {"begin": [], "end": [], "strides": [], **dict.fromkeys(_MASKS, 0)}
    for i, item in enumerate(key if isinstance(key, tuple) else (key,)):
        bit, start, stop, step = 1 << i, 0, 0, 1
        if item is Ellipsis:
            spec["ellipsis_mask"] |= bit
        elif item is None:
            spec["new_axis_mask"] |= bit
        elif isinstance(item, builtins.slice):
            if item.start is None:
                spec["begin_mask"] |= bit
            else:
                start = _index_int(tensor, item.start)
            if item.stop is None:
                spec["end_mask"] |= bit
            else:
                stop = _index_int(tensor, item.stop)
            step = 1 if item.step is None else _index_int(tensor, item.step)
        else:
            start = _index_int(tensor, item)
            stop = start + 1
            spec["shrink_axis_mask"] |= bit
        spec["begin"].append(start)
        spec["end"].append(stop)
        spec["strides"].append(step)
    return apply_op("StridedSlice", [tensor], spec, name="strided_slice").outputs[0]


Tensor.__getitem__ = _getitem


# -- reverse ------------------------------------------------------------------------------

def reverse(tensor, axis, name=None) -> Tensor:
    """Return ``tensor`` with the order of its entries reversed along each dimension in
    ``axis`` (a list; negative counts from the end), as TensorFlow's ``tf.reverse``.

    A strided slice with stride -1 on those dimensions: a view, whose gradient is the
    same reversal. Without a known rank the axes must all be >= 0 or all < 0.

    Raises:
        InvalidArgumentError: ``axis`` not a list of ints known when the graph is built,
            an axis out of range or named twice.
    """
    x = convert_to_tensor(tensor)
    axes = static_ints(axis, "reverse axis")
    if axes.ndim != 1:
        raise errors.InvalidArgumentError(
            f"reverse: axis must be a list of axes (rank 1), got {axis!r}")
    axes = axes.tolist()
    rank = x.shape.ndims
    if rank is not None:
        bad = [a for a in axes if not -rank <= a < rank]
        if bad:
            raise errors.InvalidArgumentError(
                f"reverse: axis {bad[0]} is out of range for '{x.name}' of shape {x.shape}: "
                f"expected axes in [{-rank}, {rank})")
        axes = [a % rank for a in axes]
    elif min(axes, default=0) < 0 <= max(axes, default=-1):
        raise errors.InvalidArgumentError(
            f"reverse: axes {axes} mix negative and non-negative ones, which needs the rank "
            f"of '{x.name}' (unknown) when the graph is built")
    if len(set(axes)) != len(axes):
        twice = next(a for a in axes if axes.count(a) > 1)
        raise errors.InvalidArgumentError(f"reverse: axis {twice} is given more than once")
    if not axes:
        return identity_op(x, name or "ReverseV2")
    if min(axes) >= 0:
        dims = list(range(max(axes) + 1))
        spec = {"begin": [0] * len(dims), "end": [0] * len(dims),
                "strides": [-1 if d in axes else 1 for d in dims]}
        full = (1 << len(dims)) - 1
        spec.update(begin_mask=full, end_mask=full)
    else:
        dims = list(range(min(axes), 0))       # after a leading ellipsis
        spec = {"begin": [0] * (len(dims) + 1), "end": [0] * (len(dims) + 1),
                "strides": [1] + [-1 if d in axes else 1 for d in dims]}
        full = ((1 << (len(dims) + 1)) - 1) & ~1
        spec.update(begin_mask=full, end_mask=full, ellipsis_mask=1)
    return apply_op("StridedSlice", [x], spec, name=name or "ReverseV2").outputs[0]


# -- slice --------------------------------------------------------------------------------

@register_op("Slice", attrs={"begin": REQUIRED, "size": REQUIRED})
class SliceOp(OpDef):
    aliases_input = True

    def infer(self, b):
        s, begin, size = b.shape(0), list(b.attrs["begin"]), list(b.attrs["size"])
        n = len(begin) if s.ndims is None else s.ndims
        if len(begin) != n or len(size) != n:
            raise b.error("slice needs one begin and size per dimension",
                          expected=f"{n} of each for shape {s}", got=f"begin={begin}, size={size}")
        dims = s.as_list() if s.ndims is not None else [None] * n
        out = []
        for i, (start, length, d) in enumerate(zip(begin, size, dims)):
            if start < 0 or length < -1 or (d is not None and start + max(length, 0) > d):
                raise b.error(f"Slice out of range on dimension {i}",
                              expected=f"0 <= begin, -1 <= size, begin + size <= "
                                       f"{'dim' if d is None else d} (shape {s})",
                              got=f"begin={start}, size={length}")
            out.append(length if length != -1 else (None if d is None else d - start))
        return [(b.dtype(0), out)]

    def prepare(self, ctx):
        ctx.index = tuple(builtins.slice(start, None if length == -1 else start + length)
                          for start, length in zip(ctx.attrs["begin"], ctx.attrs["size"]))

    def forward(self, xp, ctx, x):
        begin, size = ctx.attrs["begin"], ctx.attrs["size"]
        if x.ndim != len(begin) or any(start + max(length, 0) > dim for start, length, dim
                                       in zip(begin, size, x.shape)):
            raise kernel_error(ctx, "Slice out of range", got=f"shape {x.shape}",
                               expected=f"a shape holding begin={begin}, size={size}")
        return x[ctx.index]

    def gradient(self, op, g):
        begin, size = op.get_attr("begin"), op.get_attr("size")
        spec = {"begin": list(begin), "strides": [1] * len(begin),
                "end": [start + max(length, 0) for start, length in zip(begin, size)],
                "end_mask": sum(1 << i for i, length in enumerate(size) if length == -1)}
        return [_strided_slice_grad(g, op.inputs[0], spec)]


def slice(input_, begin, size, name=None) -> Tensor:
    """Return the block of ``input_`` starting at ``begin`` with ``size`` (-1: to the end)."""
    begin = static_ints(begin, "slice begin").reshape(-1).tolist()
    size = static_ints(size, "slice size").reshape(-1).tolist()
    return apply_op("Slice", [convert_to_tensor(input_)], {"begin": begin, "size": size},
                    name=name).outputs[0]


# -- split / unstack ----------------------------------------------------------------------

class _SplitBase(OpDef):
    """Split input 0 along ``axis``; a subclass's ``sizes(attrs, dim)`` gives the pieces
    (None when ``dim`` cannot be split that way)."""

    tuple_outputs = True
    aliases_input = True

    def infer(self, b):
        s = b.shape(0)
        n = self.count(b)
        if s.ndims is None:
            return [(b.dtype(0), TensorShape(None))] * n
        if s.ndims == 0:
            raise b.error("Cannot split a scalar", expected="rank >= 1", got=s)
        axis = normalize_axis(b, b.attrs["axis"], s.ndims)
        sizes = self.sizes(b.attrs, s[axis])
        if sizes is None:
            raise b.error("Cannot split", expected=self.expected(b.attrs),
                          got=f"dimension {s[axis]} of shape {s}")
        dims = s.as_list()
        return [(b.dtype(0), dims[:axis] + [d] + dims[axis + 1:]) for d in sizes]

    def forward(self, xp, ctx, x):
        axis = runtime_axis(ctx, ctx.attrs["axis"], x.ndim)
        sizes = self.sizes(ctx.attrs, x.shape[axis])
        if sizes is None:
            raise kernel_error(ctx, "Cannot split", expected=self.expected(ctx.attrs),
                            got=f"dimension {x.shape[axis]} of shape {x.shape}")
        return tuple(xp.split(x, np.cumsum(sizes)[:-1].tolist(), axis=axis))

    def gradient(self, op, *gs):
        gs = [g if g is not None else math_ops.zeros_like(o) for g, o in zip(gs, op.outputs)]
        return [concat(gs, op.get_attr("axis"))]


@register_op("Split", attrs={"num_split": REQUIRED, "axis": 0})
class SplitOp(_SplitBase):
    def count(self, b):
        if b.attrs["num_split"] < 1:
            raise b.error("Invalid num_split", expected=">= 1", got=b.attrs["num_split"])
        return b.attrs["num_split"]

    @staticmethod
    def sizes(attrs, dim):
        n = attrs["num_split"]
        if dim is None:
            return [None] * n
        return None if dim % n else [dim // n] * n

    @staticmethod
    def expected(attrs):
        return f"a dimension divisible by {attrs['num_split']}"


@register_op("SplitV", attrs={"size_splits": REQUIRED, "axis": 0})
class SplitVOp(_SplitBase):
    def count(self, b):
        sizes = list(b.attrs["size_splits"])
        if not sizes or any(d < -1 for d in sizes) or sizes.count(-1) > 1:
            raise b.error("Invalid size_splits", expected="sizes >= 0 with at most one -1",
                          got=sizes)
        return len(sizes)

    @staticmethod
    def sizes(attrs, dim):
        sizes = list(attrs["size_splits"])
        rest = None if dim is None else dim - sum(d for d in sizes if d != -1)
        if rest is not None and (rest < 0 or (rest and -1 not in sizes)):
            return None
        return [rest if d == -1 else d for d in sizes]

    @staticmethod
    def expected(attrs):
        sizes = list(attrs["size_splits"])
        return f"a dimension of size {'at least ' if -1 in sizes else ''}" \
            f"{sum(d for d in sizes if d != -1)} for size_splits {sizes}"


def split(value, num_or_size_splits, axis=0, num=None, name="split") -> list:
    """Split ``value`` along ``axis`` into N equal pieces or pieces of the given sizes.

    ``num_or_size_splits`` is an int N or a list of sizes (one may be -1: the rest).
    ``num``, TF1's count of pieces for sizes of unknown length, may be given; the sizes
    are known here, so it must be their count. Returns a list of Tensors.
    """
    x = convert_to_tensor(value)
    axis = static_axis(axis, "split axis")
    spec = static_ints(num_or_size_splits, "split num_or_size_splits")
    if spec.ndim == 0:
        return apply_op("Split", [x], {"num_split": int(spec), "axis": axis},
                        name=name).outputs
    if num is not None and static_axis(num, "split num") != spec.size:
        raise errors.InvalidArgumentError(
            f"split '{name}': num={num} does not match the {spec.size} sizes "
            f"{spec.tolist()} in num_or_size_splits")
    return apply_op("SplitV", [x], {"size_splits": spec.tolist(), "axis": axis},
                    name=name).outputs


@register_op("Unpack", attrs={"num": None, "axis": 0})
class UnpackOp(OpDef):
    tuple_outputs = True
    aliases_input = True

    def infer(self, b):
        s, num = b.shape(0), b.attrs["num"]
        if s.ndims == 0:
            raise b.error("Cannot unstack a scalar", expected="rank >= 1", got=s)
        axis = None if s.ndims is None else normalize_axis(b, b.attrs["axis"], s.ndims)
        dim = None if axis is None else s[axis]
        if num is None and dim is None:
            raise b.error("Cannot infer the number of outputs of unstack",
                          expected=f"a known dimension {b.attrs['axis']} or num=", got=s)
        if num is not None and dim is not None and num != dim:
            raise b.error("unstack num does not match the dimension",
                          expected=f"num={dim} for shape {s}", got=num)
        num = dim if num is None else num
        if axis is None:
            return [(b.dtype(0), TensorShape(None))] * num
        return [(b.dtype(0), s.as_list()[:axis] + s.as_list()[axis + 1:])] * num

    def forward(self, xp, ctx, x):
        axis = runtime_axis(ctx, ctx.attrs["axis"], x.ndim)
        if x.shape[axis] != len(ctx.op.outputs):
            raise kernel_error(ctx, "Cannot unstack", got=f"shape {x.shape}",
                            expected=f"dimension {axis} of size {len(ctx.op.outputs)}")
        return tuple(xp.moveaxis(x, axis, 0))

    def gradient(self, op, *gs):
        gs = [g if g is not None else math_ops.zeros_like(o) for g, o in zip(gs, op.outputs)]
        return [stack(gs, axis=op.get_attr("axis"))]


def unstack(value, num=None, axis=0, name="unstack") -> list:
    """Return the slices of ``value`` along ``axis`` as a list (that dimension removed)."""
    x = convert_to_tensor(value)
    return apply_op("Unpack", [x], {"num": None if num is None else
                                    static_axis(num, "unstack num"),
                                    "axis": static_axis(axis, "unstack axis")},
                    name=name).outputs


# -- one_hot ------------------------------------------------------------------------------

@register_op("OneHot", attrs={"depth": REQUIRED, "on_value": 1, "off_value": 0, "axis": -1,
                              "dtype": dtypes.float32})
class OneHotOp(OpDef):
    gradient = None

    def infer(self, b):
        require_dtype(b, 0, is_index, "indices")
        dt, depth = b.attrs["dtype"], b.attrs["depth"]
        if depth < 0:
            raise b.error("Invalid depth", expected="depth >= 0", got=depth)
        for key in ("on_value", "off_value"):
            value = b.attrs[key]
            if not dt.is_floating and value != int(value):
                raise b.error(f"Invalid {key}", expected=f"a value representable as {dt.name}",
                              got=value)
        if b.attrs["axis"] < -1:        # TensorFlow's rule: -1 (the default) or an index
            raise b.error("Invalid axis", expected="-1 or an axis in [0, rank]",
                          got=b.attrs["axis"])
        s = b.shape(0)
        if s.ndims is None:
            return [(dt, TensorShape(None))]
        axis = normalize_axis(b, b.attrs["axis"], s.ndims + 1)
        return [(dt, s.as_list()[:axis] + [depth] + s.as_list()[axis:])]

    def forward(self, xp, ctx, indices):
        depth = ctx.attrs["depth"]
        axis = runtime_axis(ctx, ctx.attrs["axis"], indices.ndim + 1)
        classes = xp.arange(depth).reshape([depth if i == axis else 1
                                            for i in range(indices.ndim + 1)])
        # Indices outside [0, depth) match no class, so their rows are all off_value.
        hot = xp.expand_dims(indices, axis) == classes
        return xp.where(hot, ctx.attrs["on_value"], ctx.attrs["off_value"]).astype(
            ctx.attrs["dtype"].np_dtype, copy=False)


def one_hot(indices, depth, on_value=None, off_value=None, axis=None, dtype=None,
            name="one_hot") -> Tensor:
    """Return a tensor with ``on_value`` where the new ``axis`` (default last) equals an
    index and ``off_value`` (default 0) elsewhere; out-of-range indices give all off.

    Without ``dtype`` the result has the dtype of ``on_value`` (else of ``off_value``,
    else float32), as in TensorFlow: ``one_hot(i, 3, on_value=5, off_value=0)`` is int32.

    Raises:
        InvalidArgumentError: ``on_value`` and ``off_value`` of different dtypes and no
            ``dtype``; values ``dtype`` cannot hold; an axis below -1.
    """
    given = {key: value for key, value in (("on_value", on_value), ("off_value", off_value))
             if value is not None}
    if dtype is None:
        kinds = {key: value.dtype if isinstance(value, Tensor) else python_dtype(value)
                 for key, value in given.items()}
        if len(set(kinds.values())) > 1:
            raise errors.InvalidArgumentError(
                f"one_hot '{name}': on_value and off_value must have the same dtype, got "
                f"{kinds['on_value'].name} and {kinds['off_value'].name}; give dtype")
        dtype = next(iter(kinds.values()), dtypes.float32)
    values = {key: static_scalar(given.get(key, default), f"one_hot {key}")
              for key, default in (("on_value", 1), ("off_value", 0))}
    return apply_op("OneHot", [convert_to_tensor(indices)],
                    {"depth": int(static_ints(depth, "one_hot depth")),
                     "axis": -1 if axis is None else static_axis(axis, "one_hot axis"),
                     "dtype": dtypes.as_dtype(dtype), **values}, name=name).outputs[0]
