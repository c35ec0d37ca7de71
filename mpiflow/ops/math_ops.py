"""Elementwise arithmetic with numpy broadcasting, comparisons, casts and matmul.

Binary gradients are reduced back to each input's shape with ``SumToShape`` so
broadcasting works for any static or dynamic shape. Reductions live in
``reduction_ops.py``.
"""

from __future__ import annotations

import numpy as np

from mpiflow import errors, half_floats
from mpiflow.framework import dtypes
from mpiflow.framework.graph import Tensor
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops.constant_ops import constant, convert_to_tensor, holds_tensor, is_tensor_like
from mpiflow.ops.registry import (
    OpDef, apply_op, broadcast_shapes, const_value, donated_out, is_float, is_numeric, register_op,
    require_dtype, same_dtype)


# -- broadcasting helpers -------------------------------------------------------------

@register_op("Shape", attrs={"out_type": dtypes.int32})
class ShapeOp(OpDef):
    reads_values = False
    host_outputs = True
    gradient = None

    def infer(self, b):
        nd = b.shape(0).ndims
        return [(b.attrs["out_type"], [nd])]

    def forward(self, xp, ctx, x):
        return np.asarray(np.shape(x), dtype=ctx.attrs["out_type"].np_dtype)


def shape(input, name=None, out_type=dtypes.int32) -> Tensor:
    """Return the runtime shape of ``input``; a Const when the static shape is known."""
    x = convert_to_tensor(input)
    if x.shape.is_fully_defined():
        return constant(np.asarray(x.shape.as_list(), dtype=out_type.np_dtype),
                        name=name or "Shape")
    return apply_op("Shape", [x], {"out_type": out_type}, name=name).outputs[0]


@register_op("SumToShape")
class SumToShapeOp(OpDef):
    """Sum a broadcast gradient back down to ``shape`` (the inverse of BroadcastTo)."""
    hands_over_input = True     # the gradient itself where no axis is summed
    aliases_input = True        # ... or a view of it: a fetch copies, a write waits for it
    host_inputs = (1,)

    def infer(self, b):
        value = shape_from_tensor(b.inputs[1])
        return [(b.dtype(0), value)]

    def forward(self, xp, ctx, g, target):
        target = tuple(int(d) for d in target)
        if g.shape == target:
            return g
        lead = g.ndim - len(target)
        axes = tuple(range(lead)) + tuple(
            lead + i for i, d in enumerate(target) if d == 1 and g.shape[lead + i] != 1)
        return g.sum(axis=axes).reshape(target) if axes else g.reshape(target)

    def gradient(self, op, grad):
        return [broadcast_to(grad, shape(op.inputs[0])), None]


@register_op("BroadcastTo")
class BroadcastToOp(OpDef):
    host_inputs = (1,)
    aliases_input = True
    read_only_output = True

    def infer(self, b):
        target = shape_from_tensor(b.inputs[1])
        out = broadcast_shapes(b, b.shape(0), target)
        return [(b.dtype(0), target if target.ndims is not None else out)]

    def forward(self, xp, ctx, x, target):
        return xp.broadcast_to(x, tuple(int(d) for d in target))

    def gradient(self, op, grad):
        return [sum_to_shape(grad, op.inputs[0]), None]


def shape_from_tensor(shape_tensor: Tensor) -> TensorShape:
    """Return the static shape a 1-D shape tensor denotes (as far as build time knows)."""
    if shape_tensor.op.type == "Const":
        return TensorShape(shape_tensor.op.get_attr("value").tolist())
    if shape_tensor.op.type == "Shape":
        return shape_tensor.op.inputs[0].shape
    if shape_tensor.op.type == "Pack" and shape_tensor.shape.ndims == 1:
        # [tf.shape(x)[0], 4]: the constant dimensions are known (-1 is not a size)
        dims = [const_value(t) if t.shape.ndims == 0 else None
                for t in shape_tensor.op.inputs]
        return TensorShape([int(d) if d is not None and d >= 0 else None for d in dims])
    n = shape_tensor.shape[0] if shape_tensor.shape.ndims == 1 else None
    return TensorShape(None if n is None else [None] * n)


def sum_to_shape(grad, like: Tensor):
    """Return ``grad`` summed down to the shape of ``like`` (no-op when they match)."""
    if grad is None:
        return None
    if grad.shape.is_fully_defined() and grad.shape == like.shape:
        return grad
    return apply_op("SumToShape", [grad, shape(like)]).outputs[0]


def broadcast_to(input, shape_value, name=None) -> Tensor:
    x = convert_to_tensor(input)
    s = convert_to_tensor(shape_value) \
        if isinstance(shape_value, Tensor) or holds_tensor(shape_value) else \
        constant(np.asarray(shape_value, dtype=np.int32))
    return apply_op("BroadcastTo", [x, s], name=name).outputs[0]


