"""Convolution over NHWC or NCHW images: Conv2D and its gradient ops.

conv2d is im2col: a strided view of the padded input's windows (no copy) contracted
with the filter in one ``tensordot``. Conv2DBackpropFilter is the same contraction with
out_backprop; Conv2DBackpropInput contracts out_backprop with the filter and scatters
with col2im, looping over the kh*kw taps of the window, never over pixels. float16 and
bfloat16 contract in float32 where the array module does not (``accumulating_dtype``),
col2im's sums included, and round once. Each gradient op's gradient is conv2d or the
other backprop op. The kernels compute on NHWC arrays; an NCHW op's images are transposed
to NHWC and back around them (``windows.NhwcKernels``). Window geometry lives in
``windows.py``, pooling in ``pooling_ops.py``.
"""

from __future__ import annotations

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.graph import Tensor
from mpiflow.framework.scopes import name_scope
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops import array_ops, math_ops
from mpiflow.ops.constant_ops import convert_to_tensor, is_tensor_like
from mpiflow.ops.registry import (
    OpDef, elementwise_kernel, has_fused_kernels, has_kernel_for, is_float, is_index,
    register_op, require_dtype, same_dtype)
from mpiflow.ops.windows import (
    WINDOW_PARAMS, NhwcKernels, Window, apply_single, check_layout, data_format, four,
    rank4, sizes, spatial_attr, windowed_shape)

_CONV_ATTRS = {"strides": [1, 1, 1, 1], "padding": "VALID", "data_format": "NHWC",
               "dilations": [1, 1, 1, 1]}


class _ConvBase(NhwcKernels, OpDef):
    def prepare(self, ctx):
        super().prepare(ctx)
        ctx.strides = ctx.layout.spatial(ctx.attrs["strides"])
        ctx.dilations = ctx.layout.spatial(ctx.attrs["dilations"])

    def window(self, ctx, x_shape, f_shape):
        Window.check_rank(x_shape, "input")
        Window.check_rank(f_shape, "filter")
        if x_shape[3] != f_shape[2]:
            raise ValueError(f"filter in_channels {f_shape[2]} != input channels {x_shape[3]}")
        return Window(x_shape[1], x_shape[2], f_shape[:2], ctx.strides, ctx.dilations,
                       ctx.attrs["padding"])

    def check(self, b, x, f):
        """Validate attrs and shapes of input ``x`` and filter ``f``; return the output."""
        check_layout(b)
        d_hw = spatial_attr(b, "dilations")
        channels = x[data_format(b.attrs).channel_axis]
        if channels is not None and f[2] is not None and channels != f[2]:
            raise b.error("filter in_channels must equal the input's channels",
                          expected=f"filter[2] == {channels} (input {x}, "
                          f"{b.attrs['data_format']})", got=f"filter {f}")
        return windowed_shape(b, x, (f[0], f[1]), d_hw, f[3])


def _conv_attrs(op):
    return {key: op.get_attr(key) for key in _CONV_ATTRS}


def _conv_dtype(dt):
    """a floating dtype or int32 (TensorFlow's Conv2D takes no other integers)"""
    return dt.is_floating or dt is dtypes.int32


@register_op("Conv2D", attrs=_CONV_ATTRS)
class Conv2DOp(_ConvBase):
    image_inputs = {0: "input"}
    def infer(self, b):
        dt = same_dtype(b)
        # int32 is computed in int32 (wrapping as TensorFlow's CPU kernel); its gradient
        # is never asked for: gradients flow through floating tensors only.
        require_dtype(b, 0, _conv_dtype)
        return [(dt, self.check(b, rank4(b, 0, "input"), rank4(b, 1, "filter")))]

    def forward(self, xp, ctx, x, f):
        win = self.window(ctx, x.shape, f.shape)
        wide = math_ops.accumulating_dtype(xp, x.dtype)
        out = xp.tensordot(win.view(xp, win.pad(xp, x.astype(wide, copy=False))),
                           f.astype(wide, copy=False), axes=((3, 4, 5), (0, 1, 2)))
        return out.astype(x.dtype, copy=False)

    def gradient(self, op, g):
        x, f = op.inputs
        attrs = _conv_attrs(op)
        return [apply_single("Conv2DBackpropInput", [math_ops.shape(x), f, g], attrs),
                apply_single("Conv2DBackpropFilter", [x, math_ops.shape(f), g], attrs)]


