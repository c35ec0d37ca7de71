"""Activations and softmax (``mf.nn.relu`` ... ``mf.nn.log_softmax``).

Each activation has a fused gradient op (``ReluGrad``, ``SigmoidGrad``, ...) as in
TensorFlow, and each of those has its own gradient built from graph ops, so second-order
derivatives work. Kernels are stable for large |x| (no overflow in sigmoid, softplus,
softmax). Imports only the framework and other op modules, never the runtime.
"""

from __future__ import annotations

import numpy as np

from mpiflow.framework import dtypes
from mpiflow.framework.graph import Tensor
from mpiflow.ops import math_ops
from mpiflow.ops.array_ops import static_axis
from mpiflow.ops.constant_ops import convert_to_tensor
from mpiflow.ops.reduction_ops import reduce_sum
from mpiflow.ops.registry import (
    DONATE_MIN_BYTES, OpDef, apply_op, fused_elementwise, is_float, is_numeric, normalize_axis, register_op,
    require_dtype, same_dtype)

class _Elementwise(OpDef):
    """Shape rule of activations and their gradient kernels: same dtype, same shape."""

    allowed = staticmethod(is_float)
    fusable = True

    def infer(self, b):
        dt = same_dtype(b)
        require_dtype(b, 0, self.allowed)
        out = b.shape(0)
        for i in range(1, len(b.inputs)):
            if not out.is_compatible_with(b.shape(i)):
                raise b.error("Inputs must have the same shape", expected=out, got=b.shape(i))
            out = out.merge_with(b.shape(i))
        return [(dt, out)]


def _op(type_name, *inputs, **attrs):
    return apply_op(type_name, list(inputs), attrs or None).outputs[0]


# -- activations -------------------------------------------------------------------------

@register_op("Relu")
class ReluOp(_Elementwise):
    allowed = staticmethod(is_numeric)
    fresh_output = True
    donating_inputs = (0,)

    def forward(self, xp, ctx, x):
        if ctx.donated and type(x) is np.ndarray and x.nbytes >= DONATE_MIN_BYTES:
            return np.maximum(x, 0, out=x)
        return xp.maximum(x, 0)

    def gradient(self, op, g):
        return [_op("ReluGrad", g, op.outputs[0])]


@register_op("ReluGrad")
class ReluGradOp(_Elementwise):
    """``gradients * (outputs > 0)``."""
    gpu_forward = fused_elementwise("mf_relu_grad", "T g, T y", "out = y > (T)0 ? g : (T)0")

    allowed = staticmethod(is_numeric)
    fresh_output = True
    donating_inputs = (0,)

    def forward(self, xp, ctx, g, y):
        # A mask of g's own dtype multiplies faster than a bool one (no mixed-type loop).
        mask = (y > 0).astype(g.dtype, copy=False)
        if ctx.donated and type(g) is np.ndarray and g.shape == mask.shape and \
                g.nbytes >= DONATE_MIN_BYTES:
            return np.multiply(g, mask, out=g)
        return g * mask

    def gradient(self, op, gg):
        # Linear in the incoming gradient; piecewise constant in the features.
        return [_op("ReluGrad", gg, op.inputs[1]), None]


@register_op("Relu6")
class Relu6Op(_Elementwise):
    def forward(self, xp, ctx, x):
        # Bounds of x's dtype: a Python number would widen bfloat16 to float32.
        return xp.minimum(xp.maximum(x, x.dtype.type(0)), x.dtype.type(6))

    def gradient(self, op, g):
        return [_op("Relu6Grad", g, op.inputs[0])]


@register_op("Relu6Grad")
class Relu6GradOp(_Elementwise):
    """``gradients * (0 < features < 6)``."""
    gpu_forward = fused_elementwise(
        "mf_relu6_grad", "T g, T x", "out = (x > (T)0 && x < (T)6) ? g : (T)0")

    def forward(self, xp, ctx, g, x):
        return g * ((x > 0) & (x < 6))

    def gradient(self, op, gg):
        return [_op("Relu6Grad", gg, op.inputs[1]), None]