# -- elementwise binary ------------------------------------------------------------------

class _Binary(OpDef):
    """Shared shape/dtype rule: same dtype, numpy broadcasting."""

    allowed = staticmethod(is_numeric)
    out_dtype = None

    def infer(self, b):
        dt = same_dtype(b)
        require_dtype(b, 0, self.allowed)
        return [(self.out_dtype or dt, broadcast_shapes(b, b.shape(0), b.shape(1)))]


def _binary_grad(op, gx, gy):
    x, y = op.inputs
    return [sum_to_shape(gx, x), sum_to_shape(gy, y)]


def _ufunc_op(type_name, ufunc, grad_fn=None, allowed=is_numeric, out_dtype=None,
              divides=False, kernel=None):
    """Register a broadcasting binary op whose kernel is one numpy/cupy ufunc.

    ``divides``: y is a divisor, and an integer one of 0 is an error naming the op, as in
    TensorFlow's CPU kernels (numpy gives 0, a silently wrong result, with a warning the
    executor silences). A GPU kernel does not read the divisor back to check it (that
    would wait for the device at every step), as TensorFlow's GPU kernels do not.
    ``kernel(xp, x, y, out)``: the formula, where the ufunc alone is not it for every
    dtype (``out`` None or a donated buffer, as the ufunc takes it).
    """
    name = ufunc.__name__

    def apply(xp, x, y, out=None):
        if kernel is not None:
            return kernel(xp, x, y, out)
        return getattr(xp, name)(x, y) if out is None else getattr(xp, name)(x, y, out=out)

    class Op(_Binary):
        fusable = True
        fresh_output = True
        donating_inputs = (0, 1)

        def forward(self, xp, ctx, x, y):
            if ctx.donated:
                out = donated_out(ctx, x, y)
                if out is not None:
                    return apply(xp, x, y, out)
            return apply(xp, x, y)
    if divides:
        plain = Op.forward

        def checked(self, xp, ctx, x, y):
            if y.dtype.kind in "iu" and not xp.all(y):
                raise errors.op_error(errors.InvalidArgumentError, "Integer division by zero",
                                      ctx.op, expected="a divisor (input 1) without zeros",
                                      got=f"{int((y == 0).sum())} zero(s)")
            return plain(self, xp, ctx, x, y)
        Op.forward, Op.fusion_forward, Op.gpu_forward = checked, plain, plain
    Op.allowed = staticmethod(allowed)
    Op.out_dtype = out_dtype
    Op.gradient = (lambda self, op, g: grad_fn(op, g)) if grad_fn else None
    Op.__name__ = Op.__qualname__ = type_name + "Op"
    register_op(type_name)(Op)
    return Op


def _real_div_dtype(dt):
    """a floating dtype (divide and truediv cast integers to a float, floordiv keeps them)"""
    # TensorFlow's RealDiv has no integer kernel: refused when built, not when run.
    return dt.is_floating


def _signed(dt):
    """a signed numeric dtype (not bool or uint8)"""
    return not dt.is_bool and np.dtype(dt.np_dtype).kind != "u"


def _add_grad(op, g):
    return _binary_grad(op, g, g)


def _sub_grad(op, g):
    return _binary_grad(op, g, negative(g))


def _mul_grad(op, g):
    x, y = op.inputs
    return _binary_grad(op, multiply(g, y), multiply(x, g))


def _div_grad(op, g):
    x, y = op.inputs
    gx = divide(g, y)
    gy = negative(multiply(g, divide(op.outputs[0], y)))
    return _binary_grad(op, gx, gy)


def _pow_grad(op, g):
    x, y = op.inputs
    z = op.outputs[0]
    gx = multiply(g, multiply(y, pow(x, subtract(y, constant(1, dtype=y.dtype)))))
    safe_x = where(greater(x, zeros_like_scalar(x)), x, ones_like(x))
    log_x = where(greater(x, zeros_like_scalar(x)), log(safe_x), zeros_like(x))
    gy = multiply(g, multiply(z, log_x))
    return _binary_grad(op, gx, gy)


def _maximum_grad(op, g):
    x, y = op.inputs
    pick_x = cast(greater_equal(x, y), g.dtype)
    return _binary_grad(op, multiply(g, pick_x), multiply(g, subtract(ones_like(pick_x),
                                                                          pick_x)))


def _minimum_grad(op, g):
    x, y = op.inputs
    pick_x = cast(less_equal(x, y), g.dtype)
    return _binary_grad(op, multiply(g, pick_x), multiply(g, subtract(ones_like(pick_x),
                                                                          pick_x)))


