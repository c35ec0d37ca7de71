"""Random and fill ops: random_normal, truncated_normal, random_uniform, zeros, ones, fill.

Random kernels draw from a generator owned by the session, seeded from the op's
(graph seed, op seed) exactly as TensorFlow derives them, so a fixed
``set_random_seed`` gives the same values in every process that builds the same graph.
"""

from __future__ import annotations

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.graph import get_default_graph
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops.constant_ops import constant, convert_to_tensor, holds_tensor
from mpiflow.ops.math_ops import shape_from_tensor
from mpiflow.ops.registry import OpDef, apply_op, register_op, require_dtype


class _Random(OpDef):
    stateful = True
    # Drawn into new memory nobody else holds: the scale and shift of an initializer
    # (``random_uniform``'s Mul and Add) write into it, and a large variable it
    # initializes keeps it as its buffer (``Assign``): a table is made once, not thrice.
    fresh_output = True
    host_inputs = (0,)
    gradient = None
    attrs = {"dtype": dtypes.float32, "seed": 0, "seed2": 0}

    def infer(self, b):
        require_dtype(b, 0, lambda dt: dt in (dtypes.int32, dtypes.int64), "shape")
        if not b.attrs["dtype"].is_floating:
            raise b.error("Random values need a floating dtype",
                          expected="bfloat16 or float16/32/64", got=b.attrs["dtype"].name)
        return [(b.attrs["dtype"], shape_from_tensor(b.inputs[0]))]

    def prepare(self, ctx):
        ctx.rng = ctx.env.rng(ctx.op)
        ctx.np_dtype = ctx.attrs["dtype"].np_dtype
        # numpy generators draw float32/float64 directly; float16 is drawn as float32.
        ctx.draw_dtype = ctx.np_dtype if ctx.np_dtype in (np.float32, np.float64) \
            else np.float32

    def forward(self, xp, ctx, shape):
        out = ctx.env.value_empty(tuple(int(d) for d in shape), ctx.draw_dtype)
        self.draw(ctx.rng, out)
        return xp.asarray(out.astype(ctx.np_dtype, copy=False))


@register_op("RandomStandardNormal", attrs=dict(_Random.attrs))
class RandomStandardNormalOp(_Random):
    def draw(self, rng, out):
        rng.standard_normal(out=out, dtype=out.dtype)


@register_op("TruncatedNormal", attrs=dict(_Random.attrs))
class TruncatedNormalOp(_Random):
    def draw(self, rng, out):
        rng.standard_normal(out=out, dtype=out.dtype)
        bad = np.abs(out) > 2
        while bad.any():   # resample outside two standard deviations, as TensorFlow does
            out[bad] = rng.standard_normal(int(bad.sum()), dtype=out.dtype)
            bad = np.abs(out) > 2


@register_op("RandomUniform", attrs=dict(_Random.attrs))
class RandomUniformOp(_Random):
    def draw(self, rng, out):
        rng.random(out=out, dtype=out.dtype)


@register_op("RandomUniformInt", attrs=dict(_Random.attrs, dtype=dtypes.int32))
class RandomUniformIntOp(_Random):
    """Integers drawn uniformly from [minval, maxval) (inputs 1 and 2, scalars of the
    dtype), as TensorFlow's ``random_uniform`` gives for an integer dtype."""

    host_inputs = (0, 1, 2)

    def infer(self, b):
        require_dtype(b, 0, lambda dt: dt in (dtypes.int32, dtypes.int64), "shape")
        dtype = b.attrs["dtype"]
        if dtype not in (dtypes.int32, dtypes.int64):
            raise b.error("Random integers need an int32 or int64 dtype",
                          expected="int32 or int64", got=dtype.name)
        for i, what in ((1, "minval"), (2, "maxval")):
            if b.dtype(i) is not dtype:
                raise b.error(f"{what} has the wrong dtype", expected=dtype.name,
                              got=b.dtype(i).name)
            if b.shape(i).ndims not in (None, 0):
                raise b.error(f"{what} must be a scalar", expected="shape ()",
                              got=b.shape(i))
        return [(dtype, shape_from_tensor(b.inputs[0]))]

    def forward(self, xp, ctx, shape, minval, maxval):
        lo, hi = int(minval), int(maxval)
        if not lo < hi:
            raise errors.op_error(errors.InvalidArgumentError, "Need minval < maxval",
                                  ctx.op, expected="minval < maxval",
                                  got=f"minval {lo}, maxval {hi}")
        out = ctx.rng.integers(lo, hi, size=tuple(int(d) for d in shape),
                               dtype=ctx.np_dtype)
        return xp.asarray(out)


@register_op("Fill")
class FillOp(OpDef):
    host_inputs = (0,)
    # A large constant initializer (an Adagrad accumulator's 0.1, a zero table): on the
    # host a large one is filled where a variable's buffer goes, and its variable keeps it.
    fresh_output = True

    def infer(self, b):
        require_dtype(b, 0, lambda dt: dt in (dtypes.int32, dtypes.int64), "dims")
        if b.shape(1).ndims not in (None, 0):
            raise b.error("Fill value must be a scalar", expected="shape ()", got=b.shape(1))
        return [(b.dtype(1), shape_from_tensor(b.inputs[0]))]

    def forward(self, xp, ctx, dims, value):
        shape = tuple(int(d) for d in dims)
        if xp is not np:
            return xp.full(shape, value, dtype=value.dtype)
        out = ctx.env.value_empty(shape, value.dtype)
        out[...] = value
        return out

    def gradient(self, op, g):
        from mpiflow.ops.reduction_ops import reduce_sum
        return [None, reduce_sum(g)]


