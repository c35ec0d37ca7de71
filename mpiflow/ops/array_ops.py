"""Shape and layout ops: reshape, concat, transpose, stack, expand_dims, squeeze, tile,
pad, size and rank.

Taking parts of a tensor (slice, strided slice and ``Tensor.__getitem__``, split, unstack,
one_hot) lives in ``indexing_ops.py``, which imports this module; gradients here that need
its ops create them by type name. Layout attrs (perm, multiples, paddings, axes) are plain
lists fixed when the graph is built, so shape functions compute exact static shapes.
"""

from __future__ import annotations

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.graph import Tensor
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops import math_ops, reduction_ops
from mpiflow.ops.constant_ops import (
    constant, convert_list_input, convert_to_tensor, holds_tensor)
from mpiflow.ops.registry import (
    REQUIRED, OpDef, apply_op, const_value, normalize_axis, register_op, require_dtype,
    same_dtype)


def static_ints(value, what: str) -> np.ndarray:
    """Return ``value`` (ints, nested lists, an array or a Const tensor) as an int64 array.

    Raises:
        InvalidArgumentError: ``value`` is a tensor computed at run time.
    """
    if isinstance(value, Tensor) or callable(getattr(value, "_as_tensor", None)):
        tensor = convert_to_tensor(value)
        known = const_value(tensor)
        if known is None:
            raise errors.InvalidArgumentError(
                f"{what} must be known when the graph is built: expected a Python value or a "
                f"constant, got the computed tensor '{tensor.name}'")
        value = known
    elif isinstance(value, (list, tuple)):
        value = _constant_items(value, what)
    try:
        array = np.asarray(value)
    except ValueError:      # ragged nesting
        array = np.asarray(None)
    if array.size and array.dtype.kind not in "iu":
        raise errors.InvalidArgumentError(f"{what}: expected integers, got {value!r}")
    return array.astype(np.int64)


def _constant_items(value, what: str):
    """Nested lists ``value`` with each constant tensor in them replaced by its value."""
    if isinstance(value, (list, tuple)):
        return [_constant_items(v, what) for v in value]
    if isinstance(value, Tensor) or callable(getattr(value, "_as_tensor", None)):
        return static_ints(value, what)
    return value


def static_scalar(value, what: str):
    """Return ``value`` (a Python or numpy scalar, or a scalar Const) as a Python scalar."""
    known = const_value(convert_to_tensor(value)) if isinstance(value, Tensor) else value
    if known is None or np.ndim(known) != 0:
        raise errors.InvalidArgumentError(
            f"{what} must be a scalar known when the graph is built, got {value!r}")
    return np.asarray(known).item()


def static_axis(value, what: str) -> int:
    """Return an axis (an int, numpy's too, or an integer scalar constant) as a Python int.

    Axes are attrs fixed when the graph is built: TensorFlow also takes a tensor computed
    at run time, which mpiflow refuses, naming it (``static_ints``); so is anything but a
    single integer.
    """
    array = static_ints(value, what)
    if array.ndim != 0:
        raise errors.InvalidArgumentError(f"{what}: expected a single int, got {value!r}")
    return int(array)


def kernel_error(ctx, what, expected=None, got=None):
    """Return an InvalidArgumentError naming the op a kernel runs for (bad runtime input)."""
    return errors.op_error(errors.InvalidArgumentError, what, ctx.op, expected, got)


def runtime_axis(ctx, axis: int, ndims: int) -> int:
    """Return ``axis`` in [0, ndims) for a runtime rank (the static one may be unknown)."""
    if not -ndims <= axis < ndims:
        raise kernel_error(ctx, "Axis out of range", expected=f"axis in [{-ndims}, {ndims})",
                           got=axis)
    return axis % ndims