def _floormod_grad(op, g):
    # x mod y = x - floor(x / y) * y: d/dx = 1, d/dy = -floor(x / y) (TensorFlow's, which
    # differentiates floormod; floordiv is piecewise constant and has no gradient).
    x, y = op.inputs
    return _binary_grad(op, g, multiply(g, negative(floordiv(x, y))))


def _squared_difference_grad(op, g):
    x, y = op.inputs
    d = multiply(constant(2, dtype=g.dtype), multiply(g, subtract(x, y)))
    return _binary_grad(op, d, negative(d))


_ufunc_op("Add", np.add, _add_grad)
_ufunc_op("Sub", np.subtract, _sub_grad)
_ufunc_op("Mul", np.multiply, _mul_grad)
_ufunc_op("RealDiv", np.divide, _div_grad, allowed=_real_div_dtype)
_ufunc_op("Pow", np.power, _pow_grad)
_ufunc_op("Maximum", np.maximum, _maximum_grad)
_ufunc_op("Minimum", np.minimum, _minimum_grad)


def _floor_divide(xp, x, y, out):
    """FloorDiv as TensorFlow's: floor(x / y) for floats (numpy's floor_divide rounds
    through fmod, so 7 // 0.1 is 69 (TensorFlow: 70), -5 // inf is -1 (-0) and inf // 2
    NaN (inf)); integers by numpy's floor_divide, into ``out`` where one is donated."""
    if x.dtype.kind == "f":
        return xp.floor(xp.divide(x, y))
    return xp.floor_divide(x, y) if out is None else xp.floor_divide(x, y, out=out)


_ufunc_op("FloorDiv", np.floor_divide, divides=True, kernel=_floor_divide)
_ufunc_op("FloorMod", np.remainder, _floormod_grad, divides=True)
for _type, _fn in (("Equal", np.equal), ("NotEqual", np.not_equal)):
    _ufunc_op(_type, _fn, allowed=lambda dt: True, out_dtype=dtypes.bool_)
# Bools have no order in TensorFlow (its comparisons refuse them when the graph is built).
for _type, _fn in (("Less", np.less), ("LessEqual", np.less_equal), ("Greater", np.greater),
                   ("GreaterEqual", np.greater_equal)):
    _ufunc_op(_type, _fn, out_dtype=dtypes.bool_)
for _type, _fn in (("LogicalAnd", np.logical_and), ("LogicalOr", np.logical_or)):
    _ufunc_op(_type, _fn, allowed=lambda dt: dt.is_bool, out_dtype=dtypes.bool_)


@register_op("SquaredDifference")
class SquaredDifferenceOp(_Binary):
    fusable = True

    def forward(self, xp, ctx, x, y):
        d = xp.subtract(x, y)
        return xp.multiply(d, d, out=d) if isinstance(d, xp.ndarray) else d * d

    def gradient(self, op, g):
        return _squared_difference_grad(op, g)


def _binary_inputs(x, y):
    """Convert the operands; a Python value takes the dtype of the tensor operand."""
    if is_tensor_like(x):
        x = convert_to_tensor(x)
        y = convert_to_tensor(y, dtype=None if is_tensor_like(y) else x.dtype)
    elif is_tensor_like(y):
        y = convert_to_tensor(y)
        x = convert_to_tensor(x, dtype=y.dtype)
    else:
        x = convert_to_tensor(x)
        y = convert_to_tensor(y, dtype=x.dtype)
    return x, y


def _binary_fn(type_name, doc):
    def fn(x, y, name=None) -> Tensor:
        x, y = _binary_inputs(x, y)
        return apply_op(type_name, [x, y], name=name).outputs[0]
    fn.__doc__ = doc
    return fn


add = _binary_fn("Add", "Return x + y elementwise (numpy broadcasting).")
subtract = _binary_fn("Sub", "Return x - y elementwise.")
multiply = _binary_fn("Mul", "Return x * y elementwise.")
pow = _binary_fn("Pow", "Return x ** y elementwise (integers to a negative integer power are an "
                        "error naming the op, as in TensorFlow).")
maximum = _binary_fn("Maximum", "Return max(x, y) elementwise.")
minimum = _binary_fn("Minimum", "Return min(x, y) elementwise.")
floordiv = _binary_fn("FloorDiv", "Return floor(x / y) elementwise.")
floormod = _binary_fn("FloorMod", "Return x mod y elementwise (sign of y).")
squared_difference = _binary_fn("SquaredDifference", "Return (x - y)^2 elementwise.")
equal = _binary_fn("Equal", "Return x == y elementwise as bool.")
not_equal = _binary_fn("NotEqual", "Return x != y elementwise as bool.")
less = _binary_fn("Less", "Return x < y elementwise as bool.")
less_equal = _binary_fn("LessEqual", "Return x <= y elementwise as bool.")
greater = _binary_fn("Greater", "Return x > y elementwise as bool.")
greater_equal = _binary_fn("GreaterEqual", "Return x >= y elementwise as bool.")
logical_and = _binary_fn("LogicalAnd", "Return x AND y elementwise.")
logical_or = _binary_fn("LogicalOr", "Return x OR y elementwise.")


