"""Pooling over NHWC or NCHW images: MaxPool and AvgPool with their gradient ops.

MaxPool's gradient routes each window's gradient to its first maximum (MaxPoolGrad);
that scatter is linear, and its transpose MaxPoolGradGrad gathers at the same maxima, so
each is the other's gradient. AvgPool is linear and AvgPoolGrad is its transpose. SAME
padding pads max with -inf and averages only the real inputs, as TensorFlow. The kernels
compute on NHWC arrays; an NCHW op's images are transposed to NHWC and back around them
(``windows.NhwcKernels``). Window geometry lives in ``windows.py``.
"""

from __future__ import annotations

import numpy as np

from mpiflow.framework.graph import Tensor
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops import math_ops
from mpiflow.ops.constant_ops import convert_to_tensor
from mpiflow.ops.registry import (
    OpDef, elementwise_kernel, has_kernel_for, is_float, is_index, is_numeric, register_op,
    require_dtype, same_dtype)
from mpiflow.ops.windows import (
    WINDOW_PARAMS, NhwcKernels, Window, apply_single, check_layout, data_format, four,
    rank4, sizes, spatial_attr, windowed_shape)

_POOL_ATTRS = {"ksize": [1, 1, 1, 1], "strides": [1, 1, 1, 1], "padding": "VALID",
               "data_format": "NHWC"}


class _PoolBase(NhwcKernels, OpDef):
    image_inputs = {0: "input"}

    def prepare(self, ctx):
        super().prepare(ctx)
        ctx.ksize = ctx.layout.spatial(ctx.attrs["ksize"])
        ctx.strides = ctx.layout.spatial(ctx.attrs["strides"])

    def window(self, ctx, x_shape):
        Window.check_rank(x_shape, "input")
        return Window(x_shape[1], x_shape[2], ctx.ksize, ctx.strides, (1, 1),
                       ctx.attrs["padding"])

    def pooled_shape(self, b, x):
        """Validate attrs and the input shape ``x``; return the pooled shape."""
        check_layout(b)
        return windowed_shape(b, x, spatial_attr(b, "ksize"), (1, 1),
                              x[data_format(b.attrs).channel_axis])


def _pool_attrs(op):
    return {key: op.get_attr(key) for key in _POOL_ATTRS}


def _window_argmax(xp, win, x):
    """Return which tap (i * kw + j) holds each window's first maximum, [N, OH, OW, C]."""
    padded = win.pad(xp, x, -np.inf)
    best = arg = None
    for i, j, index in win.taps():
        value = padded[index]
        if best is None:
            best = value.copy()
            arg = xp.zeros(value.shape, dtype=np.int32)
            continue
        better = value > best
        xp.copyto(best, value, where=better)
        arg[better] = i * win.kw + j
    return arg


def _lowest(dtype):
    """What SAME padding pads a max with: -inf, or an integer dtype's least value (no
    window is all padding, so it is never the max)."""
    dtype = np.dtype(dtype)
    return np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf


@register_op("MaxPool", attrs=_POOL_ATTRS)
class MaxPoolOp(_PoolBase):
    def infer(self, b):
        # Integers too, in their dtype, as TensorFlow's CPU kernel (their gradient is
        # never asked for: gradients flow through floating tensors only).
        require_dtype(b, 0, is_numeric)
        return [(b.dtype(0), self.pooled_shape(b, rank4(b, 0, "input")))]

    def forward(self, xp, ctx, x):
        win = self.window(ctx, x.shape)
        return win.view(xp, win.pad(xp, x, _lowest(x.dtype))).max(axis=(3, 4))

    def gradient(self, op, g):
        return [apply_single("MaxPoolGrad", [op.inputs[0], g], _pool_attrs(op))]


@register_op("MaxPoolGrad", attrs=_POOL_ATTRS)
class MaxPoolGradOp(_PoolBase):
    """Inputs (orig_input, grad): route each window's gradient to its first maximum.

    Unlike TensorFlow's op it does not take orig_output, which it does not need.
    """
    image_inputs = {0: "orig_input", 1: "grad"}

    def infer(self, b):
        dt = same_dtype(b)
        x = rank4(b, 0, "orig_input")
        out = self.pooled_shape(b, x)
        if not rank4(b, 1, "grad").is_compatible_with(out):
            raise b.error("grad does not match the max_pool output", expected=out,
                          got=b.shape(1))
        return [(dt, x)]

    def forward(self, xp, ctx, x, g):
        win = self.window(ctx, x.shape)
        win.check_output(g.shape, "grad")
        arg = _window_argmax(xp, win, x)
        dx = win.zeros_padded(xp, x.shape[0], x.shape[3], g.dtype)
        for i, j, index in win.taps():
            dx[index] += g * (arg == i * win.kw + j)
        return win.crop(xp, dx)

    def gpu_forward(self, xp, ctx, x, g):
        """One GPU thread per window finds its first maximum (the taps in the order the
        host kernel scans them, padding as -inf) and adds the window's gradient there.
        Windows that overlap add into one input atomically, in no fixed order (as
        TensorFlow's GPU kernel)."""
        if not has_kernel_for(xp, g.dtype):
            return self.forward(xp, ctx, x, g)
        win = self.window(ctx, x.shape)
        win.check_output(g.shape, "grad")
        dx = xp.zeros(x.shape, dtype=g.dtype)
        _max_pool_grad_kernel(xp)(xp.ascontiguousarray(x), g, -np.inf, x.shape[3],
                                  *win.geometry(), dx)
        return dx

    def gradient(self, op, gg):
        # Linear in grad (a scatter); its adjoint gathers at the same maxima.
        return [None, apply_single("MaxPoolGradGrad", [op.inputs[0], gg], _pool_attrs(op))]


