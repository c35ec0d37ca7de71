"""bias_add, dropout, in_top_k and moments; the losses (softmax and sigmoid cross entropy,
l2_loss).

The fused softmax cross-entropy ops output (loss, backprop) as in TensorFlow; their
gradient scales the backprop output, and handles a gradient arriving at backprop too, so
second-order derivatives work. Activations live in ``activation_ops.py``, convolution and
pooling in ``conv_ops.py``. Imports only the framework and other op modules.
"""

from __future__ import annotations

import numbers

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.graph import Tensor
from mpiflow.framework.scopes import name_scope
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops import math_ops, random_ops
from mpiflow.ops.activation_ops import (
    in_float32_if_half, log_softmax, log_softmax_kernel, softmax)
from mpiflow.ops.array_ops import static_axis, static_ints
from mpiflow.ops.constant_ops import convert_to_tensor, is_tensor_like
from mpiflow.ops.control_ops import stop_gradient
from mpiflow.ops.reduction_ops import reduce_mean, reduce_sum
from mpiflow.ops.registry import (
    OpDef, apply_op, elementwise_kernel, has_kernel_for, is_float, is_index, is_numeric,
    normalize_axis, register_op, require_dtype, same_dtype)


def _op(type_name, *inputs, **attrs):
    return apply_op(type_name, list(inputs), attrs or None).outputs[0]


# -- bias_add ----------------------------------------------------------------------------

def _channel_axis(b, data_format, ndims):
    if data_format not in ("NHWC", "NCHW"):
        raise b.error("Unsupported data_format", expected="'NHWC' or 'NCHW'",
                      got=repr(data_format))
    return ndims - 1 if data_format == "NHWC" else 1


@register_op("BiasAdd", attrs={"data_format": "NHWC"})
class BiasAddOp(OpDef):
    fusable = True

    def fuses(self, op):
        return op.get_attr("data_format") == "NHWC"     # NCHW reshapes the bias

    def infer(self, b):
        dt = same_dtype(b)
        require_dtype(b, 0, is_numeric)
        value, bias = b.shape(0), b.shape(1)
        if bias.ndims not in (None, 1):
            raise b.error("Bias must be 1-D", expected="shape (channels,)", got=bias)
        if value.ndims is None:
            return [(dt, value)]
        if value.ndims < 2:
            raise b.error("BiasAdd value must have rank >= 2", got=value)
        axis = _channel_axis(b, b.attrs["data_format"], value.ndims)
        channels = value[axis]
        if bias.ndims == 1 and None not in (channels, bias[0]) and channels != bias[0]:
            raise b.error("Bias length must equal the channel dimension of value",
                          expected=f"bias of length {channels} (value {value}, "
                                   f"{b.attrs['data_format']})", got=f"length {bias[0]}")
        return [(dt, value)]

    def forward(self, xp, ctx, value, bias):
        if ctx.attrs["data_format"] == "NCHW":
            bias = bias.reshape((-1,) + (1,) * (value.ndim - 2))
        return value + bias

    def gradient(self, op, g):
        return [g, _op("BiasAddGrad", g, data_format=op.get_attr("data_format"))]


@register_op("BiasAddGrad", attrs={"data_format": "NHWC"})
class BiasAddGradOp(OpDef):
    """Sum ``out_backprop`` over every axis but the channel axis."""

    def infer(self, b):
        s = b.shape(0)
        if s.ndims is None:
            return [(b.dtype(0), [None])]
        if s.ndims < 2:
            raise b.error("BiasAddGrad input must have rank >= 2", got=s)
        return [(b.dtype(0), [s[_channel_axis(b, b.attrs["data_format"], s.ndims)]])]

    def forward(self, xp, ctx, g):
        axis = 1 if ctx.attrs["data_format"] == "NCHW" else g.ndim - 1
        wide = math_ops.accumulating_dtype(xp, g.dtype)     # half floats add in float32
        return g.sum(axis=tuple(a for a in range(g.ndim) if a != axis),
                     dtype=wide).astype(g.dtype, copy=False)

    def gpu_forward(self, xp, ctx, g):
        """NHWC on a GPU: the column sums of g as [rows, channels], by one matrix-vector
        product with ones (cuBLAS reads g once at full bandwidth; a reduction kernel over
        the leading axes runs only as many blocks as there are channels)."""
        if ctx.attrs["data_format"] == "NCHW" or not has_kernel_for(xp, g.dtype):
            return self.forward(xp, ctx, g)
        rows = g.reshape(-1, g.shape[-1])
        return xp.ones(rows.shape[0], dtype=g.dtype) @ rows

    def gradient(self, op, gg):
        g = op.inputs[0]
        return [bias_add(math_ops.zeros_like(g), gg, data_format=op.get_attr("data_format"))]