def logical_xor(x, y, name="LogicalXor") -> Tensor:
    """Return x XOR y elementwise, for bools: (x OR y) AND NOT (x AND y), as TensorFlow
    writes it."""
    from mpiflow.framework.scopes import name_scope
    with name_scope(name):
        return logical_and(logical_or(x, y), logical_not(logical_and(x, y)))


realdiv = _binary_fn("RealDiv", "Return x / y elementwise, for floating dtypes only (as "
                               "TensorFlow's realdiv; ``divide`` casts integers to a float).")


def divide(x, y, name=None) -> Tensor:
    """Return x / y; integer operands are cast to a float first, as TensorFlow's truediv:
    8- and 16-bit integers to float32, 32- and 64-bit ones to float64."""
    x, y = _binary_inputs(x, y)
    if x.dtype.is_integer:
        wide = dtypes.float32 if x.dtype.size <= 2 else dtypes.float64
        x, y = cast(x, wide), cast(y, wide)
    return realdiv(x, y, name=name)


truediv = divide


def div(x, y, name=None) -> Tensor:
    """Return x / y with Python 2's division, as TensorFlow 1's ``div``: integer operands
    are floor-divided and keep their dtype (``div(-7, 2)`` is -4), floating ones divided;
    ``divide`` and ``/`` are true division."""
    x, y = _binary_inputs(x, y)
    if x.dtype.is_integer:
        return floordiv(x, y, name=name)
    return realdiv(x, y, name=name)


# -- elementwise unary ----------------------------------------------------------------------

class _Unary(OpDef):
    allowed = staticmethod(is_numeric)
    out_dtype = None

    def infer(self, b):
        require_dtype(b, 0, self.allowed)
        return [(self.out_dtype or b.dtype(0), b.shape(0))]


def _unary_op(type_name, kernel, grad_fn=None, allowed=is_numeric, out_dtype=None):
    """Register an elementwise op; ``kernel(xp, x)``; ``grad_fn(op, g)`` -> input grad."""
    class Op(_Unary):
        fusable = True

        def forward(self, xp, ctx, x):
            return kernel(xp, x)
    Op.allowed = staticmethod(allowed)
    Op.out_dtype = out_dtype
    Op.gradient = (lambda self, op, g: [grad_fn(op, g)]) if grad_fn else None
    Op.__name__ = Op.__qualname__ = type_name + "Op"
    register_op(type_name)(Op)

    def fn(x, name=None) -> Tensor:
        return apply_op(type_name, [convert_to_tensor(x)], name=name).outputs[0]
    fn.__name__ = type_name.lower()
    return fn


negative = _unary_op("Neg", lambda xp, x: xp.negative(x), lambda op, g: negative(g),
                     allowed=_signed)
square = _unary_op("Square", lambda xp, x: xp.square(x),
                   lambda op, g: multiply(g, multiply(constant(2, dtype=g.dtype),
                                                      op.inputs[0])))
sqrt = _unary_op("Sqrt", lambda xp, x: xp.sqrt(x),
                 lambda op, g: divide(multiply(g, constant(0.5, dtype=g.dtype)), op.outputs[0]),
                 allowed=is_float)
rsqrt = _unary_op("Rsqrt", lambda xp, x: 1 / xp.sqrt(x),
                  lambda op, g: multiply(g, multiply(constant(-0.5, dtype=g.dtype),
                                                     pow(op.outputs[0], constant(3, g.dtype)))),
                  allowed=is_float)
exp = _unary_op("Exp", lambda xp, x: xp.exp(x), lambda op, g: multiply(g, op.outputs[0]),
                allowed=is_float)
log = _unary_op("Log", lambda xp, x: xp.log(x), lambda op, g: divide(g, op.inputs[0]),
                allowed=is_float)
expm1 = _unary_op("Expm1", lambda xp, x: xp.expm1(x),
                  lambda op, g: multiply(g, exp(op.inputs[0])), allowed=is_float)
log1p = _unary_op("Log1p", lambda xp, x: xp.log1p(x),
                  lambda op, g: divide(g, add(op.inputs[0], constant(1, dtype=g.dtype))),
                  allowed=is_float)
abs = _unary_op("Abs", lambda xp, x: xp.abs(x), lambda op, g: multiply(g, sign(op.inputs[0])))
sign = _unary_op("Sign", lambda xp, x: xp.sign(x), lambda op, g: zeros_like(op.inputs[0]))
reciprocal = _unary_op("Reciprocal", lambda xp, x: 1 / x,
                       lambda op, g: negative(multiply(g, square(op.outputs[0]))),
                       allowed=is_float)