@register_op("Conv2DBackpropInput", attrs=_CONV_ATTRS)
class Conv2DBackpropInputOp(_ConvBase):
    """Inputs (input_sizes, filter, out_backprop): d conv2d / d input."""
    host_inputs = (0,)
    image_inputs = {2: "out_backprop"}
    size_inputs = (0,)

    def infer(self, b):
        require_dtype(b, 0, is_index, "input_sizes")
        if not b.shape(0).is_compatible_with([4]):
            raise b.error("input_sizes must hold the 4 sizes of the input",
                          expected="a shape of 4 values", got=b.shape(0))
        dt = same_dtype(b, [1, 2])
        require_dtype(b, 1, is_float)
        x = math_ops.shape_from_tensor(b.inputs[0])
        x = x if x.ndims == 4 else TensorShape([None] * 4)
        out = self.check(b, x, rank4(b, 1, "filter"))
        dy = rank4(b, 2, "out_backprop")
        if not dy.is_compatible_with(out):
            raise b.error("out_backprop does not match the conv2d output", expected=out,
                          got=dy)
        return [(dt, x)]

    def columns(self, xp, ctx, input_sizes, f, dy, wide):
        """(window, input shape, [N, OH, OW, KH, KW, C] columns in dtype ``wide``): dy
        contracted with the filter, what col2im scatters back onto the input."""
        shape = sizes(input_sizes)
        win = self.window(ctx, shape, f.shape)
        win.check_output(dy.shape, "out_backprop")
        cols = xp.tensordot(dy.astype(wide, copy=False), f.astype(wide, copy=False),
                            axes=((3,), (3,)))
        return win, shape, cols

    def forward(self, xp, ctx, input_sizes, f, dy):
        wide = math_ops.accumulating_dtype(xp, dy.dtype)
        win, (n, _, _, c), cols = self.columns(xp, ctx, input_sizes, f, dy, wide)
        dx = win.zeros_padded(xp, n, c, wide)
        for i, j, index in win.taps():
            dx[index] += cols[:, :, :, i, j, :]
        return win.crop(xp, dx).astype(dy.dtype, copy=False)

    def gpu_forward(self, xp, ctx, input_sizes, f, dy):
        """col2im as one GPU kernel: each input element sums the taps that read it, in
        the host kernel's tap order (the same sums, bit for bit), instead of a strided
        add per tap into a padded buffer and a crop."""
        if not has_fused_kernels(xp):
            return self.forward(xp, ctx, input_sizes, f, dy)
        # Half floats: the taps are summed in float32 too, and rounded once.
        wide = dy.dtype if has_kernel_for(xp, dy.dtype) else np.dtype(np.float32)
        win, shape, cols = self.columns(xp, ctx, input_sizes, f, dy, wide)
        dx = xp.empty(shape, dtype=wide)
        _col2im_kernel(xp)(xp.ascontiguousarray(cols), shape[3], *win.geometry(), dx)
        return dx.astype(dy.dtype, copy=False)

    def gradient(self, op, gg):
        _, f, dy = op.inputs
        attrs = _conv_attrs(op)
        return [None, apply_single("Conv2DBackpropFilter", [gg, math_ops.shape(f), dy], attrs),
                apply_single("Conv2D", [gg, f], attrs)]


def _col2im_kernel(xp):
    return elementwise_kernel(xp, "mf_col2im", "raw T cols, int32 C, " + WINDOW_PARAMS,
                              "T dx", """
        int c = i % C, rest = i / C;
        int w = rest % W; rest /= W;
        int h = rest % H; long long n = rest / H;
        T sum = 0;
        for (int a = 0; a < KH; ++a) {
            int hh = h + PT - a * DH;
            if (hh < 0 || hh % SH != 0 || hh / SH >= OH) continue;
            for (int b = 0; b < KW; ++b) {
                int ww = w + PL - b * DW;
                if (ww < 0 || ww % SW != 0 || ww / SW >= OW) continue;
                sum += cols[((((n * OH + hh / SH) * OW + ww / SW) * KH + a) * KW + b) * C
                            + c];
            }
        }
        dx = sum;
        """)