def bias_add(value, bias, data_format=None, name=None) -> Tensor:
    """Return ``value + bias`` with the 1-D ``bias`` on the channel axis (last for NHWC)."""
    value = convert_to_tensor(value)
    bias = convert_to_tensor(bias, dtype=value.dtype)
    return apply_op("BiasAdd", [value, bias], {"data_format": data_format or "NHWC"},
                    name=name).outputs[0]


def xw_plus_b(x, weights, biases, name=None) -> Tensor:
    """Return ``matmul(x, weights) + biases`` (TF1's ``tf.nn.xw_plus_b``)."""
    with name_scope(name, "xw_plus_b", [x, weights, biases]):
        return bias_add(math_ops.matmul(x, weights), biases)


# -- dropout ------------------------------------------------------------------------------

def dropout(x, keep_prob=None, noise_shape=None, seed=None, name=None, rate=None) -> Tensor:
    """Zero each element with probability ``rate`` and scale the rest by 1 / keep_prob.

    The mask is ``floor(keep_prob + U[0, 1))`` from a seeded RandomUniform op in the graph,
    so gradients use the same mask as the forward pass and ``set_random_seed`` makes it
    reproducible. A new mask is drawn at every ``Session.run``.

    Args:
        x: a floating tensor.
        keep_prob: probability of keeping an element (TF1); a number or a scalar tensor.
        noise_shape: shape of the mask, broadcast against ``x`` (default: ``x``'s shape).
        seed: op seed, combined with the graph seed.
        rate: probability of dropping an element (``1 - keep_prob``); give one of the two.

    Raises:
        InvalidArgumentError: both or neither of keep_prob and rate, a number outside
            (0, 1] for keep_prob, or a non-floating ``x``.
    """
    with name_scope(name, "dropout"):
        x = convert_to_tensor(x)
        if not x.dtype.is_floating:
            raise errors.InvalidArgumentError(
                f"dropout: x must be a floating tensor, got {x.dtype.name} ('{x.name}')")
        if (keep_prob is None) == (rate is None):
            raise errors.InvalidArgumentError("dropout: give exactly one of keep_prob and rate")
        if keep_prob is None:
            keep_prob = 1 - rate if isinstance(rate, numbers.Real) else \
                math_ops.subtract(1.0, convert_to_tensor(rate, dtype=x.dtype))
        if isinstance(keep_prob, numbers.Real):
            if not 0 < keep_prob <= 1:
                raise errors.InvalidArgumentError(
                    f"dropout: keep_prob must be in (0, 1], got {keep_prob}")
            if keep_prob == 1:
                return x
        keep = convert_to_tensor(keep_prob, dtype=x.dtype)
        shape = math_ops.shape(x) if noise_shape is None else noise_shape
        uniform = random_ops.random_uniform(shape, seed=seed, dtype=x.dtype)
        mask = math_ops.floor(keep + uniform)
        return math_ops.divide(x, keep) * mask


# -- in_top_k, moments --------------------------------------------------------------------