floor = _unary_op("Floor", lambda xp, x: xp.floor(x), None, allowed=is_float)
# Round halves to even (banker's rounding), as TensorFlow's Round; integers pass unchanged.
# Both are piecewise constant: TensorFlow registers no gradient for either.
round = _unary_op("Round", lambda xp, x: xp.round(x), None)
ceil = _unary_op("Ceil", lambda xp, x: xp.ceil(x), None, allowed=is_float)
cos = _unary_op("Cos", lambda xp, x: xp.cos(x),
                lambda op, g: negative(multiply(g, sin(op.inputs[0]))), allowed=is_float)
sin = _unary_op("Sin", lambda xp, x: xp.sin(x),
                lambda op, g: multiply(g, cos(op.inputs[0])), allowed=is_float)
logical_not = _unary_op("LogicalNot", lambda xp, x: xp.logical_not(x), None,
                        allowed=lambda dt: dt.is_bool, out_dtype=dtypes.bool_)
is_nan = _unary_op("IsNan", lambda xp, x: xp.isnan(x), None, allowed=is_float,
                   out_dtype=dtypes.bool_)
is_finite = _unary_op("IsFinite", lambda xp, x: xp.isfinite(x), None, allowed=is_float,
                      out_dtype=dtypes.bool_)


# -- select, cast, add_n ----------------------------------------------------------------------

@register_op("Select")
class SelectOp(OpDef):
    """TensorFlow 1's Select: elements of x where ``condition``, else of y, with numpy
    broadcasting, except that a vector condition against x and y of higher rank picks
    whole rows (its length is their first dimension), as TF1's ``tf.where`` does. numpy
    would line it up with their last dimension instead: for square x the same shapes
    would select columns, a silently different result."""

    def infer(self, b):
        require_dtype(b, 0, lambda dt: dt.is_bool)
        dt = same_dtype(b, [1, 2])
        out = broadcast_shapes(b, b.shape(1), b.shape(2))
        cond = b.shape(0)
        if cond.ndims == 1 and out.ndims is not None and out.ndims > 1:
            rows = out[0]
            if None not in (cond[0], rows) and 1 not in (cond[0], rows) and cond[0] != rows:
                raise b.error("A vector condition must have one entry per row of x and y",
                              expected=f"condition of shape ({rows},) for x and y of "
                                       f"shape {out}", got=f"shape {cond}")
            cond = TensorShape(cond.as_list() + [1] * (out.ndims - 1))
        return [(dt, broadcast_shapes(b, cond, out))]

    def forward(self, xp, ctx, cond, x, y):
        rank = max(x.ndim, y.ndim)
        if cond.ndim == 1 and rank > 1:             # rows, as TF1 (see the class)
            cond = cond.reshape(cond.shape + (1,) * (rank - 1))
        # cupy's where widens bfloat16 to float32; the op's dtype is its inputs'.
        return xp.where(cond, x, y).astype(x.dtype, copy=False)

    def gradient(self, op, g):
        cond, x, y = op.inputs
        zeros = zeros_like(g)
        return [None, sum_to_shape(where(cond, g, zeros), x),
                sum_to_shape(where(cond, zeros, g), y)]


@register_op("Where")
class WhereOp(OpDef):
    """The coordinates of the true (nonzero) elements of a tensor, one row each, in
    row-major order: int64 of shape [number of them, rank] (TF1's ``tf.where(condition)``)."""

    def infer(self, b):
        require_dtype(b, 0, lambda dt: dt.is_bool or is_numeric(dt))
        return [(dtypes.int64, [None, b.shape(0).ndims])]

    def forward(self, xp, ctx, condition):
        return xp.argwhere(condition).astype(np.int64, copy=False)

    gradient = None


def where(condition, x=None, y=None, name=None) -> Tensor:
    """Return elements of x where ``condition`` holds, else of y (broadcasting; a vector
    ``condition`` against x and y of higher rank picks their rows, as TF1's); with neither
    x nor y, the coordinates of the true elements of ``condition`` (int64, one row each).

    Raises:
        InvalidArgumentError: only one of x and y is given.
    """
    if x is None and y is None:
        return apply_op("Where", [convert_to_tensor(condition)], name=name).outputs[0]
    if x is None or y is None:
        raise errors.InvalidArgumentError(
            "where: x and y must both be given (elements of x where condition holds, else "
            "of y) or both be left out (the coordinates of the true elements)")
    x, y = _binary_inputs(x, y)
    return apply_op("Select", [convert_to_tensor(condition), x, y], name=name).outputs[0]


select = where