@register_op("LeakyRelu", attrs={"alpha": 0.2})
class LeakyReluOp(_Elementwise):
    def forward(self, xp, ctx, x):
        return xp.where(x > 0, x, x * x.dtype.type(ctx.attrs["alpha"]))

    def gradient(self, op, g):
        return [_op("LeakyReluGrad", g, op.inputs[0], alpha=op.get_attr("alpha"))]


@register_op("LeakyReluGrad", attrs={"alpha": 0.2})
class LeakyReluGradOp(_Elementwise):
    """``gradients`` where features > 0, else ``alpha * gradients``."""

    def forward(self, xp, ctx, g, x):
        return xp.where(x > 0, g, g * g.dtype.type(ctx.attrs["alpha"]))

    def gradient(self, op, gg):
        return [_op("LeakyReluGrad", gg, op.inputs[1], alpha=op.get_attr("alpha")), None]


@register_op("Elu")
class EluOp(_Elementwise):
    gpu_forward = fused_elementwise("mf_elu", "T x", "out = x > (T)0 ? x : (T)expm1(min(x, (T)0))")

    def forward(self, xp, ctx, x):
        return xp.where(x > 0, x, xp.expm1(xp.minimum(x, 0)))

    def gradient(self, op, g):
        return [_op("EluGrad", g, op.outputs[0])]


@register_op("EluGrad")
class EluGradOp(_Elementwise):
    """``gradients * (outputs + 1)`` where outputs < 0, else ``gradients``: as TensorFlow's,
    a NaN output passes the gradient through."""
    gpu_forward = fused_elementwise(
        "mf_elu_grad", "T g, T y", "out = y < (T)0 ? g * (y + (T)1) : g")

    def forward(self, xp, ctx, g, y):
        return xp.where(y < 0, g * (y + 1), g)

    def gradient(self, op, gg):
        g, y = op.inputs
        negative = math_ops.less(y, math_ops.zeros_like(y))
        return [_op("EluGrad", gg, y),
                math_ops.where(negative, gg * g, math_ops.zeros_like(y))]


def _stable_sigmoid(xp, x):
    # exp(-|x|) never overflows; pick the form that divides by a number >= 1.
    z = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1 / (1 + z), z / (1 + z))


@register_op("Sigmoid")
class SigmoidOp(_Elementwise):
    gpu_forward = fused_elementwise("mf_sigmoid", "T x",
        "T z = exp(-abs(x)); out = x >= (T)0 ? (T)1 / ((T)1 + z) : z / ((T)1 + z)")

    def forward(self, xp, ctx, x):
        return _stable_sigmoid(xp, x)

    def gradient(self, op, g):
        return [_op("SigmoidGrad", op.outputs[0], g)]


@register_op("SigmoidGrad")
class SigmoidGradOp(_Elementwise):
    """``dy * y * (1 - y)`` with inputs (y, dy), TensorFlow's order."""
    gpu_forward = fused_elementwise("mf_sigmoid_grad", "T y, T dy", "out = dy * y * ((T)1 - y)")

    def forward(self, xp, ctx, y, dy):
        return dy * y * (1 - y)

    def gradient(self, op, gg):
        y, dy = op.inputs
        gdy = gg * dy
        return [gdy - 2.0 * gdy * y, _op("SigmoidGrad", y, gg)]


@register_op("Tanh")
class TanhOp(_Elementwise):
    def forward(self, xp, ctx, x):
        return xp.tanh(x)

    def gradient(self, op, g):
        return [_op("TanhGrad", op.outputs[0], g)]


@register_op("TanhGrad")
class TanhGradOp(_Elementwise):
    """``dy * (1 - y^2)`` with inputs (y, dy), TensorFlow's order."""
    gpu_forward = fused_elementwise("mf_tanh_grad", "T y, T dy", "out = dy * ((T)1 - y * y)")

    def forward(self, xp, ctx, y, dy):
        return dy * (1 - y * y)

    def gradient(self, op, gg):
        y, dy = op.inputs
        return [gg * dy * y * -2.0, _op("TanhGrad", y, gg)]