@register_op("InTopK", attrs={"k": 1})
class InTopKOp(OpDef):
    gradient = None

    def infer(self, b):
        require_dtype(b, 0, is_float, "predictions")
        require_dtype(b, 1, is_index, "targets")
        p, t = b.shape(0), b.shape(1)
        if p.ndims not in (None, 2):
            raise b.error("predictions must be 2-D", expected="shape (batch, classes)", got=p)
        if t.ndims not in (None, 1):
            raise b.error("targets must be 1-D", expected="shape (batch,)", got=t)
        rows = p[0] if p.ndims == 2 else None
        entries = t[0] if t.ndims == 1 else None
        if None not in (rows, entries) and rows != entries:
            raise b.error("targets must have one entry per row of predictions",
                          expected=f"{rows} targets (predictions {p})", got=f"{entries}")
        return [(dtypes.bool_, [rows if rows is not None else entries])]

    def forward(self, xp, ctx, predictions, targets):
        if predictions.ndim != 2 or targets.shape != predictions.shape[:1]:
            raise errors.op_error(errors.InvalidArgumentError,
                                  "in_top_k needs 2-D predictions and a target per row",
                                  ctx.op, expected="predictions (batch, classes) and "
                                  "targets (batch,)", got=f"shapes {predictions.shape} and "
                                  f"{targets.shape}")
        n, classes = predictions.shape
        valid = (targets >= 0) & (targets < classes)
        target_value = predictions[xp.arange(n), xp.where(valid, targets, 0)]
        # As TensorFlow: an out-of-range target or a non-finite row is never in the top k.
        finite = xp.isfinite(predictions).all(axis=1)
        above = (predictions > target_value[:, None]).sum(axis=1)
        return valid & finite & (above < ctx.attrs["k"])


def in_top_k(predictions, targets, k, name=None) -> Tensor:
    """Return, per row, whether ``targets`` is among the ``k`` largest ``predictions``.

    Ties count in the target's favour: only strictly larger predictions push it out.
    """
    return apply_op("InTopK", [convert_to_tensor(predictions), convert_to_tensor(targets)],
                    {"k": int(k)}, name=name).outputs[0]


def moments(x, axes, shift=None, name=None, keep_dims=None, keepdims=None):
    """Return (mean, variance) of ``x`` over ``axes`` (``shift`` is ignored, as in TF).

    The variance uses the mean under stop_gradient, as TensorFlow does: d var / d mean is
    zero, so gradients are exact and the graph is smaller. float16 is computed in float32
    and the results cast back, as TensorFlow's: squared deviations past 256 would overflow.
    """
    keep = bool(keepdims if keepdims is not None else (keep_dims or False))
    axes = static_ints(axes, "moments axes").reshape(-1).tolist()
    with name_scope(name, "moments"):
        x = convert_to_tensor(x)
        dtype = x.dtype
        if dtype == dtypes.float16:
            x = math_ops.cast(x, dtypes.float32)
        mean = reduce_mean(x, axis=axes, keepdims=True)
        variance = reduce_mean(math_ops.squared_difference(x, stop_gradient(mean)),
                               axis=axes, keepdims=keep)
        if not keep:
            # Summing over the kept size-1 axes squeezes them without another pass over x.
            mean = reduce_sum(mean, axis=axes)
        if dtype == dtypes.float16:
            mean, variance = math_ops.cast(mean, dtype), math_ops.cast(variance, dtype)
        return mean, variance


def l2_normalize(x, axis=None, epsilon=1e-12, name=None, dim=None):
    """``x / sqrt(max(sum(x ** 2, axis), epsilon))`` along ``axis`` (every axis when None;
    ``dim`` is TF1's older name for it), as TensorFlow computes it: the clipped sum's
    rsqrt times ``x``, so a slice of zeros stays zeros and its gradient is finite."""
    axis = dim if axis is None else axis
    with name_scope(name, "l2_normalize"):
        x = convert_to_tensor(x, name="x")
        square_sum = reduce_sum(math_ops.square(x), axis, keepdims=True)
        floor = math_ops.cast(epsilon, square_sum.dtype)
        return math_ops.multiply(x, math_ops.rsqrt(math_ops.maximum(square_sum, floor)))