@register_op("Cast", attrs={"DstT": dtypes.float32})
class CastOp(OpDef):
    def infer(self, b):
        return [(b.attrs["DstT"], b.shape(0))]

    def prepare(self, ctx):
        ctx.target = ctx.attrs["DstT"].np_dtype

    def forward(self, xp, ctx, x):
        if half_floats.applies(x, ctx.target):     # float32 <-> float16 at one speed
            # (a compressed gradient pushed to a ps: into a send buffer)
            return half_floats.astype(x, ctx.target, ctx.outgoing)
        return xp.asarray(x).astype(ctx.target, copy=False)

    def gradient(self, op, g):
        src = op.inputs[0].dtype
        if src.is_floating and op.outputs[0].dtype.is_floating:
            return [cast(g, src)]
        return [None]


def cast(x, dtype, name=None) -> Tensor:
    """Return ``x`` converted to ``dtype`` (the same tensor when it already has it)."""
    x = convert_to_tensor(x)
    dtype = dtypes.as_dtype(dtype)
    if x.dtype is dtype:
        return x
    return apply_op("Cast", [x], {"DstT": dtype}, name=name).outputs[0]


def to_float(x, name=None):
    return cast(x, dtypes.float32, name=name)


@register_op("AddN")
class AddNOp(OpDef):
    aliases_input = True    # one input is passed through as is
    fusable = True

    def fuses(self, op):
        return len(op.inputs) > 1

    def fusion_forward(self, xp, ctx, *xs):
        total = xs[0]
        for x in xs[1:]:
            total = total + x
        return total

    def infer(self, b):
        if not b.inputs:
            raise b.error("AddN needs at least one input")
        dt = same_dtype(b)
        out = b.shape(0)
        for i in range(1, len(b.inputs)):
            if not out.is_compatible_with(b.shape(i)):
                raise b.error("AddN inputs must have the same shape", expected=out,
                              got=b.shape(i))
            out = out.merge_with(b.shape(i))
        return [(dt, out)]

    def forward(self, xp, ctx, *xs):
        if len(xs) == 1:
            return xs[0]
        shape = xs[0].shape
        for i, x in enumerate(xs):
            if x.shape != shape:    # numpy would broadcast; AddN's inputs are alike (TF)
                raise errors.op_error(errors.InvalidArgumentError,
                                      "AddN inputs must have the same shape", ctx.op,
                                      expected=f"shape {shape} (input 0)",
                                      got=f"shape {x.shape} for input {i}")
        # numpy returns a scalar, not an array, for 0-d operands: keep an array to add into.
        total = xp.asarray(xp.add(xs[0], xs[1]))
        for x in xs[2:]:
            xp.add(total, x, out=total)
        return total

    def gradient(self, op, g):
        return [g] * len(op.inputs)


def add_n(inputs, name=None) -> Tensor:
    """Return the elementwise sum of same-shaped tensors."""
    return apply_op("AddN", [convert_to_tensor(x) for x in inputs], name=name).outputs[0]


# -- range ---------------------------------------------------------------------------------

@register_op("Range")
class RangeOp(OpDef):
    """``[start, start + delta, ...)`` below ``limit`` (numpy's arange), from scalars."""
    host_inputs = (0, 1, 2)

    gradient = None

    def infer(self, b):
        dt = same_dtype(b)
        require_dtype(b, 0, is_numeric, "start")
        for i, what in enumerate(("start", "limit", "delta")):
            if b.shape(i).ndims not in (None, 0):
                raise b.error(f"range {what} must be a scalar", got=f"shape {b.shape(i)}")
        values = [t.op.get_attr("value") if t.op.type == "Const" else None for t in b.inputs]
        if any(v is None for v in values):
            return [(dt, [None])]
        wrong = _range_error(*values)
        if wrong:
            raise b.error(wrong)
        return [(dt, [len(np.arange(*values))])]

    def forward(self, xp, ctx, start, limit, delta):
        wrong = _range_error(start, limit, delta)
        if wrong:
            raise errors.op_error(errors.InvalidArgumentError, wrong, ctx.op)
        return xp.arange(start.item(), limit.item(), delta.item(), dtype=start.dtype)


def _range_error(start, limit, delta):
    """What is wrong with a range, or None: TensorFlow's rules, a delta of 0 and a delta
    that leads away from the limit (numpy would give an empty range silently)."""
    if delta == 0:
        return "range delta must not be 0"
    if delta > 0 and start > limit:
        return f"Requires start <= limit when delta > 0: {start}/{limit}"
    if delta < 0 and start < limit:
        return f"Requires start >= limit when delta < 0: {start}/{limit}"
    return None


