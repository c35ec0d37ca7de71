"""Direct-loop references for windowed ops (conv2d, pooling), written for clarity on tiny
inputs: the spec the vectorized kernels are tested against."""

import numpy as np


def out_and_pad(size, k, stride, dilation, padding):
    """TensorFlow's rule, written out: (output size, padding before)."""
    effective = (k - 1) * dilation + 1
    if padding == "VALID":
        return (size - effective) // stride + 1, 0
    out = -(-size // stride)
    return out, max((out - 1) * stride + effective - size, 0) // 2


def ref_conv2d(x, f, strides, padding, dilations=(1, 1)):
    n, h, w, _ = x.shape
    kh, kw, _, channels = f.shape
    (sh, sw), (dh, dw) = strides, dilations
    oh, top = out_and_pad(h, kh, sh, dh, padding)
    ow, left = out_and_pad(w, kw, sw, dw, padding)
    out = np.zeros((n, oh, ow, channels))
    for r in range(oh):
        for c in range(ow):
            for i in range(kh):
                for j in range(kw):
                    y, z = r * sh + i * dh - top, c * sw + j * dw - left
                    if 0 <= y < h and 0 <= z < w:
                        out[:, r, c, :] += x[:, y, z, :] @ f[i, j]
    return out


def ref_pool(x, ksize, strides, padding, reduce):
    n, h, w, ch = x.shape
    (kh, kw), (sh, sw) = ksize, strides
    oh, top = out_and_pad(h, kh, sh, 1, padding)
    ow, left = out_and_pad(w, kw, sw, 1, padding)
    out = np.zeros((n, oh, ow, ch))
    for r in range(oh):
        for c in range(ow):
            y0, z0 = r * sh - top, c * sw - left
            window = x[:, max(y0, 0):y0 + kh, max(z0, 0):z0 + kw, :]
            out[:, r, c, :] = reduce(window.reshape(n, -1, ch), axis=1)
    return out