@register_op("Softplus")
class SoftplusOp(_Elementwise):
    gpu_forward = fused_elementwise(
        "mf_softplus", "T x", "out = max(x, (T)0) + log1p(exp(-abs(x)))")

    def forward(self, xp, ctx, x):
        # log(1 + e^x) = max(x, 0) + log1p(e^-|x|): no overflow for large |x|.
        return xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))

    def gradient(self, op, g):
        return [_op("SoftplusGrad", g, op.inputs[0])]


@register_op("SoftplusGrad")
class SoftplusGradOp(_Elementwise):
    """``gradients * sigmoid(features)``."""
    gpu_forward = fused_elementwise("mf_softplus_grad", "T g, T x",
        "T z = exp(-abs(x)); out = g * (x >= (T)0 ? (T)1 / ((T)1 + z) : z / ((T)1 + z))")

    def forward(self, xp, ctx, g, x):
        return g * _stable_sigmoid(xp, x)

    def gradient(self, op, gg):
        g, x = op.inputs
        return [_op("SoftplusGrad", gg, x), _op("SigmoidGrad", sigmoid(x), gg * g)]


@register_op("Softsign")
class SoftsignOp(_Elementwise):
    def forward(self, xp, ctx, x):
        return x / (x.dtype.type(1) + xp.abs(x))

    def gradient(self, op, g):
        # TensorFlow's SoftsignGrad: gradients / (1 + |features|)^2.
        x = op.inputs[0]
        return [g / math_ops.square(1.0 + math_ops.abs(x))]


# TensorFlow's (and Klambauer et al.'s) SELU constants.
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


@register_op("Selu")
class SeluOp(_Elementwise):
    def forward(self, xp, ctx, x):
        t = x.dtype.type
        # expm1 of min(x, 0): the positive side never overflows into the branch not taken.
        neg = t(SELU_SCALE * SELU_ALPHA) * xp.expm1(xp.minimum(x, t(0)))
        return xp.where(x > 0, t(SELU_SCALE) * x, neg).astype(x.dtype, copy=False)

    def gradient(self, op, g):
        # TensorFlow's SeluGrad from the outputs: scale where outputs >= 0, else
        # outputs + scale * alpha (= scale * alpha * exp(features)).
        y = op.outputs[0]
        return [math_ops.where(math_ops.less(y, 0.0), g * (y + SELU_SCALE * SELU_ALPHA),
                               g * SELU_SCALE)]


def _activation(type_name, doc):
    def fn(features, name=None) -> Tensor:
        return apply_op(type_name, [convert_to_tensor(features)], name=name).outputs[0]
    fn.__name__ = fn.__qualname__ = type_name.lower()
    fn.__doc__ = doc
    return fn


relu = _activation("Relu", "Return max(features, 0).")
relu6 = _activation("Relu6", "Return min(max(features, 0), 6).")
elu = _activation("Elu", "Return features if > 0, else exp(features) - 1.")
sigmoid = _activation("Sigmoid", "Return 1 / (1 + exp(-x)), computed without overflow.")
tanh = _activation("Tanh", "Return the hyperbolic tangent of x.")
softplus = _activation("Softplus", "Return log(1 + exp(features)), computed without overflow.")
softsign = _activation("Softsign", "Return features / (1 + |features|).")
selu = _activation("Selu", "Return scale * features if > 0, else scale * alpha * "
                           "(exp(features) - 1), with TensorFlow's alpha and scale.")


def log_sigmoid(x, name=None) -> Tensor:
    """Return log(sigmoid(x)) as -softplus(-x), as TensorFlow: no overflow for large |x|
    (log_sigmoid(-100) is -100, not -inf); the gradient is sigmoid(-x)."""
    from mpiflow.framework.scopes import name_scope
    with name_scope(name, "LogSigmoid", [x]) as scope:
        x = convert_to_tensor(x)
        return math_ops.negative(softplus(math_ops.negative(x)), name=scope)