def range_(start, limit=None, delta=1, dtype=None, name="range") -> Tensor:
    """Return the 1-D tensor ``[start, start + delta, ...)`` up to ``limit`` (exclusive);
    ``range(n)`` counts from 0 to n - 1."""
    if limit is None:
        start, limit = 0, start
    values = [start, limit, delta]
    if dtype is None:
        known = [convert_to_tensor(v).dtype for v in values if is_tensor_like(v)]
        dtype = known[0] if known else (
            dtypes.float32 if any(isinstance(v, float) for v in values) else dtypes.int32)
    inputs = [cast(v, dtype) if is_tensor_like(v) else constant(v, dtype=dtype)
              for v in values]
    return apply_op("Range", inputs, name=name).outputs[0]


# -- matmul --------------------------------------------------------------------------------

_BFLOAT16 = dtypes.bfloat16.np_dtype
HALF_FLOATS = frozenset({dtypes.float16.np_dtype, _BFLOAT16})


def accumulating_dtype(xp, dtype, batched: bool = False) -> np.dtype:
    """Return the dtype ``xp`` multiplies ``dtype`` operands in (the result is cast back).

    float16 and bfloat16 products are summed in float32 and rounded to the input dtype once,
    at the end: cuBLAS does so on a GPU (cupy passes both to it with float32 compute), so
    cupy gets the input dtype back; numpy has no BLAS for either (float16 runs in numpy's
    own loop, many times slower than float32 BLAS, and ml_dtypes' bfloat16 matmul returns
    float32), so on numpy the operands go up to float32. cupy 14 has no ``batched`` (more
    than 2-D) bfloat16 matmul ("data type 'E' not understood"), so those go up there too.
    Other dtypes are computed as they are. Kernels that contract (MatMul, and convolution's
    tensordot) use this one rule.
    """
    dtype = np.dtype(dtype)
    if dtype in HALF_FLOATS and (xp is np or (batched and dtype == _BFLOAT16)):
        return np.dtype(np.float32)
    return dtype


@register_op("MatMul", attrs={"transpose_a": False, "transpose_b": False})
class MatMulOp(OpDef):
    fresh_output = True

    def infer(self, b):
        dt = same_dtype(b)
        require_dtype(b, 0, is_numeric)
        a, c = b.shape(0), b.shape(1)
        if a.ndims is None or c.ndims is None:
            return [(dt, TensorShape(None))]
        if a.ndims < 2 or c.ndims < 2:
            raise b.error("MatMul needs inputs of rank >= 2", expected="rank >= 2",
                          got=f"shapes {a} and {c}")
        ta, tb = b.attrs["transpose_a"], b.attrs["transpose_b"]
        m, k1 = (a[-1], a[-2]) if ta else (a[-2], a[-1])
        k2, n = (c[-1], c[-2]) if tb else (c[-2], c[-1])
        if k1 is not None and k2 is not None and k1 != k2:
            raise b.error(
                "Dimensions must be equal", expected="inner dimensions to match",
                got=f"{a} @ {c} (transpose_a={ta}, transpose_b={tb}): {k1} vs {k2}")
        batch = broadcast_shapes(b, a[:-2], c[:-2])
        return [(dt, TensorShape(batch.as_list() + [m, n]))]

    def forward(self, xp, ctx, a, b):
        # Shapes the graph left unknown, checked as the shape function checks known ones:
        # numpy's matmul would take a vector for a matrix (and give a vector) silently.
        if a.ndim < 2 or b.ndim < 2:
            raise errors.op_error(errors.InvalidArgumentError,
                                  "MatMul needs inputs of rank >= 2", ctx.op,
                                  expected="rank >= 2", got=f"shapes {a.shape} and {b.shape}")
        if ctx.attrs["transpose_a"]:
            a = xp.swapaxes(a, -1, -2)
        if ctx.attrs["transpose_b"]:
            b = xp.swapaxes(b, -1, -2)
        acc = accumulating_dtype(xp, a.dtype, batched=a.ndim > 2 or b.ndim > 2)
        if acc == a.dtype:
            if ctx.outgoing is not None and a.ndim == 2 and b.ndim == 2 and \
                    a.shape[1] == b.shape[0]:       # a gradient pushed to a ps
                return xp.matmul(a, b, out=ctx.outgoing((a.shape[0], b.shape[1]), a.dtype))
            return xp.matmul(a, b)
        return xp.matmul(a.astype(acc), b.astype(acc)).astype(a.dtype)

    def gradient(self, op, g):
        a, b = op.inputs
        ta, tb = op.get_attr("transpose_a"), op.get_attr("transpose_b")
        if not ta and not tb:
            ga, gb = matmul(g, b, transpose_b=True), matmul(a, g, transpose_a=True)
        elif not ta and tb:
            ga, gb = matmul(g, b), matmul(g, a, transpose_a=True)
        elif ta and not tb:
            ga, gb = matmul(b, g, transpose_b=True), matmul(a, g)
        else:
            ga, gb = (matmul(b, g, transpose_a=True, transpose_b=True),
                      matmul(g, a, transpose_a=True, transpose_b=True))
        return [sum_to_shape(ga, a), sum_to_shape(gb, b)]