@register_op("Conv2DBackpropFilter", attrs=_CONV_ATTRS)
class Conv2DBackpropFilterOp(_ConvBase):
    """Inputs (input, filter_sizes, out_backprop): d conv2d / d filter."""
    host_inputs = (1,)
    image_inputs = {0: "input", 2: "out_backprop"}
    image_output = False

    def infer(self, b):
        require_dtype(b, 1, is_index, "filter_sizes")
        dt = same_dtype(b, [0, 2])
        require_dtype(b, 0, is_float)
        f = math_ops.shape_from_tensor(b.inputs[1])
        f = f if f.ndims == 4 else TensorShape([None] * 4)
        out = self.check(b, rank4(b, 0, "input"), f)
        dy = rank4(b, 2, "out_backprop")
        if not dy.is_compatible_with(out):
            raise b.error("out_backprop does not match the conv2d output", expected=out,
                          got=dy)
        return [(dt, f)]

    def forward(self, xp, ctx, x, filter_sizes, dy):
        win = self.window(ctx, x.shape, sizes(filter_sizes))
        win.check_output(dy.shape, "out_backprop")
        wide = math_ops.accumulating_dtype(xp, x.dtype)
        out = xp.tensordot(win.view(xp, win.pad(xp, x.astype(wide, copy=False))),
                           dy.astype(wide, copy=False), axes=((0, 1, 2), (0, 1, 2)))
        return out.astype(x.dtype, copy=False)

    def gradient(self, op, gg):
        x, _, dy = op.inputs
        attrs = _conv_attrs(op)
        return [apply_single("Conv2DBackpropInput", [math_ops.shape(x), gg, dy], attrs), None,
                apply_single("Conv2D", [x, gg], attrs)]


def _conv_attr_values(strides, padding, data_format, dilations):
    return {"strides": four(strides, "strides", data_format), "padding": padding,
            "data_format": data_format,
            "dilations": four(dilations or 1, "dilations", data_format)}


def conv2d(input, filter=None, strides=None, padding=None, use_cudnn_on_gpu=True,
           data_format="NHWC", dilations=None, name=None, filters=None) -> Tensor:
    """Return the 2-D convolution (cross-correlation, as TensorFlow) of ``input``.

    Args:
        input: [batch, height, width, in_channels], or [batch, in_channels, height,
            width] with data_format "NCHW" (transposed to NHWC and back around the
            kernel, see ``windows.NhwcKernels``).
        filter: [filter_height, filter_width, in_channels, out_channels].
        strides: an int, [h, w] or [1, h, w, 1] ([1, 1, h, w] for NCHW).
        padding: "SAME" or "VALID".
        data_format: "NHWC" or "NCHW".
        dilations: an int, [h, w] or four ints as strides (default 1).

    Raises:
        InvalidArgumentError: at build time, naming the op, for mismatched channels, a bad
            padding or data_format, or an input smaller than the filter under VALID.
    """
    x = convert_to_tensor(input)
    f = filters if filter is None else filter
    f = convert_to_tensor(f, dtype=None if is_tensor_like(f) else x.dtype)
    return apply_single("Conv2D", [x, f],
                        _conv_attr_values(strides, padding, data_format, dilations), name)


def conv2d_backprop_input(input_sizes, filter, out_backprop, strides, padding,
                          use_cudnn_on_gpu=True, data_format="NHWC", dilations=None,
                          name=None) -> Tensor:
    """Return the gradient of conv2d with respect to its input (of shape input_sizes)."""
    return apply_single("Conv2DBackpropInput",
                        [convert_to_tensor(input_sizes), convert_to_tensor(filter),
                         convert_to_tensor(out_backprop)],
                        _conv_attr_values(strides, padding, data_format, dilations), name)


def conv2d_backprop_filter(input, filter_sizes, out_backprop, strides, padding,
                           use_cudnn_on_gpu=True, data_format="NHWC", dilations=None,
                           name=None) -> Tensor:
    """Return the gradient of conv2d with respect to its filter (of shape filter_sizes)."""
    return apply_single("Conv2DBackpropFilter",
                        [convert_to_tensor(input), convert_to_tensor(filter_sizes),
                         convert_to_tensor(out_backprop)],
                        _conv_attr_values(strides, padding, data_format, dilations), name)