def batch_normalization(x, mean, variance, offset, scale, variance_epsilon, name=None):
    """``(x - mean) / sqrt(variance + variance_epsilon) * scale + offset``, as TensorFlow
    arranges it: ``x * inv + (offset - mean * inv)`` with ``inv`` the rsqrt times
    ``scale``, so the statistics' side is computed at their (usually smaller) shape.
    ``offset`` and ``scale`` may be None; every argument broadcasts against ``x``."""
    with name_scope(name, "batchnorm"):
        x = convert_to_tensor(x, name="x")
        inv = math_ops.rsqrt(convert_to_tensor(variance) + variance_epsilon)
        if scale is not None:
            inv = inv * scale
        shift = -convert_to_tensor(mean) * inv if offset is None else \
            offset - convert_to_tensor(mean) * inv
        return x * math_ops.cast(inv, x.dtype) + math_ops.cast(shift, x.dtype)


# -- softmax cross entropy -----------------------------------------------------------------

def _is_zero(grad):
    # gradients() fills the unused output of a multi-output op with ZerosLike.
    return grad is None or grad.op.type == "ZerosLike"


def _expand_to(grad_loss, logits, axis):
    """Broadcast the per-example ``grad_loss`` back over the class ``axis`` of logits."""
    return apply_op("ReduceGrad", [grad_loss, math_ops.shape(logits)],
                    {"axis": [axis], "keepdims": False, "mode": "sum"}).outputs[0]


@register_op("SoftmaxCrossEntropyWithLogits", attrs={"axis": -1})
class SoftmaxCrossEntropyWithLogitsOp(OpDef):
    """Inputs (features, labels); outputs (loss, backprop), as TensorFlow's fused op.

    backprop is d loss / d logits = softmax * sum(labels) - labels: TensorFlow's
    ``softmax - labels`` when each row of labels is a distribution, exact otherwise.
    """

    tuple_outputs = True

    def infer(self, b):
        dt = same_dtype(b)
        require_dtype(b, 0, is_float, "logits")
        logits, labels = b.shape(0), b.shape(1)
        if not logits.is_compatible_with(labels):
            raise b.error("labels and logits must have the same shape",
                          expected=f"labels of shape {logits}", got=labels)
        full = logits.merge_with(labels)
        if full.ndims is None:
            return [(dt, TensorShape(None)), (dt, full)]
        if full.ndims == 0:
            raise b.error("logits must have rank >= 1", got=full)
        axis = normalize_axis(b, b.attrs["axis"], full.ndims)
        return [(dt, [d for i, d in enumerate(full.as_list()) if i != axis]), (dt, full)]

    def forward(self, xp, ctx, logits, labels):
        axis, dtype = ctx.attrs["axis"], logits.dtype
        logits, labels = in_float32_if_half(logits), in_float32_if_half(labels)
        log_probs = log_softmax_kernel(xp, logits, axis)
        loss = -(labels * log_probs).sum(axis=axis)
        backprop = xp.exp(log_probs) * labels.sum(axis=axis, keepdims=True) - labels
        return xp.asarray(loss).astype(dtype, copy=False), backprop.astype(dtype, copy=False)

    def gradient(self, op, grad_loss, grad_backprop):
        logits, labels = op.inputs
        axis = op.get_attr("axis") % logits.shape.ndims if logits.shape.ndims \
            else op.get_attr("axis")
        g = _expand_to(grad_loss, logits, axis)
        d_logits = g * op.outputs[1]
        d_labels = g * math_ops.negative(log_softmax(logits, axis=axis))
        if not _is_zero(grad_backprop):
            # backprop_i = S p_i - labels_i with S = sum(labels): differentiate it too.
            p = softmax(logits, axis=axis)
            gp = reduce_sum(grad_backprop * p, axis=axis, keepdims=True)
            total = reduce_sum(labels, axis=axis, keepdims=True)
            d_logits = d_logits + total * (grad_backprop - gp) * p
            d_labels = d_labels + (gp - grad_backprop)
        return [d_logits, d_labels]