def matmul(a, b, transpose_a=False, transpose_b=False, adjoint_a=False, adjoint_b=False,
           a_is_sparse=False, b_is_sparse=False, name=None) -> Tensor:
    """Return the matrix product ``a @ b`` (batched over leading dims).

    TF1's signature: mpiflow has no complex dtypes, so ``adjoint_a``/``adjoint_b`` are the
    transposes; ``a_is_sparse``/``b_is_sparse`` are hints TensorFlow may use for speed and
    change no value, so they are taken and ignored.

    Raises:
        InvalidArgumentError: both ``transpose_x`` and ``adjoint_x`` of one operand set.
    """
    for which, transposed, adjoint in (("a", transpose_a, adjoint_a),
                                       ("b", transpose_b, adjoint_b)):
        if transposed and adjoint:
            raise errors.InvalidArgumentError(
                f"matmul: only one of transpose_{which} and adjoint_{which} can be True")
    transpose_a, transpose_b = transpose_a or adjoint_a, transpose_b or adjoint_b
    a, b = _binary_inputs(a, b)
    return apply_op("MatMul", [a, b], {"transpose_a": bool(transpose_a),
                                       "transpose_b": bool(transpose_b)},
                    name=name).outputs[0]


# -- fill helpers used by gradients ------------------------------------------------------------

@register_op("ZerosLike")
class ZerosLikeOp(OpDef):
    def infer(self, b):
        return [(b.dtype(0), b.shape(0))]

    def forward(self, xp, ctx, x):
        return xp.zeros_like(x)

    def gradient(self, op, g):
        return [None]


@register_op("OnesLike")
class OnesLikeOp(OpDef):
    def infer(self, b):
        return [(b.dtype(0), b.shape(0))]

    def forward(self, xp, ctx, x):
        return xp.ones_like(x)

    def gradient(self, op, g):
        return [None]


def zeros_like(x, dtype=None, name=None) -> Tensor:
    x = convert_to_tensor(x)
    out = apply_op("ZerosLike", [x], name=name).outputs[0]
    return cast(out, dtype) if dtype is not None else out


def ones_like(x, dtype=None, name=None) -> Tensor:
    x = convert_to_tensor(x)
    out = apply_op("OnesLike", [x], name=name).outputs[0]
    return cast(out, dtype) if dtype is not None else out


def zeros_like_scalar(x: Tensor) -> Tensor:
    return constant(0, dtype=x.dtype)


# -- Python operators on Tensor ----------------------------------------------------------------

def _reverse(fn):
    return lambda x, y: fn(y, x)


for _name, _fn in {
        "__add__": add, "__radd__": _reverse(add), "__sub__": subtract,
        "__rsub__": _reverse(subtract), "__mul__": multiply, "__rmul__": _reverse(multiply),
        "__truediv__": divide, "__rtruediv__": _reverse(divide), "__pow__": pow,
        "__rpow__": _reverse(pow), "__matmul__": matmul, "__rmatmul__": _reverse(matmul),
        "__floordiv__": floordiv, "__rfloordiv__": _reverse(floordiv), "__mod__": floormod,
        "__rmod__": _reverse(floormod), "__lt__": less, "__le__": less_equal,
        "__gt__": greater, "__ge__": greater_equal, "__and__": logical_and,
        "__rand__": _reverse(logical_and), "__or__": logical_or,
        "__ror__": _reverse(logical_or), "__xor__": logical_xor,
        "__rxor__": _reverse(logical_xor)}.items():
    setattr(Tensor, _name, _fn)
Tensor.__neg__ = lambda self: negative(self)
Tensor.__abs__ = lambda self: abs(self)
Tensor.__invert__ = lambda self: logical_not(self)


def div_no_nan(x, y, name=None) -> Tensor:
    """Return x / y, and 0 where y is 0 (TensorFlow's ``div_no_nan``).

    A mean over no weights (an empty batch, all weights 0) is then 0 rather than NaN, and
    its gradient is 0 too: the divisor is swapped for 1 before dividing, so no inf or NaN
    is ever made for ``where`` to hide.
    """
    from mpiflow.framework.scopes import name_scope
    with name_scope(name, "div_no_nan", [x, y]) as scope:
        x, y = _binary_inputs(x, y)
        is_zero = equal(y, zeros_like(y))
        quotient = divide(x, where(is_zero, ones_like(y), y))
        return where(is_zero, zeros_like(quotient), quotient, name=scope)