@register_op("Reshape")
class ReshapeOp(OpDef):
    hands_over_input = True
    host_inputs = (1,)       # the shape
    aliases_input = True

    def infer(self, b):
        require_dtype(b, 1, (dtypes.int32, dtypes.int64), "shape")
        if b.inputs[1].op.type != "Const":
            return [(b.dtype(0), math_ops.shape_from_tensor(b.inputs[1]))]
        value = [int(d) for d in b.inputs[1].op.get_attr("value").reshape(-1).tolist()]
        if sum(d == -1 for d in value) > 1 or any(d < -1 for d in value):
            raise b.error("Invalid shape for reshape",
                          expected="dimensions >= 0 and at most one -1", got=value)
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
    if isinstance(shape, Tensor) or holds_tensor(shape):
        s = convert_to_tensor(shape)        # [tf.shape(x)[0], -1] packs, as in TF
    else:
        s = constant(np.asarray(shape, dtype=np.int32), name="shape")
    return apply_op("Reshape", [x, s], name=name).outputs[0]


@register_op("ConcatV2", attrs={"axis": 0})
class ConcatOp(OpDef):
    def infer(self, b):
        if not b.inputs:
            raise b.error("concat needs at least one input")
        dt = same_dtype(b)
        shapes = [b.shape(i) for i in range(len(b.inputs))]
        ranked = [s for s in shapes if s.ndims is not None]
        if not ranked:
            return [(dt, TensorShape(None))]
        nd = ranked[0].ndims
        # An input of unknown rank has the others' (TensorFlow's rule): its dims unknown.
        shapes = [s if s.ndims is not None else TensorShape([None] * nd) for s in shapes]
        if any(s.ndims != nd for s in shapes):
            raise b.error("concat inputs must have the same rank",
                          got=", ".join(str(s) for s in shapes))
        if nd == 0:
            raise b.error("Cannot concat scalars", expected="inputs of rank >= 1",
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
    host_inputs = range(1, 1 << 20)   # the inputs' shapes
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
    """Join tensors along ``axis`` (numbers among them take the first tensor's dtype)."""
    values = convert_list_input(values)
    if len(values) == 1:
        return values[0]
    return apply_op("ConcatV2", values, {"axis": static_axis(axis, "concat axis")},
                    name=name).outputs[0]


# -- transpose ---------------------------------------------------------------------------

@register_op("Transpose", attrs={"perm": REQUIRED})
class TransposeOp(OpDef):
    aliases_input = True

    def infer(self, b):
        s, perm = b.shape(0), list(b.attrs["perm"])
        n = len(perm) if s.ndims is None else s.ndims
        if sorted(perm) != list(range(n)):
            raise b.error("Invalid perm for transpose",
                          expected=f"a permutation of 0..{n - 1} (input shape {s})", got=perm)
        if s.ndims is None:
            return [(b.dtype(0), [None] * n)]
        return [(b.dtype(0), [s[p] for p in perm])]

    def forward(self, xp, ctx, x):
        return xp.transpose(x, ctx.attrs["perm"])

    def gradient(self, op, g):
        inverse = [int(i) for i in np.argsort(op.get_attr("perm"))]
        return [transpose(g, inverse)]


def transpose(a, perm=None, name="transpose", conjugate=False) -> Tensor:
    """Return ``a`` with its dimensions permuted by ``perm`` (default: reversed); a view."""
    x = convert_to_tensor(a)
    if perm is None:
        if x.shape.ndims is None:
            raise errors.InvalidArgumentError(
                f"transpose of '{x.name}': perm=None needs a known rank, got shape {x.shape}")
        perm = list(reversed(range(x.shape.ndims)))
    perm = static_ints(perm, "transpose perm").reshape(-1).tolist()
    return apply_op("Transpose", [x], {"perm": perm}, name=name).outputs[0]


# -- stack --------------------------------------------------------------------------------

@register_op("Pack", attrs={"axis": 0})
class PackOp(OpDef):
    def infer(self, b):
        if not b.inputs:
            raise b.error("stack needs at least one input")
        dt = same_dtype(b)
        merged = b.shape(0)
        for i in range(1, len(b.inputs)):
            if not merged.is_compatible_with(b.shape(i)):
                raise b.error("stack inputs must have the same shape", expected=merged,
                              got=f"{b.shape(i)} for input {i}")
            merged = merged.merge_with(b.shape(i))
        if merged.ndims is None:
            return [(dt, TensorShape(None))]
        axis = normalize_axis(b, b.attrs["axis"], merged.ndims + 1)
        dims = merged.as_list()
        return [(dt, dims[:axis] + [len(b.inputs)] + dims[axis:])]

    def forward(self, xp, ctx, *xs):
        return xp.stack(xs, axis=ctx.attrs["axis"])

    def gradient(self, op, g):
        # Unpack lives in indexing_ops.py (which imports this module), hence by type name.
        return apply_op("Unpack", [g], {"num": len(op.inputs),
                                        "axis": op.get_attr("axis")}).outputs


def stack(values, axis=0, name="stack") -> Tensor:
    """Join same-shaped tensors along a new dimension ``axis`` (numbers among them take
    the first tensor's dtype, or the whole list's where there is none)."""
    values = convert_list_input(values, whole=True)
    return apply_op("Pack", values, {"axis": static_axis(axis, "stack axis")},
                    name=name).outputs[0]


# -- expand_dims / squeeze ---------------------------------------------------------------

@register_op("ExpandDims", attrs={"axis": REQUIRED})
class ExpandDimsOp(OpDef):
    aliases_input = True

    def infer(self, b):
        s = b.shape(0)
        if s.ndims is None:
            return [(b.dtype(0), TensorShape(None))]
        axis = normalize_axis(b, b.attrs["axis"], s.ndims + 1)
        return [(b.dtype(0), s.as_list()[:axis] + [1] + s.as_list()[axis:])]

    def forward(self, xp, ctx, x):
        return xp.expand_dims(x, ctx.attrs["axis"])

    def gradient(self, op, g):
        return [reshape(g, math_ops.shape(op.inputs[0]))]


def expand_dims(input, axis=None, name=None, dim=None) -> Tensor:
    """Insert a dimension of size 1 at ``axis`` (negative counts from the end)."""
    axis = dim if axis is None else axis
    x = convert_to_tensor(input)
    return apply_op("ExpandDims", [x], {"axis": static_axis(axis, "expand_dims axis")},
                    name=name).outputs[0]


@register_op("Squeeze", attrs={"axis": None})
class SqueezeOp(OpDef):
    aliases_input = True

    def infer(self, b):
        s, axis = b.shape(0), b.attrs["axis"]
        if s.ndims is None:
            return [(b.dtype(0), TensorShape(None))]
        if axis is None:
            # An unknown dimension might be 1 at run time, so the rank is unknown too.
            if not s.is_fully_defined():
                return [(b.dtype(0), TensorShape(None))]
            return [(b.dtype(0), [d for d in s.as_list() if d != 1])]
        axes = {normalize_axis(b, a, s.ndims) for a in axis}
        for a in sorted(axes):
            if s[a] is not None and s[a] != 1:
                raise b.error(f"Cannot squeeze dimension {a}", expected="a dimension of size 1",
                              got=f"{s[a]} (shape {s})")
        return [(b.dtype(0), [d for i, d in enumerate(s.as_list()) if i not in axes])]

    def forward(self, xp, ctx, x):
        axis = ctx.attrs["axis"]
        if axis is not None:
            axis = tuple(runtime_axis(ctx, a, x.ndim) for a in axis)
            bad = [a for a in axis if x.shape[a] != 1]
            if bad:
                raise kernel_error(ctx, f"Cannot squeeze dimension {bad[0]}",
                                expected="a dimension of size 1",
                                got=f"{x.shape[bad[0]]} (shape {x.shape})")
        return xp.squeeze(x, axis=axis)

    def gradient(self, op, g):
        return [reshape(g, math_ops.shape(op.inputs[0]))]


def squeeze(input, axis=None, name=None, squeeze_dims=None) -> Tensor:
    """Remove dimensions of size 1 (all of them, or those listed in ``axis``; an empty
    list, TensorFlow's default, means all of them too)."""
    axis = squeeze_dims if axis is None else axis
    if axis is not None:
        axis = static_ints(axis, "squeeze axis").reshape(-1).tolist() or None
    return apply_op("Squeeze", [convert_to_tensor(input)], {"axis": axis},
                    name=name).outputs[0]


# -- tile --------------------------------------------------------------------------------

@register_op("Tile", attrs={"multiples": REQUIRED})
class TileOp(OpDef):
    def infer(self, b):
        s, multiples = b.shape(0), list(b.attrs["multiples"])
        if s.ndims is not None and s.ndims != len(multiples):
            raise b.error("tile multiples must have one entry per dimension",
                          expected=f"{s.ndims} multiples for shape {s}", got=multiples)
        if any(m < 0 for m in multiples):
            raise b.error("Invalid tile multiples", expected="multiples >= 0", got=multiples)
        dims = s.as_list() if s.ndims is not None else [None] * len(multiples)
        return [(b.dtype(0), [None if d is None else d * m for d, m in zip(dims, multiples)])]

    def forward(self, xp, ctx, x):
        multiples = ctx.attrs["multiples"]
        if x.ndim != len(multiples):
            raise kernel_error(ctx, "tile multiples must have one entry per dimension",
                            expected=f"{x.ndim} multiples for shape {x.shape}", got=multiples)
        return xp.tile(x, tuple(multiples))

    def gradient(self, op, g):
        # View g as [m0, d0, m1, d1, ...] and sum over the tile axes m_i.
        x, multiples = op.inputs[0], list(op.get_attr("multiples"))
        if x.shape.is_fully_defined():     # a constant shape, so the gradient's is known
            pairs = [d for pair in zip(multiples, x.shape.as_list()) for d in pair]
        else:
            pairs = reshape(stack([constant(np.asarray(multiples, np.int32)),
                                   math_ops.shape(x)], 1), [-1])
        tiles = reshape(g, pairs)
        return [reduction_ops.reduce_sum(tiles, axis=list(range(0, 2 * len(multiples), 2)))]


def tile(input, multiples, name=None) -> Tensor:
    """Repeat ``input`` ``multiples[i]`` times along each dimension i."""
    multiples = static_ints(multiples, "tile multiples").reshape(-1).tolist()
    return apply_op("Tile", [convert_to_tensor(input)], {"multiples": multiples},
                    name=name).outputs[0]


# -- pad ---------------------------------------------------------------------------------

@register_op("Pad", attrs={"paddings": REQUIRED, "constant_values": 0})
class PadOp(OpDef):
    def infer(self, b):
        paddings = b.attrs["paddings"]
        dims = _check_paddings(b, b.shape(0), paddings)
        value = b.attrs["constant_values"]
        if not b.dtype(0).is_floating and value != int(value):
            raise b.error("Invalid constant_values", got=value,
                          expected=f"a value representable as {b.dtype(0).name}")
        return [(b.dtype(0), [None if d is None else d + lo + hi
                              for d, (lo, hi) in zip(dims, paddings)])]

    def forward(self, xp, ctx, x):
        paddings = [tuple(p) for p in ctx.attrs["paddings"]]
        if x.ndim != len(paddings):
            raise kernel_error(ctx, "Invalid paddings", got=ctx.attrs["paddings"],
                            expected=f"{x.ndim} pairs [before, after] for shape {x.shape}")
        return xp.pad(x, paddings, mode="constant",
                      constant_values=ctx.attrs["constant_values"])

    def gradient(self, op, g):
        # The adjoint of padding slices the interior back out: g[lo:-hi] on every axis.
        # StridedSlice lives in indexing_ops.py (which imports this module), hence by name.
        paddings = op.get_attr("paddings")
        attrs = {"begin": [lo for lo, _ in paddings], "end": [-hi for _, hi in paddings],
                 "strides": [1] * len(paddings),
                 "end_mask": sum(1 << i for i, (_, hi) in enumerate(paddings) if hi == 0)}
        return [apply_op("StridedSlice", [g], attrs).outputs[0]]


def _check_paddings(b, s, paddings):
    """Check ``paddings`` is one [before, after] pair >= 0 per dimension of ``s``; return
    the dimensions (None where unknown)."""
    n = len(paddings) if s.ndims is None else s.ndims
    if len(paddings) != n or any(not isinstance(p, (list, tuple)) or len(p) != 2 or
                                 min(p) < 0 for p in paddings):
        raise b.error("Invalid paddings", got=paddings,
                      expected=f"{n} pairs [before, after] >= 0 for shape {s}")
    return s.as_list() if s.ndims is not None else [None] * n


# The most padding a mirror mode takes on each side of a dimension of size d: REFLECT
# leaves the edge out of the mirror (d - 1), SYMMETRIC repeats it (d).
_MIRROR_LIMIT = {"REFLECT": 1, "SYMMETRIC": 0}


def _mirror_error(mode, paddings, dims):
    """What is wrong with mirror-padding ``dims`` by ``paddings``, or None."""
    cut = _MIRROR_LIMIT[mode]
    for i, ((lo, hi), d) in enumerate(zip(paddings, dims)):
        if d is not None and max(lo, hi) > d - cut:
            return (f"{mode} paddings must be at most the dimension size"
                    f"{' - 1' if cut else ''}", f"dimension {i}: paddings [{lo}, {hi}] "
                    f"for size {d}")
    return None


@register_op("MirrorPad", attrs={"paddings": REQUIRED, "mode": REQUIRED})
class MirrorPadOp(OpDef):
    """Pad with the input mirrored at its edges: REFLECT without repeating the edge
    ([1, 2, 3] -> [3, 2, 1, 2, 3, 2, 1]), SYMMETRIC with it ([2, 1, 1, 2, 3, 3, 2])."""

    def infer(self, b):
        if b.attrs["mode"] not in _MIRROR_LIMIT:
            raise b.error("Invalid mirror pad mode", expected="'REFLECT' or 'SYMMETRIC'",
                          got=b.attrs["mode"])
        paddings = b.attrs["paddings"]
        dims = _check_paddings(b, b.shape(0), paddings)
        wrong = _mirror_error(b.attrs["mode"], paddings, dims)
        if wrong:
            raise b.error(wrong[0], got=wrong[1])
        return [(b.dtype(0), [None if d is None else d + lo + hi
                              for d, (lo, hi) in zip(dims, paddings)])]

    def forward(self, xp, ctx, x):
        paddings, mode = ctx.attrs["paddings"], ctx.attrs["mode"]
        if x.ndim != len(paddings):
            raise kernel_error(ctx, "Invalid paddings", got=paddings,
                               expected=f"{x.ndim} pairs [before, after] for shape {x.shape}")
        wrong = _mirror_error(mode, paddings, x.shape)
        if wrong:
            raise kernel_error(ctx, wrong[0], got=wrong[1])
        return xp.pad(x, [tuple(p) for p in paddings], mode=mode.lower())

    def gradient(self, op, g):
        return [apply_op("MirrorPadGrad", [g], {"paddings": op.get_attr("paddings"),
                                                "mode": op.get_attr("mode")}).outputs[0]]


@register_op("MirrorPadGrad", attrs={"paddings": REQUIRED, "mode": REQUIRED})
class MirrorPadGradOp(OpDef):
    """MirrorPad's adjoint: the padded gradient folded back onto the input, each mirrored
    entry's gradient added to the entry it copies."""

    def infer(self, b):
        dims = _check_paddings(b, b.shape(0), b.attrs["paddings"])
        return [(b.dtype(0), [None if d is None else d - lo - hi
                              for d, (lo, hi) in zip(dims, b.attrs["paddings"])])]

    def forward(self, xp, ctx, g):
        cut = _MIRROR_LIMIT[ctx.attrs["mode"]]
        for axis, (lo, hi) in enumerate(ctx.attrs["paddings"]):
            def part(start, stop, step=1):
                return (slice(None),) * axis + (slice(start, stop, step),)
            n = g.shape[axis] - lo - hi
            core = g[part(lo, lo + n)].copy()
            # Output entry lo - 1 - j mirrors input entry cut + j; lo + n + j mirrors
            # n - 1 - cut - j: each side reversed lands on a run of the input.
            if lo:
                core[part(cut, cut + lo)] += xp.flip(g[part(0, lo)], axis)
            if hi:
                core[part(n - cut - hi, n - cut)] += xp.flip(g[part(lo + n, None)], axis)
            g = core
        return g

    def gradient(self, op, g):
        return [apply_op("MirrorPad", [g], {"paddings": op.get_attr("paddings"),
                                            "mode": op.get_attr("mode")}).outputs[0]]


_PAD_MODES = ("CONSTANT", "REFLECT", "SYMMETRIC")


def pad(tensor, paddings, mode="CONSTANT", name=None, constant_values=0) -> Tensor:
    """Pad ``tensor``: ``paddings[i] = [before, after]`` for dimension i, with
    ``constant_values`` (mode "CONSTANT") or the tensor mirrored at its edges ("REFLECT",
    "SYMMETRIC"; any letter case, as TensorFlow).

    Raises:
        InvalidArgumentError: another mode, constant_values other than 0 with a mirror
            mode, or a mirror padding larger than its dimension allows.
    """
    kind = str(mode).upper()
    if kind not in _PAD_MODES:
        raise errors.InvalidArgumentError(
            f"pad: mode must be one of 'CONSTANT', 'REFLECT' or 'SYMMETRIC', got {mode!r}")
    paddings = static_ints(paddings, "pad paddings").tolist()
    value = static_scalar(constant_values, "pad constant_values")
    x = convert_to_tensor(tensor)
    if kind != "CONSTANT":
        if value != 0:
            raise errors.InvalidArgumentError(
                f"pad: constant_values={value!r} is used by mode 'CONSTANT' only, got mode "
                f"{mode!r}")
        return apply_op("MirrorPad", [x], {"paddings": paddings, "mode": kind},
                        name=name).outputs[0]
    return apply_op("Pad", [x], {"paddings": paddings, "constant_values": value},
                    name=name).outputs[0]


# -- sequence_mask -----------------------------------------------------------------------

def sequence_mask(lengths, maxlen=None, dtype=dtypes.bool_, name=None) -> Tensor:
    """Return ``mask[..., j] = j < lengths[...]``: shape ``lengths.shape + [maxlen]``.

    As TensorFlow's: ``maxlen`` defaults to the largest length (known when the graph is
    built where the lengths are constants), positions and lengths are compared in
    ``maxlen``'s dtype (lengths cast to it), and a mask of another ``dtype`` is the bool
    one cast. Built from Range, Less and Cast: no op of its own, and no gradient.
    """
    lengths = convert_to_tensor(lengths)
    if maxlen is None:
        known = const_value(lengths)
        maxlen = reduction_ops.reduce_max(lengths) if known is None else \
            constant(np.max(known, initial=0), dtype=lengths.dtype)
    maxlen = convert_to_tensor(maxlen)
    if maxlen.shape.ndims not in (None, 0):
        raise errors.InvalidArgumentError(
            f"sequence_mask: maxlen must be a scalar, got shape {maxlen.shape}")
    positions = math_ops.range_(0, maxlen, dtype=maxlen.dtype)
    lengths = math_ops.cast(expand_dims(lengths, -1), maxlen.dtype)
    mask = math_ops.less(positions, lengths, name=name)
    return mask if dtypes.as_dtype(dtype) is dtypes.bool_ else math_ops.cast(mask, dtype)


# -- size / rank -------------------------------------------------------------------------

@register_op("Size", attrs={"out_type": dtypes.int32})
class SizeOp(OpDef):
    reads_values = False
    host_outputs = True
    gradient = None

    def infer(self, b):
        return [(b.attrs["out_type"], [])]

    def forward(self, xp, ctx, x):
        return np.asarray(np.size(x), dtype=ctx.attrs["out_type"].np_dtype)


@register_op("Rank")
class RankOp(OpDef):
    reads_values = False
    host_outputs = True
    gradient = None

    def infer(self, b):
        return [(dtypes.int32, [])]

    def forward(self, xp, ctx, x):
        return np.asarray(np.ndim(x), dtype=np.int32)


def size(input, name=None, out_type=dtypes.int32) -> Tensor:
    """Return the number of elements of ``input``; a Const when the static shape is known."""
    x = convert_to_tensor(input)
    out_type = dtypes.as_dtype(out_type)
    n = x.shape.num_elements()
    if n is not None:
        return constant(np.asarray(n, dtype=out_type.np_dtype), name=name or "Size")
    return apply_op("Size", [x], {"out_type": out_type}, name=name).outputs[0]


def rank(input, name=None) -> Tensor:
    """Return the number of dimensions of ``input``; a Const when the rank is known."""
    x = convert_to_tensor(input)
    if x.shape.ndims is not None:
        return constant(np.asarray(x.shape.ndims, dtype=np.int32), name=name or "Rank")
    return apply_op("Rank", [x], name=name).outputs[0]