def _shape_tensor(shape):
    if hasattr(shape, "op") or holds_tensor(shape):     # [tf.shape(x)[0], 3] packs
        return convert_to_tensor(shape)
    dims = TensorShape(shape).as_list()
    # int32 as TensorFlow writes shapes, int64 where a dimension needs it (a table of 3e9
    # rows is a fine thing to ask for).
    wide = any(d is not None and d > np.iinfo(np.int32).max for d in dims)
    return constant(np.asarray(dims, dtype=np.int64 if wide else np.int32), name="shape")


def _seed_attrs(seed):
    graph_seed, op_seed = get_default_graph().op_seeds(seed)
    return {"seed": int(graph_seed or 0), "seed2": int(op_seed or 0)}


def _random(type_name, shape, dtype, seed, name):
    dtype = dtypes.as_dtype(dtype)
    attrs = dict(_seed_attrs(seed), dtype=dtype)
    return apply_op(type_name, [_shape_tensor(shape)], attrs, name=name).outputs[0]


def _is_tensor(value) -> bool:
    return hasattr(value, "op") or hasattr(value, "_as_tensor")


def _scale(x, scale, shift, dtype):
    """``x * scale + shift``; a scale or shift may be a tensor (a fed noise level), as in
    TensorFlow, of the samples' dtype."""
    from mpiflow.ops import math_ops
    if _is_tensor(scale) or scale != 1:
        x = math_ops.multiply(x, convert_to_tensor(scale, dtype=dtype))
    if _is_tensor(shift) or shift != 0:
        x = math_ops.add(x, convert_to_tensor(shift, dtype=dtype))
    return x


def random_normal(shape, mean=0.0, stddev=1.0, dtype=dtypes.float32, seed=None, name=None):
    """Return samples of N(mean, stddev^2)."""
    x = _random("RandomStandardNormal", shape, dtype, seed, name)
    return _scale(x, stddev, mean, dtypes.as_dtype(dtype))


def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=dtypes.float32, seed=None, name=None):
    """Return samples of N(mean, stddev^2) redrawn until within two stddevs of the mean."""
    x = _random("TruncatedNormal", shape, dtype, seed, name)
    return _scale(x, stddev, mean, dtypes.as_dtype(dtype))


def random_uniform(shape, minval=0, maxval=None, dtype=dtypes.float32, seed=None, name=None):
    """Return samples of U[minval, maxval) (maxval 1 by default for floats); integers for
    an integer dtype, where maxval must be given, as in TensorFlow."""
    dtype = dtypes.as_dtype(dtype)
    if dtype.is_integer:
        if maxval is None:
            raise errors.InvalidArgumentError(
                f"random_uniform: maxval must be given for integer dtype {dtype.name} "
                "(values are drawn from [minval, maxval))")
        attrs = dict(_seed_attrs(seed), dtype=dtype)
        return apply_op("RandomUniformInt", [
            _shape_tensor(shape), convert_to_tensor(minval, dtype=dtype),
            convert_to_tensor(maxval, dtype=dtype)], attrs, name=name).outputs[0]
    maxval = 1.0 if maxval is None else maxval
    x = _random("RandomUniform", shape, dtype, seed, name)
    if _is_tensor(minval) or _is_tensor(maxval):
        from mpiflow.ops import math_ops
        minval = convert_to_tensor(minval, dtype=dtype)
        return _scale(x, math_ops.subtract(convert_to_tensor(maxval, dtype=dtype), minval),
                      minval, dtype)
    return _scale(x, maxval - minval, minval, dtype)


def fill(dims, value, name=None):
    """Return a tensor of shape ``dims`` filled with the scalar ``value``."""
    return apply_op("Fill", [_shape_tensor(dims), convert_to_tensor(value)],
                    name=name).outputs[0]


# Above this many elements a filled tensor is a Fill op, not a Const, so a large zero
# initializer does not put its whole value into the graph (and into every shipped partition).
_CONST_FILL_LIMIT = 1024


def filled(shape, value, dtype, name):
    """Return ``value`` broadcast to ``shape``: a Const when small, else a Fill op."""
    dtype = dtypes.as_dtype(dtype)
    if not hasattr(shape, "op") and not holds_tensor(shape):
        static = TensorShape(shape)
        if static.num_elements() <= _CONST_FILL_LIMIT:
            return constant(value, dtype=dtype, shape=static.as_list(), name=name)
    return fill(shape, constant(value, dtype=dtype), name=name)


def zeros(shape, dtype=dtypes.float32, name=None):
    """Return a tensor of zeros."""
    return filled(shape, 0, dtype, name or "zeros")


def ones(shape, dtype=dtypes.float32, name=None):
    """Return a tensor of ones."""
    return filled(shape, 1, dtype, name or "ones")


def set_random_seed(seed) -> None:
    """Set the graph-level seed of the default graph (op seeds derive from it)."""
    get_default_graph().seed = None if seed is None else int(seed)