@register_op("SparseSoftmaxCrossEntropyWithLogits")
class SparseSoftmaxCrossEntropyWithLogitsOp(OpDef):
    """Inputs (features [..., classes], labels [...]); outputs (loss, backprop)."""

    tuple_outputs = True

    def infer(self, b):
        dt = require_dtype(b, 0, is_float, "logits")
        require_dtype(b, 1, is_index, "labels")
        logits, labels = b.shape(0), b.shape(1)
        if logits.ndims is None:
            return [(dt, labels), (dt, logits)]
        if logits.ndims == 0:
            raise b.error("logits must have rank >= 1", got=logits)
        batch = logits[:-1]
        if not batch.is_compatible_with(labels):
            raise b.error("labels must have the shape of logits without its last dimension",
                          expected=f"labels of shape {batch} (logits {logits})", got=labels)
        batch = batch.merge_with(labels)
        return [(dt, batch), (dt, batch.as_list() + [logits[-1]])]

    def forward(self, xp, ctx, logits, labels):
        classes = logits.shape[-1]
        if labels.shape != logits.shape[:-1]:
            raise errors.op_error(errors.InvalidArgumentError, "labels do not match logits",
                                  ctx.op, expected=f"labels of shape {logits.shape[:-1]}",
                                  got=f"shape {labels.shape}")
        flat_labels = labels.reshape(-1)
        if flat_labels.size and (flat_labels.min() < 0 or flat_labels.max() >= classes):
            bad = flat_labels[(flat_labels < 0) | (flat_labels >= classes)][0]
            raise errors.op_error(
                errors.InvalidArgumentError, f"Received a label value of {int(bad)} which is "
                f"outside the valid range of [0, {classes})", ctx.op)
        log_probs = log_softmax_kernel(xp, in_float32_if_half(logits.reshape(-1, classes)), 1)
        rows = xp.arange(flat_labels.size)
        loss = -log_probs[rows, flat_labels]
        backprop = xp.exp(log_probs)
        backprop[rows, flat_labels] -= 1
        return (loss.reshape(labels.shape).astype(logits.dtype, copy=False),
                backprop.reshape(logits.shape).astype(logits.dtype, copy=False))

    def gpu_forward(self, xp, ctx, logits, labels):
        """As TensorFlow's GPU kernel: no range check (reading the labels back would stall
        the GPU every step); a label outside [0, classes) gives NaN loss and gradient.

        Up to ``_ROW_KERNEL_CLASSES`` classes, one GPU thread per example computes its
        row's log-sum-exp, loss and gradient in one launch; wider rows take the array
        calls (a dozen launches, each parallel over the classes too)."""
        classes = logits.shape[-1]
        if labels.shape != logits.shape[:-1]:
            return self.forward(xp, ctx, logits, labels)     # raises, naming the shapes
        flat_labels = labels.reshape(-1)
        if classes <= _ROW_KERNEL_CLASSES and has_kernel_for(xp, logits.dtype):
            loss = xp.empty(flat_labels.shape, dtype=logits.dtype)
            backprop = xp.empty(logits.shape, dtype=logits.dtype)
            _xent_rows_kernel(xp)(xp.ascontiguousarray(logits),
                                  xp.ascontiguousarray(flat_labels), classes, loss, backprop)
            return loss.reshape(labels.shape), backprop
        valid = (flat_labels >= 0) & (flat_labels < classes)
        safe = xp.where(valid, flat_labels, 0)
        log_probs = log_softmax_kernel(xp, in_float32_if_half(logits.reshape(-1, classes)), 1)
        rows = xp.arange(flat_labels.size)
        loss = -log_probs[rows, safe]
        backprop = xp.exp(log_probs)
        backprop[rows, safe] -= 1
        or_nan = elementwise_kernel(xp, "mf_or_nan", "T x, bool valid", "T out",
                                    'out = valid ? x : (T)nan("")')
        loss, backprop = or_nan(loss, valid), or_nan(backprop, valid[:, None])
        return (loss.reshape(labels.shape).astype(logits.dtype, copy=False),
                backprop.reshape(logits.shape).astype(logits.dtype, copy=False))

    def gradient(self, op, grad_loss, grad_backprop):
        logits = op.inputs[0]
        d_logits = _expand_to(grad_loss, logits, -1) * op.outputs[1]
        if not _is_zero(grad_backprop):
            p = softmax(logits)
            gp = reduce_sum(grad_backprop * p, axis=-1, keepdims=True)
            d_logits = d_logits + (grad_backprop - gp) * p
        return [d_logits, None]


