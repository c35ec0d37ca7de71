"""Window geometry shared by the convolution and pooling ops.

Owns TensorFlow's SAME/VALID rule
``pad_total = max((ceil(in / stride) - 1) * stride + (k - 1) * dilation + 1 - in, 0)``
(``pad_total // 2`` before), the strided no-copy view of every window (im2col), the
kh*kw taps col2im loops over (never over pixels), the attr and shape checks the shape
functions share, and the two data formats (``DataFormat``): the kernels compute on NHWC
arrays, and ``NhwcKernels`` runs them for an NCHW op. Registers no ops; imports only the
framework and the registry.
"""

from __future__ import annotations

import numpy as np

from mpiflow import errors
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops.registry import apply_op

PADDINGS = ("SAME", "VALID")


class DataFormat:
    """Where an image op's shapes and window attrs keep batch, height, width, channels.

    ``to_nhwc`` is the permutation that takes this format's axes to NHWC, ``from_nhwc``
    its inverse; both reorder shapes, attr lists and (``transpose``) arrays.
    """

    def __init__(self, name: str, to_nhwc: tuple):
        self.name = name
        self.to_nhwc = to_nhwc
        self.from_nhwc = tuple(int(a) for a in np.argsort(to_nhwc))
        self.channel_axis = to_nhwc[3]

    def nhwc(self, seq) -> list:
        """Return ``seq`` (a shape or a [1, h, w, 1]-style attr of this format) in NHWC
        order."""
        return [seq[a] for a in self.to_nhwc]

    def own(self, seq) -> list:
        """Return NHWC-ordered ``seq`` in this format's order."""
        return [seq[a] for a in self.from_nhwc]

    def spatial(self, seq) -> tuple:
        """Return (height, width) of a shape or window attr of this format."""
        _, h, w, _ = self.nhwc(seq)
        return h, w


NHWC = DataFormat("NHWC", (0, 1, 2, 3))
NCHW = DataFormat("NCHW", (0, 2, 3, 1))
DATA_FORMATS = {f.name: f for f in (NHWC, NCHW)}


def data_format(attrs) -> DataFormat:
    """The DataFormat an op's ``data_format`` attr names (NHWC for a name the shape
    function refuses: ``check_layout`` raises before it matters)."""
    return DATA_FORMATS.get(attrs["data_format"], NHWC)


class NhwcKernels:
    """Mixin of the window ops: runs their NHWC kernels for an NCHW op too.

    mpiflow has one kernel per window op and it computes on NHWC arrays (im2col views,
    col2im taps, the GPU kernels' index arithmetic). For an op whose ``data_format`` is
    NCHW, the kernel gets its image inputs transposed to NHWC and its image-shape inputs
    reordered, and its image result is transposed back: a copy of each image each way,
    which is all NCHW costs here (the numbers are the NHWC kernel's). Ops name their
    image inputs in ``image_inputs`` ({index: name}) and their image-shape inputs in
    ``size_inputs``, and say in ``image_output`` whether the result is an image (a
    filter gradient is not).
    """

    image_inputs = {}
    size_inputs = ()
    image_output = True

    def prepare(self, ctx):
        ctx.layout = data_format(ctx.attrs)

    def kernel_for(self, xp):
        nhwc_kernel = super().kernel_for(xp)

        def kernel(xp, ctx, *inputs):
            layout = ctx.layout
            if layout is NHWC:
                return nhwc_kernel(xp, ctx, *inputs)
            inputs = list(inputs)
            for i, what in self.image_inputs.items():
                Window.check_rank(inputs[i].shape, what, layout)
                inputs[i] = xp.ascontiguousarray(xp.transpose(inputs[i], layout.to_nhwc))
            for i in self.size_inputs:
                inputs[i] = np.asarray(layout.nhwc(sizes(inputs[i])), dtype=np.int64)
            out = nhwc_kernel(xp, ctx, *inputs)
            if not self.image_output:
                return out
            return xp.ascontiguousarray(xp.transpose(out, layout.from_nhwc))

        return kernel