def conv2d_transpose(value=None, filter=None, output_shape=None, strides=None,
                     padding="SAME", data_format="NHWC", name=None, input=None, filters=None,
                     dilations=None) -> Tensor:
    """Return the transposed convolution of ``value`` (a decoder's or generator's
    upsampling), as TensorFlow: the gradient of conv2d with respect to its input, the
    Conv2DBackpropInput op named ``conv2d_transpose``.

    Args:
        value: [batch, height, width, in_channels] (NCHW with data_format "NCHW").
        filter: [filter_height, filter_width, out_channels, in_channels], the filter of
            the conv2d this is the transpose of.
        output_shape: the 4 sizes of the result (a list, which may hold a computed batch
            size, or a 1-D int tensor); conv2d of a tensor of that shape with these
            strides and padding must give ``value``'s shape.
        strides, padding, dilations: those of that conv2d.

    Raises:
        InvalidArgumentError: at build time, naming the op, where value's channels are not
            filter[3], output_shape's are not filter[2], or the shapes do not fit.
    """
    x = convert_to_tensor(input if value is None else value)
    f = filters if filter is None else filter
    f = convert_to_tensor(f, dtype=None if is_tensor_like(f) else x.dtype)
    if output_shape is None:
        raise errors.InvalidArgumentError("conv2d_transpose needs output_shape: the 4 sizes "
                                          "of its result")
    with name_scope(name, "conv2d_transpose", [x, f]) as scope:
        sizes_t = convert_to_tensor(output_shape, dtype=dtypes.int32) \
            if not is_tensor_like(output_shape) else convert_to_tensor(output_shape)
        axis = 3 if data_format == "NHWC" else 1
        out = math_ops.shape_from_tensor(sizes_t)
        for what, shape, f_axis, f_name in (("value", x.shape, 3, "in_channels"),
                                            ("output_shape", out, 2, "out_channels")):
            _check_transpose_channels(what, shape, axis, f.shape, f_axis, f_name)
        return apply_single("Conv2DBackpropInput", [sizes_t, f, x],
                            _conv_attr_values(strides, padding, data_format, dilations),
                            scope)


def _check_transpose_channels(what, shape, axis, f_shape, f_axis, f_name):
    """Refuse, naming conv2d_transpose, a ``what`` whose channels are not filter[f_axis]
    (the op's own check speaks of conv2d's input and filter, not of these arguments)."""
    if shape.ndims != 4 or f_shape.ndims != 4:
        return
    channels, want = shape[axis], f_shape[f_axis]
    if channels is not None and want is not None and channels != want:
        raise errors.InvalidArgumentError(
            f"conv2d_transpose: {what}'s channels must equal the filter's {f_name} "
            f"(filter[{f_axis}] of [height, width, out_channels, in_channels]): expected "
            f"{want} (filter {f_shape}), got {channels} ({what} {shape})")


# conv1d's data formats -> (the conv2d format it runs as, the axis the height of 1 is
# inserted at).
_CONV1D_FORMATS = {"NWC": ("NHWC", 1), "NCW": ("NCHW", 2)}


def _one(value, what):
    """conv1d's stride or dilation (an int, or a list of 1 or 3 ints, the middle one the
    width's) as the width's int."""
    if isinstance(value, (int, np.integer)):
        return int(value)
    value = [int(v) for v in value]
    if len(value) == 1:
        return value[0]
    if len(value) == 3:
        return value[1]
    raise errors.InvalidArgumentError(f"conv1d: {what} must be an int or a list of 1 or 3 "
                                      f"ints, got {value}")


def conv1d(value=None, filters=None, stride=None, padding=None, use_cudnn_on_gpu=None,
           data_format=None, name=None, input=None, dilations=None) -> Tensor:
    """Return the 1-D convolution of ``value``, as TensorFlow builds it: a conv2d over a
    height of 1 (ExpandDims of value and filters, Conv2D, Squeeze), so its gradient is
    conv2d's.

    Args:
        value: [batch, width, in_channels] ("NWC", the default) or [batch, in_channels,
            width] ("NCW").
        filters: [filter_width, in_channels, out_channels].
        stride: an int, or a list of 1 or 3 ints.
        padding: "SAME" or "VALID".
        dilations: as stride (default 1).
    """
    x = convert_to_tensor(input if value is None else value)
    f = convert_to_tensor(filters, dtype=None if is_tensor_like(filters) else x.dtype)
    layout = data_format or "NWC"
    if layout not in _CONV1D_FORMATS:
        raise errors.InvalidArgumentError(f"conv1d: data_format must be 'NWC' or 'NCW', "
                                          f"got {data_format!r}")
    if stride is None:
        raise errors.InvalidArgumentError("conv1d: stride is required: an int, or a list "
                                          "of 1 or 3 ints")
    conv_format, axis = _CONV1D_FORMATS[layout]
    for t, what in ((x, "value"), (f, "filters")):
        if t.shape.ndims not in (None, 3):
            raise errors.InvalidArgumentError(f"conv1d: {what} must be 3-D, got shape "
                                              f"{t.shape}")
    with name_scope(name, "conv1d", [x, f]) as scope:
        y = conv2d(array_ops.expand_dims(x, axis), array_ops.expand_dims(f, 0),
                   [1, _one(stride, "stride")], padding, data_format=conv_format,
                   dilations=[1, _one(dilations or 1, "dilations")], name=scope)
        return array_ops.squeeze(y, [axis])