def _max_pool_grad_kernel(xp):
    return elementwise_kernel(
        xp, "mf_max_pool_grad", "raw T x, T g, T pad, int32 C, " + WINDOW_PARAMS,
        "raw T dx", """
        int c = i % C, rest = i / C;
        int ow = rest % OW; rest /= OW;
        int oh = rest % OH; long long n = rest / OH;
        long long best_at = -1;
        T best = 0;
        for (int a = 0; a < KH; ++a) {
            for (int b = 0; b < KW; ++b) {
                int h = oh * SH - PT + a, w = ow * SW - PL + b;
                bool inside = h >= 0 && h < H && w >= 0 && w < W;
                long long at = inside ? ((n * H + h) * W + w) * C + c : -1;
                T v = inside ? x[at] : pad;
                if ((a == 0 && b == 0) || v > best) { best = v; best_at = at; }
            }
        }
        if (best_at >= 0) atomicAdd(&dx[best_at], g);
        """)


@register_op("MaxPoolGradGrad", attrs=_POOL_ATTRS)
class MaxPoolGradGradOp(_PoolBase):
    """Inputs (orig_input, grad of the input): gather it at each window's first maximum."""
    image_inputs = {0: "orig_input", 1: "grad"}

    def infer(self, b):
        dt = same_dtype(b)
        x = rank4(b, 0, "orig_input")
        if not rank4(b, 1, "grad").is_compatible_with(x):
            raise b.error("grad does not match orig_input", expected=x, got=b.shape(1))
        return [(dt, self.pooled_shape(b, x))]

    def forward(self, xp, ctx, x, gg):
        win = self.window(ctx, x.shape)
        arg = _window_argmax(xp, win, x)
        padded = win.pad(xp, gg)
        out = xp.zeros(arg.shape, dtype=gg.dtype)
        for i, j, index in win.taps():
            xp.copyto(out, padded[index], where=arg == i * win.kw + j)
        return out

    def gradient(self, op, g):
        return [None, apply_single("MaxPoolGrad", [op.inputs[0], g], _pool_attrs(op))]


@register_op("AvgPool", attrs=_POOL_ATTRS)
class AvgPoolOp(_PoolBase):
    """Average over each window; SAME padding averages only the real (unpadded) inputs."""

    def infer(self, b):
        require_dtype(b, 0, is_float)
        return [(b.dtype(0), self.pooled_shape(b, rank4(b, 0, "input")))]

    def forward(self, xp, ctx, x):
        win = self.window(ctx, x.shape)
        return win.view(xp, win.pad(xp, x)).sum(axis=(3, 4)) / win.counts(xp, x.dtype)

    def gradient(self, op, g):
        return [apply_single("AvgPoolGrad", [math_ops.shape(op.inputs[0]), g],
                             _pool_attrs(op))]


@register_op("AvgPoolGrad", attrs=_POOL_ATTRS)
class AvgPoolGradOp(_PoolBase):
    """Inputs (orig_input_shape, grad): spread each window's gradient over its inputs."""
    host_inputs = (0,)
    image_inputs = {1: "grad"}
    size_inputs = (0,)

    def infer(self, b):
        require_dtype(b, 0, is_index, "orig_input_shape")
        x = math_ops.shape_from_tensor(b.inputs[0])
        x = x if x.ndims == 4 else TensorShape([None] * 4)
        out = self.pooled_shape(b, x)
        if not rank4(b, 1, "grad").is_compatible_with(out):
            raise b.error("grad does not match the avg_pool output", expected=out,
                          got=b.shape(1))
        return [(b.dtype(1), x)]

    def forward(self, xp, ctx, orig_input_shape, g):
        n, h, w, c = sizes(orig_input_shape)
        win = self.window(ctx, (n, h, w, c))
        win.check_output(g.shape, "grad")
        share = g / win.counts(xp, g.dtype)
        dx = win.zeros_padded(xp, n, c, g.dtype)
        for _, _, index in win.taps():
            dx[index] += share
        return win.crop(xp, dx)

    def gradient(self, op, gg):
        # AvgPoolGrad is the transpose of the linear map AvgPool.
        return [None, apply_single("AvgPool", [gg], _pool_attrs(op))]


def _pool(type_name, value, ksize, strides, padding, data_format, name):
    attrs = {"ksize": four(ksize, "ksize", data_format),
             "strides": four(strides, "strides", data_format),
             "padding": padding, "data_format": data_format}
    return apply_single(type_name, [convert_to_tensor(value)], attrs, name)


def max_pool(value, ksize, strides, padding, data_format="NHWC", name=None,
             input=None) -> Tensor:
    """Return the max over each ksize window of ``value`` (SAME pads with -inf).

    ``value`` is NHWC, or NCHW with data_format "NCHW" (transposed to NHWC and back
    around the kernel); ksize and strides are an int, [h, w] or four ints in the data
    format's order."""
    return _pool("MaxPool", value if input is None else input, ksize, strides, padding,
                 data_format, name)


def avg_pool(value, ksize, strides, padding, data_format="NHWC", name=None,
             input=None) -> Tensor:
    """Return the mean over each ksize window of ``value`` (SAME: real inputs only);
    NHWC or NCHW and the window attrs as ``max_pool``."""
    return _pool("AvgPool", value if input is None else input, ksize, strides, padding,
                 data_format, name)


max_pool2d = max_pool
avg_pool2d = avg_pool