_ROW_KERNEL_CLASSES = 1024


def _xent_rows_kernel(xp):
    """Per example (row ``i``): loss = log-sum-exp - shifted logit of the label, gradient =
    softmax - one-hot; NaN for both where the label is out of range."""
    return elementwise_kernel(
        xp, "mf_sparse_xent_rows", "raw T logits, raw I labels, int32 C",
        "T loss, raw T backprop", """
        const long long base = (long long)i * C;
        const long long label = labels[i];
        if (label < 0 || label >= C) {
            loss = (T)nan("");
            for (int k = 0; k < C; ++k) backprop[base + k] = (T)nan("");
        } else {
            T top = logits[base];
            for (int k = 1; k < C; ++k) top = max(top, logits[base + k]);
            T total = 0;
            for (int k = 0; k < C; ++k) total += exp(logits[base + k] - top);
            const T log_total = log(total);
            loss = log_total - (logits[base + label] - top);
            for (int k = 0; k < C; ++k)
                backprop[base + k] = exp(logits[base + k] - top - log_total) -
                                     (k == label ? (T)1 : (T)0);
        }
        """)


def softmax_cross_entropy_with_logits_v2(labels=None, logits=None, axis=-1, name=None,
                                         dim=None) -> Tensor:
    """Return -sum(labels * log_softmax(logits)) along ``axis``; gradients reach both.

    Stable for any logits (the max is subtracted first).
    """
    axis = dim if dim is not None else axis
    logits = convert_to_tensor(logits)
    labels = convert_to_tensor(labels, dtype=None if is_tensor_like(labels) else logits.dtype)
    return apply_op("SoftmaxCrossEntropyWithLogits", [logits, labels],
                    {"axis": static_axis(axis, "softmax_cross_entropy axis")},
                    name=name).outputs[0]


def softmax_cross_entropy_with_logits(labels=None, logits=None, axis=-1, name=None,
                                      dim=None) -> Tensor:
    """Return the softmax cross entropy as the v2 op, with no gradient into ``labels`` (TF1)."""
    logits = convert_to_tensor(logits)
    labels = convert_to_tensor(labels, dtype=None if is_tensor_like(labels) else logits.dtype)
    labels = stop_gradient(labels, name="labels_stop_gradient")
    return softmax_cross_entropy_with_logits_v2(labels, logits, axis=axis, name=name, dim=dim)


def sparse_softmax_cross_entropy_with_logits(labels=None, logits=None, name=None) -> Tensor:
    """Return -log_softmax(logits)[label] per example; labels are int32/int64 class ids.

    Raises:
        InvalidArgumentError: at build time for mismatched shapes; at run time, naming the
            op and the label, for a label outside [0, classes).
    """
    return apply_op("SparseSoftmaxCrossEntropyWithLogits",
                    [convert_to_tensor(logits), convert_to_tensor(labels)],
                    name=name).outputs[0]


# -- sigmoid cross entropy, l2_loss ---------------------------------------------------------

def sigmoid_cross_entropy_with_logits(labels=None, logits=None, name=None) -> Tensor:
    """Return the elementwise logistic loss max(x, 0) - x * z + log(1 + exp(-|x|)).

    Raises:
        InvalidArgumentError: labels and logits have different shapes.
    """
    with name_scope(name, "logistic_loss") as scope:
        labels, logits = _logistic_inputs(labels, logits, scope,
                                          "sigmoid_cross_entropy_with_logits")
        # The where form keeps the gradient exact at large |x| (no abs, no overflow).
        zeros = math_ops.zeros_like(logits)
        positive = math_ops.greater_equal(logits, zeros)
        relu_logits = math_ops.where(positive, logits, zeros)
        neg_abs_logits = math_ops.where(positive, math_ops.negative(logits), logits)
        return math_ops.add(relu_logits - logits * labels,
                            math_ops.log1p(math_ops.exp(neg_abs_logits)), name=scope)