def output_size(size, k, stride, dilation, padding):
    """Return (out, pad_before, pad_after) of one spatial dim under TensorFlow's rule."""
    effective = (k - 1) * dilation + 1
    if padding == "VALID":
        return (size - effective) // stride + 1, 0, 0
    out = -(-size // stride)
    total = max((out - 1) * stride + effective - size, 0)
    return out, total // 2, total - total // 2


class Window:
    """The geometry of one call on an NHWC input of spatial size (h, w)."""

    @staticmethod
    def check_rank(shape, what, layout=NHWC):
        """Raise ValueError unless ``shape`` is 4-D (``layout``): shapes the graph left
        unknown are checked when the kernel runs, as the shape functions check known
        ones."""
        if len(shape) != 4:
            raise ValueError(f"{what} must be 4-D ({layout.name}), got shape "
                             f"{tuple(shape)}")

    def __init__(self, h, w, ksize, strides, dilations, padding):
        self.h, self.w = h, w
        (self.kh, self.kw), (self.sh, self.sw), (self.dh, self.dw) = ksize, strides, dilations
        self.oh, top, bottom = output_size(h, self.kh, self.sh, self.dh, padding)
        self.ow, left, right = output_size(w, self.kw, self.sw, self.dw, padding)
        if self.oh < 1 or self.ow < 1:
            raise ValueError(f"input of spatial size {(h, w)} is smaller than the window "
                             f"{(self.kh, self.kw)} (dilations {(self.dh, self.dw)}) with "
                             f"{padding} padding")
        self.pads = ((0, 0), (top, bottom), (left, right), (0, 0))

    def check_output(self, shape, what):
        """Raise ValueError unless ``shape`` (NHWC) has this window's output size."""
        if tuple(shape[1:3]) != (self.oh, self.ow):
            raise ValueError(f"{what} has spatial size {tuple(shape[1:3])}, expected the "
                             f"output size {(self.oh, self.ow)}")

    def pad(self, xp, x, value=0):
        """Return ``x`` padded with ``value`` (``x`` itself when there is no padding)."""
        if not any(any(p) for p in self.pads):
            return x
        return xp.pad(x, self.pads, constant_values=value)

    def zeros_padded(self, xp, n, c, dtype):
        """Return zeros of the padded input's shape (col2im accumulates into it)."""
        _, (top, bottom), (left, right), _ = self.pads
        return xp.zeros((n, self.h + top + bottom, self.w + left + right, c), dtype=dtype)

    def crop(self, xp, padded):
        """Return the unpadded input region of ``padded``, contiguous."""
        _, (top, _), (left, _), _ = self.pads
        return xp.ascontiguousarray(padded[:, top:top + self.h, left:left + self.w, :])

    def view(self, xp, padded):
        """Return the windows of ``padded`` as a [N, OH, OW, KH, KW, C] view (no copy)."""
        n, _, _, c = padded.shape
        s_n, s_h, s_w, s_c = padded.strides
        return xp.lib.stride_tricks.as_strided(
            padded, (n, self.oh, self.ow, self.kh, self.kw, c),
            (s_n, s_h * self.sh, s_w * self.sw, s_h * self.dh, s_w * self.dw, s_c))

    def taps(self):
        """Yield (i, j, index): the padded-input region tap (i, j) of every window reads."""
        for i in range(self.kh):
            for j in range(self.kw):
                top, left = i * self.dh, j * self.dw
                yield i, j, (slice(None),
                             slice(top, top + (self.oh - 1) * self.sh + 1, self.sh),
                             slice(left, left + (self.ow - 1) * self.sw + 1, self.sw),
                             slice(None))

    def counts(self, xp, dtype):
        """Return how many real (unpadded) inputs each window covers, as [1, OH, OW, 1]."""
        rows = _covered(self.h, self.oh, self.kh, self.sh, self.pads[1][0])
        cols = _covered(self.w, self.ow, self.kw, self.sw, self.pads[2][0])
        return xp.asarray(np.outer(rows, cols).reshape(1, self.oh, self.ow, 1), dtype=dtype)


    def geometry(self):
        """(H, W, OH, OW, KH, KW, SH, SW, DH, DW, pad top, pad left): what a GPU kernel
        over this window needs, in the order ``WINDOW_PARAMS`` declares them."""
        return (self.h, self.w, self.oh, self.ow, self.kh, self.kw, self.sh, self.sw,
                self.dh, self.dw, self.pads[1][0], self.pads[2][0])


# The window geometry as GPU kernel parameters (``Window.geometry`` gives the values).
WINDOW_PARAMS = ("int32 H, int32 W, int32 OH, int32 OW, int32 KH, int32 KW, int32 SH, "
                 "int32 SW, int32 DH, int32 DW, int32 PT, int32 PL")


def _covered(size, out, k, stride, pad_before):
    start = np.arange(out) * stride - pad_before
    return np.minimum(start + k, size) - np.maximum(start, 0)


# -- shared attr and shape checks ----------------------------------------------------------

def spatial_attr(b, name):
    """Return (h, w) of a [1, h, w, 1] attr ([1, 1, h, w] for NCHW); raise naming the op
    otherwise."""
    value = b.attrs[name]
    layout = data_format(b.attrs)
    if len(value) != 4 or min(value) < 1 or layout.nhwc(value)[::3] != [1, 1]:
        form = ", ".join(layout.own(["1", "height", "width", "1"]))
        raise b.error(f"Bad {name}", expected=f"[{form}] of positive ints for "
                      f"{layout.name} (no windows over batch or channels)", got=list(value))
    return layout.spatial(value)


def check_layout(b):
    """Check the padding and data_format attrs; raise naming the op."""
    if b.attrs["padding"] not in PADDINGS:
        raise b.error("Unsupported padding", expected="'SAME' or 'VALID'",
                      got=repr(b.attrs["padding"]))
    if b.attrs["data_format"] not in DATA_FORMATS:
        raise b.error("Unsupported data_format", expected="'NHWC' or 'NCHW'",
                      got=repr(b.attrs["data_format"]))


def rank4(b, i, what):
    """Return input ``i``'s static shape as rank 4 (unknown dims when the rank is)."""
    s = b.shape(i)
    if s.ndims not in (None, 4):
        raise b.error(f"{what} must be 4-D", expected="rank 4", got=s)
    return s if s.ndims == 4 else TensorShape([None] * 4)


def _out_dim(b, size, k, stride, dilation):
    if size is None or k is None:
        return None
    out = output_size(size, k, stride, dilation, b.attrs["padding"])[0]
    if out < 1:
        raise b.error("Input is smaller than the window", expected=f"spatial size >= "
                      f"{(k - 1) * dilation + 1} for VALID padding", got=size)
    return out


def windowed_shape(b, x, k_hw, d_hw, channels):
    """Return the static output shape of windows (k_hw, dilations d_hw) over ``x``, both
    in the op's data format."""
    s_hw = spatial_attr(b, "strides")
    layout = data_format(b.attrs)
    n, h, w, _ = layout.nhwc([x[a] for a in range(4)])
    return TensorShape(layout.own([n] + [_out_dim(b, size, k_hw[a], s_hw[a], d_hw[a])
                                         for a, size in enumerate((h, w))] + [channels]))


def sizes(t):
    """Return a shape tensor's value as a tuple of Python ints."""
    return tuple(int(d) for d in t)


def four(value, what, data_format_name="NHWC"):
    """Normalize an int, [h, w] or four-int window attr to a list of four ints in the
    order of ``data_format_name`` ([1, h, w, 1] for NHWC, [1, 1, h, w] for NCHW), as
    TensorFlow places them."""
    if value is None:
        raise errors.InvalidArgumentError(f"{what} is required: an int, [h, w] or "
                                          "four ints")
    layout = DATA_FORMATS.get(data_format_name, NHWC)
    if isinstance(value, (int, np.integer)):
        value = [int(value)]
    value = [int(v) for v in value]
    if len(value) == 1:
        value = value * 2
    if len(value) == 2:
        return layout.own([1] + value + [1])
    if len(value) == 4:
        return value
    raise errors.InvalidArgumentError(
        f"{what} must be an int or a list of 1, 2 or 4 ints, got {value}")


def apply_single(type_name, inputs, attrs, name=None):
    """Add a single-output op; return its output."""
    return apply_op(type_name, inputs, attrs, name=name).outputs[0]