def leaky_relu(features, alpha=0.2, name=None) -> Tensor:
    """Return features if > 0, else ``alpha * features``; integer features are cast to
    float32 first, as TensorFlow's ``leaky_relu`` does."""
    features = convert_to_tensor(features)
    if features.dtype.is_integer:
        features = math_ops.cast(features, dtypes.float32)
    return apply_op("LeakyRelu", [features], {"alpha": float(alpha)}, name=name).outputs[0]


# -- softmax ------------------------------------------------------------------------------

class _SoftmaxBase(OpDef):
    attrs = {"axis": -1}

    def infer(self, b):
        require_dtype(b, 0, is_float)
        s = b.shape(0)
        if s.ndims is not None:
            if s.ndims == 0:
                raise b.error("Softmax needs a tensor of rank >= 1", got=s)
            normalize_axis(b, b.attrs["axis"], s.ndims)
        return [(b.dtype(0), s)]


def in_float32_if_half(x):
    """``x`` as float32 if it is float16 or bfloat16, else ``x`` itself.

    The softmax kernels compute half floats in float32 and round the result once, as
    TensorFlow's: in float16 the shift ``x - max`` overflows for logits of opposite sign
    past 32752 (inf, then 0 * inf = NaN in a cross entropy), and bfloat16's 8 bits round
    every exp and sum on the way (softmax([1, 2, 3])[2] came out 0.668 for 0.6652).
    """
    return x.astype(np.float32) if x.dtype in math_ops.HALF_FLOATS else x


def log_softmax_kernel(xp, x, axis):
    """``x - log(sum(exp(x)))`` along ``axis``, with the max subtracted first (no overflow).

    The one kernel of log-softmax (LogSoftmax and the softmax cross entropies). An empty
    ``x`` gives an empty result, as in TensorFlow: over a class axis of size 0 numpy's max
    has nothing to start from and refuses.
    """
    if x.size == 0:
        return xp.zeros_like(x)
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))


@register_op("Softmax", attrs={"axis": -1})
class SoftmaxOp(_SoftmaxBase):
    def forward(self, xp, ctx, x):
        if x.size == 0:         # nothing to normalize (see log_softmax_kernel)
            return xp.zeros_like(x)
        axis, dtype = ctx.attrs["axis"], x.dtype
        x = in_float32_if_half(x)
        e = xp.exp(x - x.max(axis=axis, keepdims=True))
        e /= e.sum(axis=axis, keepdims=True)
        return e.astype(dtype, copy=False)

    def gradient(self, op, g):
        y = op.outputs[0]
        dot = reduce_sum(g * y, axis=op.get_attr("axis"), keepdims=True)
        return [(g - dot) * y]


@register_op("LogSoftmax", attrs={"axis": -1})
class LogSoftmaxOp(_SoftmaxBase):
    def forward(self, xp, ctx, x):
        return log_softmax_kernel(xp, in_float32_if_half(x), ctx.attrs["axis"]).astype(
            x.dtype, copy=False)

    def gradient(self, op, g):
        total = reduce_sum(g, axis=op.get_attr("axis"), keepdims=True)
        return [g - total * math_ops.exp(op.outputs[0])]


def softmax(logits, axis=None, name=None, dim=None) -> Tensor:
    """Return exp(logits) / sum(exp(logits)) along ``axis`` (default -1), stably."""
    axis = dim if axis is None else axis
    return apply_op("Softmax", [convert_to_tensor(logits)],
                    {"axis": -1 if axis is None else static_axis(axis, "softmax axis")},
                    name=name).outputs[0]


def log_softmax(logits, axis=None, name=None, dim=None) -> Tensor:
    """Return logits - log(sum(exp(logits))) along ``axis`` (default -1), stably."""
    axis = dim if axis is None else axis
    return apply_op("LogSoftmax", [convert_to_tensor(logits)],
                    {"axis": -1 if axis is None else static_axis(axis, "log_softmax axis")},
                    name=name).outputs[0]