def _logistic_inputs(labels, logits, scope, caller):
    """``labels`` and ``logits`` as tensors (numbers and arrays in the logits' dtype),
    checked to have the same shape."""
    logits = convert_to_tensor(logits)
    labels = convert_to_tensor(labels, dtype=None if is_tensor_like(labels) else logits.dtype)
    if not logits.shape.is_compatible_with(labels.shape):
        raise errors.InvalidArgumentError(
            f"labels and logits must have the same shape in '{scope[:-1]}' ({caller}): "
            f"expected labels of shape {logits.shape}, got {labels.shape}")
    return labels, logits


def weighted_cross_entropy_with_logits(labels=None, logits=None, pos_weight=None, name=None,
                                       targets=None) -> Tensor:
    """Return the logistic loss with the positive term weighted by ``pos_weight`` q:
    ``(1 - z) * x + (1 + (q - 1) * z) * log(1 + exp(-x))``, elementwise.

    q > 1 counts positive labels more (recall), q < 1 less (precision); q = 1 is
    ``sigmoid_cross_entropy_with_logits``. ``targets`` is TF1's older name for
    ``labels``. ``log(1 + exp(-x))`` is taken in the same where form as there, so the
    loss is stable at any |x| and its gradient exact everywhere: at a logit of exactly 0
    TensorFlow's abs/relu form gives ``1 - z`` as the gradient, without the
    ``-(1 + (q - 1) * z) / 2`` of ``log(1 + exp(-x))`` (see docs/tf1_api.md).

    Raises:
        InvalidArgumentError: labels and logits have different shapes, both ``labels``
            and ``targets`` (or neither) given, or no ``pos_weight``.
    """
    if (labels is None) == (targets is None):
        raise errors.InvalidArgumentError(
            "weighted_cross_entropy_with_logits: give labels (or TF1's older name "
            f"targets), not {'both' if labels is not None else 'neither'}")
    if pos_weight is None:
        raise errors.InvalidArgumentError(
            "weighted_cross_entropy_with_logits: pos_weight must be given, a number or a "
            "tensor that broadcasts to the logits")
    with name_scope(name, "logistic_loss") as scope:
        labels, logits = _logistic_inputs(labels if targets is None else targets, logits,
                                          scope, "weighted_cross_entropy_with_logits")
        pos_weight = convert_to_tensor(
            pos_weight, dtype=None if is_tensor_like(pos_weight) else logits.dtype)
        zeros = math_ops.zeros_like(logits)
        positive = math_ops.greater_equal(logits, zeros)
        # log(1 + exp(-x)) = log1p(exp(-|x|)) + max(-x, 0), each part by where.
        softplus_negative = math_ops.add(
            math_ops.log1p(math_ops.exp(math_ops.where(positive, -logits, logits))),
            math_ops.where(positive, zeros, -logits))
        log_weight = 1 + (pos_weight - 1) * labels
        return math_ops.add((1 - labels) * logits, log_weight * softplus_negative,
                            name=scope)


@register_op("L2Loss")
class L2LossOp(OpDef):
    def infer(self, b):
        return [(require_dtype(b, 0, is_float), [])]

    def forward(self, xp, ctx, x):
        # Squares and their sum in float32 for half floats (rounded once), as TensorFlow's.
        x = x.astype(math_ops.accumulating_dtype(xp, x.dtype), copy=False)
        return xp.asarray((x * x).sum() / 2, dtype=ctx.op.outputs[0].dtype.np_dtype)

    def gradient(self, op, g):
        return [op.inputs[0] * g]


def l2_loss(t, name=None) -> Tensor:
    """Return sum(t ** 2) / 2."""
    return apply_op("L2Loss", [convert_to_tensor(t)], name=name).outputs[0]
